// DataParallel's state dicts (the optimizer's slices of every rank gathered, the model's parameters
// whole) and the shard table: which rank holds which elements of each parameter's optimizer state.
#include <map>
#include <optional>
#include <sstream>

#include <memgrad/distributed/data_parallel_impl.h>

namespace mg::distributed {

namespace {
// "state.<i>.<field>" -> (i, field); false for other keys.
bool parse_state_key(const std::string& key, const char* prefix, size_t* i, std::string* field) {
  const std::string p = prefix;
  if (key.compare(0, p.size(), p) != 0) return false;
  const size_t dot = key.find('.', p.size());
  const std::string digits = key.substr(p.size(), dot == std::string::npos ? std::string::npos : dot - p.size());
  MG_CHECK(!digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos,
           ValueError, "DataParallel::load_state_dict: malformed key '", key, "'");
  *i = size_t(std::stoul(digits));
  *field = dot == std::string::npos ? "" : key.substr(dot + 1);
  return true;
}

// The elements per value of `opt`'s state `field` for its tensor `t` (Optimizer::StateSpec::block):
// 0 for state kept per element (or not the optimizer's: a master).
int64_t block_of(const optim::Optimizer& opt, const Tensor& t, const std::string& field) {
  for (const optim::StateSpec& s : opt.state_layout(t))
    if (s.name == field) return s.block;
  return 0;
}
}  // namespace

void DataParallel::attach(optim::Optimizer& opt) const {
  const Impl& m = *impl_;
  if (m.options.zero_stage_ != 1 && m.options.zero_stage_ != 2) return;  // whole parameters, or units' pieces
  const std::vector<int64_t> index = m.optimizer_index(opt);
  size_t k = 0;
  for (auto& g : opt.param_groups())
    for (auto& t : g.params) {
      const Impl::Param& p = m.params[size_t(index[k++])];
      opt.set_slice(t, m.slice(p, m.rank).first, p.numel);
      for (const optim::StateSpec& s : opt.state_layout(t))
        MG_CHECK(s.block == 0 || p.chunk % s.block == 0, ValueError, "DataParallel::attach: ", opt.type(), " keeps '",
                 s.name, "' of '", p.name, "' in blocks of ", s.block, " elements, which slices of ", p.chunk,
                 " elements cut: build DataParallel with slice_multiple(", s.block, ")");
    }
}

optim::StateDict DataParallel::state_dict(const optim::Optimizer& opt) const {
  const Impl& m = *impl_;
  const std::vector<int64_t> index = m.optimizer_index(opt);
  // The optimizer's own keys, renamed from its parameter order to the constructor's.
  std::map<std::pair<size_t, std::string>, Tensor> local;
  optim::StateDict out;
  for (auto& [key, t] : opt.state_dict()) {
    size_t k;
    std::string field;
    if (parse_state_key(key, "state.", &k, &field)) {
      const size_t i = size_t(index.at(k));
      // Sharded state is gathered slice by slice: per element, or per block of the slice.
      const int64_t n = m.optimizer_tensor(i).numel(), block = block_of(opt, m.optimizer_tensor(i), field);
      MG_CHECK(m.options.zero_stage_ == 0 || field == "step" || t.numel() == (block ? (n + block - 1) / block : n),
               NotImplementedError, "DataParallel::state_dict: the optimizer state '", field, "' of '",
               m.params[i].name, "' has ", t.numel(), " elements for a slice of ", n,
               ": ZeRO gathers state kept per element or per block of its parameter, not factored moments; ",
               "save it with ZeRO stage 0");
      local[{i, field}] = t;
    } else {
      out[key] = t;
    }
  }
  if (m.masters)
    for (size_t i = 0; i < m.params.size(); ++i)
      if (Tensor t = m.optimizer_tensor(i); t.defined()) local[{i, "master"}] = t.detach();
  // The entries (and steps) of every rank, merged: a rank may hold no slice of some parameters.
  std::ostringstream manifest;
  for (auto& [key, t] : local)
    manifest << key.first << ' ' << key.second << ' ' << int(t.dtype()) << ' '
             << (key.second == "step" ? t.item<int64_t>() : 0) << ' '
             << (key.second == "master" ? 0 : block_of(opt, m.optimizer_tensor(key.first), key.second)) << '\n';
  struct Entry {
    int dtype;
    int64_t step, block;
  };
  std::map<std::pair<size_t, std::string>, Entry> entries;
  for (int r = 0; r < m.size; ++r) {
    std::istringstream in(m.group->broadcast(manifest.str(), r));
    size_t i;
    std::string field;
    Entry e;
    while (in >> i >> field >> e.dtype >> e.step >> e.block) entries[{i, field}] = e;
  }
  NoGradGuard ng;
  MemoryScope scope(Category::Temporary, "zero.state_dict");
  for (auto& [entry, value] : entries) {
    const auto& [i, field] = entry;
    const std::string key =
        field == "master" ? "master." + std::to_string(i) : "state." + std::to_string(i) + "." + field;
    auto it = local.find(entry);
    if (field == "step")
      out[key] = scalar_tensor(double(value.step), kInt64);
    else if (m.options.zero_stage_ == 0)
      out[key] = it->second;
    else
      out[key] = m.gather_slices(m.params[i], dtype_from_code(value.dtype), it == local.end() ? Tensor() : it->second,
                                 value.block);
  }
  return out;
}

nn::StateDict DataParallel::model_state_dict(const nn::Module& model) const {
  const Impl& m = *impl_;
  nn::StateDict out = model.state_dict();
  if (!m.units) return out;
  NoGradGuard ng;
  MemoryScope scope(Category::Temporary, "zero.state_dict");
  for (const auto& p : m.params) {
    auto it = out.find(p.name);
    MG_CHECK(it != out.end() && it->second.storage() == p.tensor.storage(), ValueError,
             "DataParallel::model_state_dict: expected the module whose parameters were given, got one without '",
             p.name, "'");
    it->second = m.gather_slices(p, p.tensor.dtype(), p.slice);
  }
  return out;
}

void DataParallel::load_model_state_dict(nn::Module& model, const nn::StateDict& dict) {
  Impl& m = *impl_;
  if (!m.units) return model.load_state_dict(dict);
  nn::StateDict rest = dict;  // buffers go through the module; every parameter is checked before any is written
  for (const auto& p : m.params) {
    auto it = rest.find(p.name);
    MG_CHECK(it != rest.end(), ValueError, "DataParallel::load_model_state_dict: no entry for parameter '", p.name,
             "'");
    MG_CHECK(it->second.shape() == p.tensor.shape() && it->second.dtype() == p.tensor.dtype(), ShapeError,
             "DataParallel::load_model_state_dict: '", p.name, "' expected ", shape_str(p.tensor.shape()), " ",
             p.tensor.dtype(), ", got ", shape_str(it->second.shape()), " ", it->second.dtype());
  }
  const nn::StateDict own = model.state_dict();
  for (auto& [key, t] : dict)
    MG_CHECK(own.count(key), ValueError, "DataParallel::load_model_state_dict: unexpected entry '", key, "'");
  NoGradGuard ng;
  for (const auto& p : m.params) {
    if (p.slice.defined()) Tensor(p.slice).copy_(m.my_slice(p, rest.at(p.name), p.name));
    rest.erase(p.name);
  }
  if (!rest.empty()) model.load_state_dict(rest, false);
}

void DataParallel::load_state_dict(optim::Optimizer& opt, const optim::StateDict& dict) {
  Impl& m = *impl_;
  const std::vector<int64_t> index = m.optimizer_index(opt);
  std::vector<int64_t> inner(m.params.size(), -1);  // constructor order -> the optimizer's
  for (size_t k = 0; k < index.size(); ++k) inner[size_t(index[k])] = int64_t(k);
  optim::StateDict mine;
  std::vector<std::pair<size_t, Tensor>> master_values;
  NoGradGuard ng;
  auto my_slice = [&m](size_t i, const Tensor& t, const std::string& key) { return m.my_slice(m.params[i], t, key); };
  for (auto& [key, t] : dict) {
    size_t i;
    std::string field;
    const bool master = parse_state_key(key, "master.", &i, &field);
    if (!master && !parse_state_key(key, "state.", &i, &field)) {
      mine[key] = t;  // param_groups.*: the optimizer checks them
      continue;
    }
    MG_CHECK(i < m.params.size(), ValueError, "DataParallel::load_state_dict: '", key, "' names parameter ", i,
             " but there are ", m.params.size());
    if (inner[i] < 0) continue;  // no slice of it on this rank
    if (master) {
      MG_CHECK(m.masters, ValueError, "DataParallel::load_state_dict: '", key,
               "' is a master weight, but the parameters are not half");
      master_values.emplace_back(i, my_slice(i, t, key));
    } else {  // stage 0: the optimizer checks the whole state itself (8-bit blocks, factored moments)
      const int64_t block = block_of(opt, m.optimizer_tensor(i), field);
      mine["state." + std::to_string(inner[i]) + "." + field] =
          field == "step" || m.options.zero_stage_ == 0 ? t : m.my_slice(m.params[i], t, key, block);
    }
  }
  std::optional<HostMemoryScope> in_host;  // offloaded: the state made here lives in host memory
  if (offloads_parameters()) in_host.emplace(m.params[0].tensor.device());
  opt.load_state_dict(mine);
  for (auto& [i, v] : master_values) m.optimizer_tensor(i).copy_(v);
}

std::string DataParallel::shard_table(const optim::Optimizer& opt) const {
  const Impl& m = *impl_;
  m.optimizer_index(opt);                          // checks that `opt` updates optimizer_parameters()
  std::vector<int64_t> bytes(m.params.size(), 0);  // this rank's state (and master) bytes per parameter
  for (size_t i = 0; i < m.params.size(); ++i)
    if (const Tensor& t = m.params[i].optimized; t.defined())
      bytes[i] = opt.state_bytes(t) + (m.masters ? int64_t(t.storage()->block() ? t.storage()->block()->size : 0) : 0);
  const std::vector<int64_t> all = m.group->all_gather(bytes);
  const size_t P = m.params.size();
  int width = 9;
  for (auto& p : m.params) width = std::max(width, int(p.name.size()));
  std::string out;
  char cell[160];
  auto add = [&out, &cell](int n) { out += std::string(cell, size_t(std::max(0, std::min(n, int(sizeof cell) - 1)))); };
  auto end_line = [&out] {
    out.erase(out.find_last_not_of(' ') + 1);
    out += "\n";
  };
  add(std::snprintf(cell, sizeof cell, "%-*s  %-14s", width, "parameter", "shape"));
  for (int r = 0; r < m.size; ++r)
    add(std::snprintf(cell, sizeof cell, "  %-30s", ("rank " + std::to_string(r) + ": elements: state B").c_str()));
  end_line();
  std::vector<int64_t> totals(size_t(m.size), 0);
  for (size_t i = 0; i < P; ++i) {
    const auto& p = m.params[i];
    add(std::snprintf(cell, sizeof cell, "%-*s  %-14s", width, p.name.c_str(), shape_str(p.tensor.shape()).c_str()));
    for (int r = 0; r < m.size; ++r) {
      const auto [begin, end] = m.slice(p, r);
      const int64_t b = all[size_t(r) * P + i];
      totals[size_t(r)] += b;
      const std::string range =
          end > begin ? "[" + std::to_string(begin) + ", " + std::to_string(end) + "): " + std::to_string(b) : "-";
      add(std::snprintf(cell, sizeof cell, "  %-30s", range.c_str()));
    }
    end_line();
  }
  add(std::snprintf(cell, sizeof cell, "%-*s  %-14s", width, "total", ""));
  for (int r = 0; r < m.size; ++r)
    add(std::snprintf(cell, sizeof cell, "  %-30lld", static_cast<long long>(totals[size_t(r)])));
  end_line();
  return out;
}

}  // namespace mg::distributed

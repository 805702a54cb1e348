#include <memgrad/distributed/data_parallel.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/memory.h>
#include <memgrad/ops/ops.h>
#include <memgrad/optim/clip.h>

namespace mg::distributed {

namespace {

using Clock = std::chrono::steady_clock;

// A fresh buffer for communication, booked under `category` and the owner `owner` (in the end
// absolute: the label does not stay nested inside whatever scope the caller, e.g. backward, runs in).
Tensor comm_buffer(int64_t n, DType dtype, const Device& device, Category category, const std::string& owner,
                   bool zeroed) {
  Tensor t;
  {
    MemoryScope scope(category, owner);
    t = zeroed ? zeros({n}, TensorOptions(dtype).device(device)) : empty({n}, TensorOptions(dtype).device(device));
  }
  t.storage()->set_category(category);
  t.storage()->set_owner(owner);
  return t;
}

// Copies between a flattened parameter-sized tensor `flat` (n elements) and its column in a
// rank-major buffer of `ranks` rows of `row` elements: rank r's slice [r c, r c + len_r) <-> row r,
// columns [col, col + len_r). Full rows move in one strided copy, the last partial row in another.
void copy_slices(const Tensor& buffer, int64_t ranks, int64_t row, int64_t col, int64_t c, const Tensor& flat,
                 bool into_buffer) {
  const int64_t n = flat.numel(), full = n / c, rest = n - full * c;
  const Tensor grid = buffer.view({ranks, row});
  auto move = [into_buffer](Tensor b, Tensor f) { into_buffer ? b.copy_(f) : f.copy_(b); };
  if (full > 0) move(grid.narrow(0, 0, full).narrow(1, col, c), flat.narrow(0, 0, full * c).view({full, c}));
  if (rest > 0) move(grid.select(0, full).narrow(0, col, rest), flat.narrow(0, full * c, rest));
}

}  // namespace

struct DataParallel::Impl {
  struct Param {
    std::string name;
    Tensor tensor;  // the model's parameter
    int64_t numel = 0, chunk = 0;
    size_t bucket = 0;
    int64_t flat_offset = 0;   // in the bucket's all-reduce buffer
    int64_t slice_offset = 0;  // in one rank's part of the bucket's sharded buffers
    Tensor slice;              // this rank's slice (a view of `tensor`; `tensor` itself at stage 0); may be empty
    Tensor optimized;          // what the optimizer updates for it here: `slice`, or its float32 master
    uint64_t hook = 0;
    bool ready = false;
    bool used = false;  // had a gradient of its own on this rank in this step
  };
  struct Bucket {
    BucketLayout layout;
    Device device;
    int ready = 0;
    bool launched = false, done = false;
    Tensor buffer;      // in flight: the all-reduce buffer (stages 0-1) or the reduce-scatter input (stage 2)
    Tensor shard_grad;  // stage 2: this rank's reduced gradients, summed over the step's micro-batches
    Tensor incoming;    // stage 2: a later micro-batch's reduce-scatter output, added once it arrives
    Work work;
  };

  ProcessGroup* group;
  DataParallelOptions options;
  int rank, size;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<BucketLayout> layouts;
  std::unique_ptr<amp::MasterWeights> masters;
  size_t next = 0;  // the next bucket to launch (in order, so every rank issues the same collectives)
  bool sync = true;
  double blocked = 0;

  std::pair<int64_t, int64_t> slice(const Param& p, int r) const {
    const int64_t begin = std::min(p.numel, int64_t(r) * p.chunk);
    return {begin, std::min(p.numel, begin + p.chunk)};
  }

  void wait(Work& w) {
    const auto t0 = Clock::now();
    w.wait();
    blocked += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void on_ready(size_t i) {
    if (!sync && options.zero_stage_ < 2) return;
    Param& p = params[i];
    MG_CHECK(!p.ready, AutogradError, "DataParallel: the gradient of '", p.name,
             "' was accumulated twice before finish_backward(); call finish_backward() after each backward");
    p.ready = true;
    ++buckets[p.bucket].ready;
    while (next < buckets.size() && buckets[next].ready == int(buckets[next].layout.params.size())) launch(next++);
  }

  void launch(size_t k) {
    NoGradGuard ng;
    Bucket& b = buckets[k];
    const BucketLayout& l = b.layout;
    bool missing = false;
    for (size_t j : l.params) {
      const bool has = params[j].tensor.grad().defined();
      missing = missing || !has;
      params[j].used = params[j].used || has;
    }
    if (options.zero_stage_ < 2) {
      b.buffer = reusable_buffer(b);
      if (b.buffer.defined()) {
        b.buffer.storage()->set_owner("ddp.bucket." + std::to_string(k));
      } else {
        b.buffer =
            comm_buffer(l.elements, l.dtype, b.device, Category::Gradient, "ddp.bucket." + std::to_string(k), missing);
        for (size_t j : l.params) {  // the gradients move into the bucket; .grad becomes a view of it
          Param& p = params[j];
          Tensor view = b.buffer.narrow(0, p.flat_offset, p.numel).view(p.tensor.shape());
          if (Tensor g = p.tensor.grad(); g.defined()) view.copy_(g);
          p.tensor.set_grad(view);
        }
      }
      b.work = group->all_reduce(b.buffer);
    } else {
      bool padded = missing;
      for (size_t j : l.params) padded = padded || params[j].numel % size != 0;
      b.buffer = comm_buffer(l.chunk * size, l.dtype, b.device, Category::Workspace,
                             "zero.reduce_scatter." + std::to_string(k), padded);
      for (size_t j : l.params) {
        Param& p = params[j];
        if (Tensor g = p.tensor.grad(); g.defined())
          copy_slices(b.buffer, size, l.chunk, p.slice_offset, p.chunk, g.reshape({-1}), true);
        p.tensor.set_grad(Tensor());  // the full gradient is not kept
      }
      Tensor out;
      if (!b.shard_grad.defined())
        out = b.shard_grad =
            comm_buffer(l.chunk, l.dtype, b.device, Category::Gradient, "zero.grad_shard." + std::to_string(k), false);
      else
        out = b.incoming = comm_buffer(l.chunk, l.dtype, b.device, Category::Workspace,
                                       "zero.reduce_scatter." + std::to_string(k) + ".out", false);
      b.work = group->reduce_scatter(out, b.buffer);
    }
    b.launched = true;
    if (options.zero_stage_ == 2 && k > 0) complete(k - 1);  // at most two reduce-scatter buffers alive
  }

  // The bucket's existing memory when every gradient in it is already its view (they were zeroed in
  // place instead of dropped; or the bucket holds one parameter, whose gradient buffer is the bucket),
  // so the all-reduce runs on it without a copy.
  Tensor reusable_buffer(const Bucket& b) const {
    std::shared_ptr<Storage> storage;
    int64_t base = 0;
    for (size_t j : b.layout.params) {
      const Param& p = params[j];
      Tensor g = p.tensor.grad();
      if (!g.defined() || !g.is_contiguous() || g.storage()->nbytes() != size_t(b.layout.elements) * g.element_size())
        return {};
      if (!storage) storage = g.storage(), base = g.storage_offset() - p.flat_offset;
      if (g.storage() != storage || g.storage_offset() != base + p.flat_offset || base != 0) return {};
    }
    return make_tensor(storage, {b.layout.elements}, {1}, 0, b.layout.dtype);
  }

  void complete(size_t k) {
    Bucket& b = buckets[k];
    if (!b.launched || b.done) return;
    wait(b.work);
    b.work = Work();
    b.done = true;
    if (b.incoming.defined()) {
      NoGradGuard ng;
      b.shard_grad.add_(b.incoming);
      b.incoming = Tensor();
    }
    b.buffer = Tensor();
  }

  void finish() {
    if (!sync && options.zero_stage_ < 2) return;
    while (next < buckets.size()) launch(next++);
    for (size_t k = 0; k < buckets.size(); ++k) complete(k);
    for (auto& b : buckets) b.ready = 0, b.launched = b.done = false;
    next = 0;
    // A parameter no rank gave a gradient keeps none (its bucket carried zeros for it), as in one process.
    std::vector<double> used;
    for (const Param& p : params) used.push_back(p.used ? 1.0 : 0.0);
    used = group->all_reduce(std::move(used), ReduceOp::Max);
    NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i) {
      Param& p = params[i];
      p.ready = false;
      if (used[i] == 0) {
        p.tensor.set_grad(Tensor());
        continue;
      }
      if (options.zero_stage_ == 0 || !p.slice.defined()) continue;
      const auto [begin, end] = slice(p, rank);
      p.slice.set_grad(options.zero_stage_ == 1 ? p.tensor.grad().view({-1}).narrow(0, begin, end - begin)
                                                : buckets[p.bucket].shard_grad.narrow(0, p.slice_offset, end - begin));
    }
  }

  // The optimizer's parameters by index into `params` (-1: none on this rank), matched by identity.
  std::vector<int64_t> optimizer_index(const optim::Optimizer& opt) const {
    std::vector<int64_t> index;
    for (auto& g : opt.param_groups())
      for (auto& t : g.params) {
        int64_t found = -1;
        for (size_t i = 0; i < params.size() && found < 0; ++i)
          if (optimizer_tensor(i).defined() && optimizer_tensor(i).is_same(t)) found = int64_t(i);
        MG_CHECK(found >= 0, ValueError,
                 "DataParallel: expected an optimizer built over optimizer_parameters(), got one with other tensors");
        index.push_back(found);
      }
    return index;
  }
  Tensor optimizer_tensor(size_t i) const { return params[i].optimized; }
};

DataParallel::DataParallel(const nn::NamedTensors& named, ProcessGroup& group, const DataParallelOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  MG_CHECK(options.zero_stage_ >= 0 && options.zero_stage_ <= 2, ValueError,
           "DataParallel: expected ZeRO stage 0, 1 or 2, got ", options.zero_stage_);
  MG_CHECK(options.bucket_bytes_ > 0, ValueError, "DataParallel: expected bucket_bytes > 0, got ",
           options.bucket_bytes_);
  MG_CHECK(!named.empty(), ValueError, "DataParallel: expected parameters, got none");
  m.group = &group, m.options = options, m.rank = group.rank(), m.size = group.size();
  int halves = 0;
  for (auto& [name, t] : named) {
    MG_CHECK(t.defined() && t.is_leaf() && t.requires_grad() && is_floating(t.dtype()), ValueError,
             "DataParallel: expected floating leaf tensors that require grad, got '", name, "'");
    MG_CHECK(t.is_contiguous(), ValueError, "DataParallel: expected contiguous parameters, got '", name, "'");
    for (auto& p : m.params)
      MG_CHECK(!p.tensor.is_same(t), ValueError, "DataParallel: parameter '", name, "' appears twice");
    Impl::Param p;
    p.name = name, p.tensor = t, p.numel = t.numel();
    p.chunk = std::max<int64_t>(1, (p.numel + m.size - 1) / m.size);
    halves += is_half(t.dtype());
    m.params.push_back(std::move(p));
  }
  MG_CHECK(halves == 0 || halves == int(named.size()), DTypeError,
           "DataParallel: expected parameters all float32/float64, or all float16/bfloat16 (stepped through "
           "float32 masters), got ",
           halves, " half of ", named.size());

  // Buckets in reverse order, as backward reaches the parameters.
  for (size_t i = m.params.size(); i-- > 0;) {
    Impl::Param& p = m.params[i];
    const int64_t bytes = p.numel * int64_t(p.tensor.element_size());
    Impl::Bucket* b = m.buckets.empty() ? nullptr : &m.buckets.back();
    if (!b || b->layout.dtype != p.tensor.dtype() || b->device != p.tensor.device() ||
        (b->layout.elements * int64_t(p.tensor.element_size()) + bytes > options.bucket_bytes_)) {
      m.buckets.emplace_back();
      b = &m.buckets.back();
      b->layout.dtype = p.tensor.dtype();
      b->device = p.tensor.device();
    }
    p.bucket = m.buckets.size() - 1;
    p.flat_offset = b->layout.elements, p.slice_offset = b->layout.chunk;
    b->layout.params.push_back(i);
    b->layout.elements += p.numel, b->layout.chunk += p.chunk;
  }
  for (auto& b : m.buckets) m.layouts.push_back(b.layout);

  NoGradGuard ng;
  for (auto& p : m.params) {  // every rank starts from rank 0's values
    Tensor values = p.tensor.detach();
    m.group->broadcast(values, 0).wait();
    values.storage()->bump_version();
    const auto [begin, end] = m.slice(p, m.rank);
    if (options.zero_stage_ == 0)
      p.slice = p.tensor;
    else if (end > begin)
      p.slice = p.tensor.detach().view({-1}).narrow(0, begin, end - begin);
  }
  if (halves) {
    nn::NamedTensors slices;
    for (auto& p : m.params)
      if (p.slice.defined()) slices.emplace_back(p.name, p.slice);
    m.masters = std::make_unique<amp::MasterWeights>(slices);
  }
  size_t next_master = 0;
  for (auto& p : m.params)
    if (p.slice.defined()) p.optimized = m.masters ? m.masters->parameters()[next_master++] : p.slice;
  Impl* impl = impl_.get();
  for (size_t i = 0; i < m.params.size(); ++i)
    m.params[i].hook =
        m.params[i].tensor.register_post_accumulate_grad_hook([impl, i](const Tensor&) { impl->on_ready(i); });
}

DataParallel::~DataParallel() {
  for (auto& p : impl_->params) p.tensor.remove_post_accumulate_grad_hook(p.hook);
  for (auto& b : impl_->buckets)  // collectives still in flight finish before their tensors go
    try {
      b.work.wait();
    } catch (const Error&) {
    }
}

ProcessGroup& DataParallel::group() const { return *impl_->group; }
int DataParallel::rank() const { return impl_->rank; }
int DataParallel::world_size() const { return impl_->size; }
int DataParallel::zero_stage() const { return impl_->options.zero_stage_; }
const std::vector<BucketLayout>& DataParallel::buckets() const { return impl_->layouts; }
std::pair<int64_t, int64_t> DataParallel::slice(size_t i, int rank) const {
  MG_CHECK(i < impl_->params.size() && rank >= 0 && rank < impl_->size, IndexError, "DataParallel::slice: parameter ",
           i, " of ", impl_->params.size(), ", rank ", rank, " of ", impl_->size);
  return impl_->slice(impl_->params[i], rank);
}

nn::NamedTensors DataParallel::optimizer_parameters() const {
  nn::NamedTensors r;
  for (size_t i = 0; i < impl_->params.size(); ++i)
    if (Tensor t = impl_->optimizer_tensor(i); t.defined()) r.emplace_back(impl_->params[i].name, t);
  return r;
}

amp::MasterWeights* DataParallel::masters() const { return impl_->masters.get(); }

void DataParallel::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  Impl& m = *impl_;
  auto clear = [set_to_none](const Tensor& t) {
    if (!t.defined() || !t.grad().defined()) return;
    if (set_to_none)
      t.set_grad(Tensor());
    else
      t.grad().zero_();
  };
  for (auto& p : m.params) clear(p.tensor), clear(p.slice), p.used = false;
  if (m.masters)
    for (auto& t : m.masters->parameters()) clear(t);
  for (auto& b : m.buckets)
    if (set_to_none)
      b.shard_grad = Tensor();
    else if (b.shard_grad.defined())
      b.shard_grad.zero_();
}

void DataParallel::prepare_backward(bool sync) {
  for (auto& p : impl_->params)
    MG_CHECK(!p.ready, AutogradError, "DataParallel: a backward pass was not followed by finish_backward()");
  impl_->sync = sync;
}

void DataParallel::finish_backward() { impl_->finish(); }

bool DataParallel::any_rank(bool flag) const { return impl_->group->all_reduce(flag ? 1.0 : 0.0, ReduceOp::Max) != 0; }

double DataParallel::clip_grad_norm_(double max_norm, double norm_type) {
  std::vector<Tensor> tensors;
  for (auto& [name, t] : optimizer_parameters()) tensors.push_back(t);
  if (impl_->options.zero_stage_ == 0) return optim::clip_grad_norm_(tensors, max_norm, norm_type);
  ProcessGroup* g = impl_->group;
  const ReduceOp op = std::isinf(norm_type) ? ReduceOp::Max : ReduceOp::Sum;
  return optim::clip_grad_norm_(tensors, max_norm, norm_type,
                                [g, op](double partial) { return g->all_reduce(partial, op); });
}

void DataParallel::gather_parameters() {
  Impl& m = *impl_;
  if (m.options.zero_stage_ == 0) return;
  NoGradGuard ng;
  struct InFlight {
    size_t bucket;
    Tensor buffer;
    Work work;
  };
  auto unpack = [&m](InFlight& f) {
    m.wait(f.work);
    const BucketLayout& l = m.buckets[f.bucket].layout;
    for (size_t j : l.params) {
      auto& p = m.params[j];
      copy_slices(f.buffer, m.size, l.chunk, p.slice_offset, p.chunk, p.tensor.detach().view({-1}), false);
    }
  };
  std::optional<InFlight> previous;  // the next bucket's gather runs while this one is unpacked
  for (size_t k = 0; k < m.buckets.size(); ++k) {
    const BucketLayout& l = m.buckets[k].layout;
    Tensor buffer = comm_buffer(l.chunk * m.size, l.dtype, m.buckets[k].device, Category::Workspace,
                                "zero.all_gather." + std::to_string(k), false);
    Tensor mine = buffer.narrow(0, int64_t(m.rank) * l.chunk, l.chunk);
    for (size_t j : l.params)
      if (const auto& p = m.params[j]; p.slice.defined())
        mine.narrow(0, p.slice_offset, p.slice.numel()).copy_(p.slice);
    InFlight now{k, buffer, m.group->all_gather(buffer, mine)};
    if (previous) unpack(*previous);
    previous = std::move(now);
  }
  if (previous) unpack(*previous);
}

double DataParallel::communication_seconds() const { return impl_->blocked; }

// ---- state dicts and the shard table

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
}  // namespace

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
      // Sharded state is gathered slice by slice: it must be shaped like the parameter's slice.
      MG_CHECK(m.options.zero_stage_ == 0 || field == "step" || t.numel() == m.optimizer_tensor(i).numel(),
               NotImplementedError, "DataParallel::state_dict: the optimizer state '", field, "' of '",
               m.params[i].name, "' has ", t.numel(), " elements for a slice of ", m.optimizer_tensor(i).numel(),
               ": ZeRO gathers only state shaped like its parameter (not 8-bit blocks or factored moments); ",
               "save it with ZeRO stage 0");
      local[{i, field}] = t;
    } else {
      out[key] = t;
    }
  }
  if (m.masters)
    for (size_t i = 0; i < m.params.size(); ++i)
      if (Tensor t = m.optimizer_tensor(i); t.defined()) local[{i, "master"}] = t.detach();
  // Rank 0 holds a slice of every parameter: its list of entries (and the steps) is everyone's.
  std::ostringstream manifest;
  for (auto& [key, t] : local)
    manifest << key.first << ' ' << key.second << ' ' << int(t.dtype()) << ' '
             << (key.second == "step" ? t.item<int64_t>() : 0) << '\n';
  std::istringstream entries(m.group->broadcast(manifest.str(), 0));
  NoGradGuard ng;
  MemoryScope scope(Category::Temporary, "zero.state_dict");
  size_t i;
  std::string field;
  int dtype;
  int64_t step;
  while (entries >> i >> field >> dtype >> step) {
    const std::string key =
        field == "master" ? "master." + std::to_string(i) : "state." + std::to_string(i) + "." + field;
    const auto& p = m.params[i];
    auto it = local.find({i, field});
    if (field == "step") {
      out[key] = scalar_tensor(double(step), kInt64);
    } else if (m.options.zero_stage_ == 0) {
      out[key] = it->second;
    } else {  // every rank's slice, padded to the slice size c, gathered and trimmed
      const TensorOptions o = TensorOptions(dtype_from_code(dtype)).device(p.tensor.device());
      Tensor mine = zeros({p.chunk}, o), all = empty({p.chunk * m.size}, o);
      if (it != local.end()) mine.narrow(0, 0, it->second.numel()).copy_(it->second.reshape({-1}));
      m.group->all_gather(all, mine).wait();
      out[key] = all.narrow(0, 0, p.numel).view(p.tensor.shape()).clone();
    }
  }
  return out;
}

void DataParallel::load_state_dict(optim::Optimizer& opt, const optim::StateDict& dict) {
  Impl& m = *impl_;
  const std::vector<int64_t> index = m.optimizer_index(opt);
  std::vector<int64_t> inner(m.params.size(), -1);  // constructor order -> the optimizer's
  for (size_t k = 0; k < index.size(); ++k) inner[size_t(index[k])] = int64_t(k);
  optim::StateDict mine;
  std::vector<std::pair<size_t, Tensor>> master_values;
  NoGradGuard ng;
  auto my_slice = [&m](size_t i, const Tensor& t, const std::string& key) {
    const auto& p = m.params[i];
    MG_CHECK(t.numel() == p.numel, ShapeError, "DataParallel::load_state_dict: '", key, "' expected ",
             shape_str(p.tensor.shape()), " (the parameter '", p.name, "'), got ", shape_str(t.shape()));
    if (m.options.zero_stage_ == 0) return t;
    const auto [begin, end] = m.slice(p, m.rank);
    return t.reshape({-1}).narrow(0, begin, end - begin).contiguous();
  };
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
    } else {
      mine["state." + std::to_string(inner[i]) + "." + field] = field == "step" ? t : my_slice(i, t, key);
    }
  }
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

#include "train_state.h"

#include <cmath>
#include <cstdio>

namespace memgrad_cli {

namespace {
// The first element of `t` (a cpu tensor, as a file loads) that is NaN or infinite, and which it is
// ("nan", "inf", "-inf"); -1 for none (integer and 8-bit tensors have none). Read in place, by the
// dtype's bits: a state's tensors may be large.
std::pair<int64_t, const char*> first_non_finite(const mg::Tensor& t) {
  const mg::Tensor c = t.contiguous();
  const int64_t n = c.numel();
  auto what = [](double x) { return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; };
  if (c.dtype() == mg::kFloat32 || c.dtype() == mg::kFloat64) {
    for (int64_t i = 0; i < n; ++i) {
      const double x = c.dtype() == mg::kFloat32 ? double(static_cast<const float*>(c.raw_data())[i])
                                                 : static_cast<const double*>(c.raw_data())[i];
      if (!std::isfinite(x)) return {i, what(x)};
    }
  } else if (c.dtype() == mg::kFloat16 || c.dtype() == mg::kBFloat16) {
    const uint16_t exponent = c.dtype() == mg::kFloat16 ? 0x7c00 : 0x7f80;  // all ones: inf or NaN
    const auto* bits = static_cast<const uint16_t*>(c.raw_data());
    for (int64_t i = 0; i < n; ++i)
      if ((bits[i] & exponent) == exponent)
        return {i, (bits[i] & uint16_t(~exponent & 0x7fff)) ? "nan" : (bits[i] & 0x8000) ? "-inf" : "inf"};
  }
  return {-1, ""};
}
}  // namespace

std::string run_signature(const TrainFlags& f, const mg::train::ModelSpec& spec, int64_t accum) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "%s, dropout %g; batch %lld x %lld, accum %lld; %s lr %g warmup %lld momentum %g clip %g; %s; seed %llu",
      model_str(spec).c_str(), f.model.dropout, static_cast<long long>(f.step.batch),
      static_cast<long long>(f.step.seq), static_cast<long long>(accum), f.step.optimizer.c_str(), f.lr,
      static_cast<long long>(f.warmup), f.step.momentum, f.step.clip, f.step.precision.c_str(),
      static_cast<unsigned long long>(f.seed));
  return buf;
}

void save_state(const std::string& path, int64_t step, const std::string& signature, const mg::nn::StateDict& model,
                mg::optim::StateDict optimizer, const std::vector<std::string>& names,
                const mg::amp::MasterWeights* masters, const mg::amp::GradScaler* scaler, mg::nn::Metadata metadata) {
  mg::nn::StateDict all;
  for (auto& [k, t] : model) all["model." + k] = t;
  if (masters)
    for (auto& [k, t] : masters->named_parameters()) all["master." + k] = t.detach();
  for (auto it = optimizer.begin(); it != optimizer.end();) {  // a data-parallel run's: by name too
    const auto i = it->first.rfind("master.", 0) == 0 ? parse_integer<int64_t>(it->first.substr(7)) : std::nullopt;
    if (!i || *i < 0 || size_t(*i) >= names.size()) {
      ++it;
      continue;
    }
    all["master." + names[size_t(*i)]] = it->second;
    it = optimizer.erase(it);
  }
  for (auto& [k, t] : optimizer) all["optim." + k] = t;
  if (scaler)
    for (auto& [k, v] : scaler->state_dict()) all["scaler." + k] = mg::scalar_tensor(v, mg::kFloat64);
  mg::Generator& g = mg::default_generator();
  metadata.insert({{"memgrad.step", std::to_string(step)},
                   {"memgrad.rng_seed", std::to_string(g.seed())},
                   {"memgrad.rng_offset", std::to_string(g.offset())},
                   {"memgrad.run", signature}});
  mg::nn::save_safetensors(all, path, metadata);
}

SavedState read_state(const std::string& path, const std::string& signature) {
  const std::string flag = "--resume " + path + ": ";
  SavedState s;
  mg::nn::Metadata meta;
  try {
    s.tensors = mg::nn::load_safetensors(path, &meta);
  } catch (const mg::OutOfMemoryError&) {
    throw;
  } catch (const mg::Error& e) {
    throw UsageError(flag + e.what());
  }
  for (const char* key : {"memgrad.step", "memgrad.rng_seed", "memgrad.rng_offset", "memgrad.run"})
    if (!meta.count(key)) throw UsageError(flag + "not a memgrad training state (no '" + key + "' in its metadata)");
  if (meta["memgrad.run"] != signature)
    throw UsageError("--resume " + path + " was saved by a different run:\n  saved: " + meta["memgrad.run"] +
                     "\n  now:   " + signature);
  auto bad = [&](const char* key, const char* expected) {
    return UsageError(flag + "its metadata " + key + " is '" + meta[key] + "', expected " + expected);
  };
  const auto step = parse_integer<int64_t>(meta["memgrad.step"]);
  if (!step || *step < 0 || *step > kMaxCount) throw bad("memgrad.step", "an integer in [0, 2^62]");
  const auto seed = parse_integer<uint64_t>(meta["memgrad.rng_seed"]);
  if (!seed) throw bad("memgrad.rng_seed", "an integer in [0, 2^64 - 1]");
  const auto offset = parse_integer<uint64_t>(meta["memgrad.rng_offset"]);
  if (!offset) throw bad("memgrad.rng_offset", "an integer in [0, 2^64 - 1]");
  s.step = *step, s.rng_seed = *seed, s.rng_offset = *offset;
  s.meta = meta;
  for (auto& [name, t] : s.tensors)  // a NaN or inf would train on to "final loss nan"
    if (const auto [i, what] = first_non_finite(t); i >= 0)
      throw UsageError(flag + "'" + name + "' holds " + what + " at element " + std::to_string(i) + " of " +
                       std::to_string(t.numel()) + ": a state training can continue from holds finite numbers only");
  return s;
}

int64_t apply_state(const SavedState& s, const std::string& path, const std::vector<std::string>& names,
                    const std::function<void(const mg::nn::StateDict&)>& load_model,
                    const std::function<void(const mg::optim::StateDict&)>& load_optimizer,
                    mg::amp::MasterWeights* masters, bool indexed_masters, mg::amp::GradScaler* scaler) {
  try {
    mg::nn::StateDict m, o, saved_masters;
    std::map<std::string, double> sc;
    for (auto& [k, t] : s.tensors) {
      if (k.rfind("model.", 0) == 0) m[k.substr(6)] = t;
      if (k.rfind("master.", 0) == 0) saved_masters[k.substr(7)] = t;
      if (k.rfind("optim.", 0) == 0) o[k.substr(6)] = t;
      if (k.rfind("scaler.", 0) == 0) sc[k.substr(7)] = t.item<double>();
    }
    // A data-parallel run of an earlier memgrad kept its masters in optim.master.<i>: by name, as now.
    for (auto it = o.begin(); it != o.end();) {
      const auto i = it->first.rfind("master.", 0) == 0 ? parse_integer<int64_t>(it->first.substr(7)) : std::nullopt;
      if (!i || *i < 0 || size_t(*i) >= names.size()) {
        ++it;
        continue;
      }
      saved_masters[names[size_t(*i)]] = it->second;
      it = o.erase(it);
    }
    if (indexed_masters)
      for (size_t i = 0; i < names.size(); ++i) {
        auto it = saved_masters.find(names[i]);
        if (it == saved_masters.end()) throw mg::IOError(path + ": no float32 master of '" + names[i] + "'");
        o["master." + std::to_string(i)] = it->second;
      }
    load_model(m);
    if (masters) {
      mg::NoGradGuard no_grad;
      for (auto& [name, t] : masters->named_parameters()) {
        auto it = saved_masters.find(name);
        if (it == saved_masters.end()) throw mg::IOError(path + ": no float32 master of '" + name + "'");
        t.copy_(it->second);
      }
    }
    load_optimizer(o);
    if (scaler) scaler->load_state_dict(sc);
  } catch (const mg::OutOfMemoryError&) {
    throw;
  } catch (const mg::Error& e) {
    throw UsageError("--resume " + path + ": " + e.what());
  }
  mg::default_generator().manual_seed(s.rng_seed);
  mg::default_generator().set_offset(s.rng_offset);
  return s.step;
}

}  // namespace memgrad_cli

#include <memgrad/core/autocast.h>

#include <unordered_map>

#include <memgrad/core/grad_mode.h>

namespace mg::amp {

namespace {
thread_local AutocastState t_state;
// Half copies of parameters, valid for the outermost enabled guard.
struct CachedCast {
  std::weak_ptr<TensorImpl> source;
  uint64_t source_version;
  Tensor half;
};
thread_local std::unordered_map<const TensorImpl*, CachedCast> t_cache;
thread_local int t_depth = 0;
}  // namespace

AutocastState autocast_state() { return t_state; }
void set_autocast_state(const AutocastState& s) { t_state = s; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : prev_(t_state) {
  MG_CHECK(!enabled || is_half(dtype), DTypeError, "AutocastGuard: expected float16 or bfloat16, got ", dtype);
  t_state = {enabled, dtype};
  ++t_depth;
}

AutocastGuard::~AutocastGuard() {
  t_state = prev_;
  if (--t_depth == 0) t_cache.clear();
}

Tensor cast_for_half_op(const Tensor& t) {
  if (!t_state.enabled || !t.defined() || !is_floating(t.dtype()) || t.dtype() == t_state.dtype) return t;
  bool cacheable = t.is_leaf() && t.requires_grad() && GradMode::is_enabled();
  if (!cacheable) return t.to(t_state.dtype);
  auto it = t_cache.find(t.impl());
  if (it != t_cache.end() && !it->second.source.expired() && it->second.source_version == t.version() &&
      it->second.half.dtype() == t_state.dtype)
    return it->second.half;
  Tensor h = t.to(t_state.dtype);
  t_cache[t.impl()] = {t.impl_ptr(), t.version(), h};
  return h;
}

Tensor cast_for_float_op(const Tensor& t) {
  if (!t_state.enabled || !t.defined() || !is_half(t.dtype())) return t;
  return t.to(kFloat32);
}

}  // namespace mg::amp

#include <memgrad/nn/deferred.h>

#include <algorithm>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/random.h>
#include <memgrad/core/storage.h>
#include <memgrad/ops/ops.h>
#include <memgrad/ops/random_fill_impl.h>

namespace mg::nn {

namespace {
thread_local std::shared_ptr<DeferredParameters> t_active;
constexpr int64_t kChunk = int64_t(1) << 20;  // float32 scratch elements per piece of a fill
}  // namespace

Tensor placeholder(const Shape& shape, DType dtype) {
  auto storage = std::make_shared<Storage>(nullptr, nbytes_of(shape, dtype), kMeta, nullptr);
  return make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

bool is_placeholder(const Tensor& t) {
  return t.defined() && t.is_meta() && t.storage()->block() == nullptr && t.storage()->has_bytes();
}

const InitRecipe* DeferredParameters::recipe(const Tensor& param) const {
  auto it = recipes_.find(param.impl());
  return it == recipes_.end() ? nullptr : &it->second;
}

void DeferredParameters::record(const Tensor& param, const InitRecipe& recipe) { recipes_[param.impl()] = recipe; }

void DeferredParameters::materialize(const Tensor& param, const Tensor& dst, int64_t first) const {
  const InitRecipe* r = recipe(param);
  MG_CHECK(r, ValueError, "DeferredParameters::materialize: a parameter of shape ", shape_str(param.shape()),
           " has no recipe (built without DeferredInit, or never initialized by nn::init)");
  MG_CHECK(dst.is_contiguous() && first >= 0 && first + dst.numel() <= param.numel(), ValueError,
           "DeferredParameters::materialize: expected a contiguous range inside the parameter's ", param.numel(),
           " elements, got ", dst.numel(), " from ", first);
  NoGradGuard ng;
  Tensor flat = dst.view({-1});
  Generator g(r->seed);
  for (int64_t c = 0; c < dst.numel(); c += kChunk) {
    const int64_t n = std::min(kChunk, dst.numel() - c), at = first + c;
    Tensor values;
    {
      MemoryScope scope(Category::Temporary, "deferred init");
      values = empty({n}, TensorOptions(r->dtype).device(dst.device()));
    }
    if (r->kind == InitRecipe::Kind::Constant) {
      values.fill_(r->a);
    } else if (r->kind == InitRecipe::Kind::Uniform) {
      g.set_offset(r->offset + uint64_t(at));
      mg::detail::uniform_(values, r->a, r->b, &g);
    } else {
      g.set_offset(r->offset + 2 * uint64_t(at));
      mg::detail::normal_(values, r->a, r->b, &g);
    }
    flat.narrow(0, c, n).copy_(values);
  }
}

void DeferredParameters::materialize(const Tensor& param, const std::string& owner) const {
  Tensor whole;
  {
    MemoryScope scope(Category::Parameter, owner);
    whole = empty(param.shape(), TensorOptions(param.dtype()).device(device_));
  }
  materialize(param, whole, 0);
  param.set_data(whole);
}

DeferredInit::DeferredInit(std::shared_ptr<DeferredParameters> params) : previous_(std::move(t_active)) {
  t_active = std::move(params);
}
DeferredInit::~DeferredInit() { t_active = std::move(previous_); }
const std::shared_ptr<DeferredParameters>& DeferredInit::active() { return t_active; }

}  // namespace mg::nn

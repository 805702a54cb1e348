// The multi-tensor kernel (kernels/cuda/multi_tensor.cuh) emulated on the host against the CPU
// backend's optimizer steps and loss-scaler check: SGD (momentum, Nesterov, weight decay, maximize,
// the first step), Adam and AdamW (amsgrad), Lion (decay, maximize) and the inf/NaN check with
// unscale, over a batch of tensors of mixed sizes (1, 33, 16385: past a chunk, 40000: three chunks)
// on fewer blocks than chunks, in every floating dtype.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/multi_tensor.cuh>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda::multi_tensor_kernels;
using emu::cpu;

const int64_t kSizes[] = {1, 33, 16385, 40000};

// The batch multi_tensor.cu would launch for lists (one dtype), on device copies of its tensors.
template <class T, int D, class S>
struct DeviceBatch {
  std::vector<std::unique_ptr<emu::DeviceTensor>> copies;
  Batch<T, D, S> b{};
  DeviceBatch(const TensorLists& lists, const std::vector<S>& scalars) {
    b.n = 0;
    for (size_t j = 0; j < lists[0].size(); ++j) {
      const int64_t n = lists[0][j].numel();
      for (int k = 0; k < D; ++k) {
        const Tensor& t = size_t(k) < lists.size() ? lists[size_t(k)][j] : Tensor();
        copies.push_back(std::make_unique<emu::DeviceTensor>("operand", t));
        b.ptr[k][b.n] = copies.back()->template ptr<T>();
      }
      b.numel[b.n] = n;
      b.chunk_end[b.n] = (b.n > 0 ? b.chunk_end[b.n - 1] : 0) + (n + kChunk - 1) / kChunk;
      b.scalars[b.n] = scalars.empty() ? S{} : scalars[j];
      ++b.n;
    }
  }
  void download() const {
    for (const auto& c : copies) c->download();
  }
};

// Operand k of every tensor: values in [lo, hi).
std::vector<Tensor> operand(DType t, double lo, double hi, uint64_t seed) {
  std::vector<Tensor> r;
  for (int64_t n : kSizes) r.push_back(emu::uniform({n}, t, lo, hi, seed + uint64_t(n)));
  return r;
}
TensorLists clone(const TensorLists& lists) {
  TensorLists r;
  for (const auto& l : lists) {
    r.emplace_back();
    for (const Tensor& t : l) r.back().push_back(t.defined() ? t.clone() : t);
  }
  return r;
}
void check_lists(const TensorLists& got, const TensorLists& want, DType t, const char* what) {
  for (size_t k = 0; k < want.size(); ++k)
    for (size_t j = 0; j < want[k].size(); ++j)
      if (want[k][j].defined())
        emu::check_close(got[k][j], want[k][j], emu::rtol_for(t, 2), emu::rtol_for(t, 2),
                         std::string(what) + " operand " + std::to_string(k) + ", " + emu::name_of(t));
}

const emu::Config kGrid{dim3(2), dim3(128)};  // 2 blocks over 6 chunks

}  // namespace

TEST_CASE("multi_tensor_kernel: SGD, Adam and Lion steps over tensors of mixed sizes") {
  for (DType t : emu::floating_dtypes()) {
    dispatch_floating(t, "test", [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int variant = 0; variant < 3; ++variant) {
        const rules::SGDScalars s{0.1,          variant ? 0.9 : 0.0, 0.1,         variant == 2 ? 0.01 : 0.0,
                                  variant == 2, variant == 1,        variant == 1};
        const TensorLists want = {operand(t, -1, 1, 1), operand(t, -1, 1, 2),
                                  variant ? operand(t, -1, 1, 3) : std::vector<Tensor>(4)};
        const TensorLists got = clone(want);
        cpu(&Backend::sgd_update, want, std::vector<rules::SGDScalars>(4, s));
        const DeviceBatch<T, 3, rules::SGDScalars> d(got, std::vector<rules::SGDScalars>(4, s));
        emu::launch<multi_tensor_kernel<T, 3, rules::SGDScalars, SGDElement>>(kGrid, d.b, SGDElement{});
        d.download();
        check_lists(got, want, t, "SGD");
      }
      for (int variant = 0; variant < 3; ++variant) {
        rules::AdamScalars s{1e-2, 0.9, 0.999,        1e-8,         variant ? 0.01 : 0.0,
                             0,    0,   variant == 2, variant == 1, variant == 1};
        s.step_size = s.lr / (1 - 0.9 * 0.9), s.bias_correction2_sqrt = std::sqrt(1 - 0.999 * 0.999);
        const TensorLists want = {operand(t, -1, 1, 4), operand(t, -1, 1, 5), operand(t, -0.1, 0.1, 6),
                                  operand(t, 0, 0.01, 7),
                                  variant == 2 ? operand(t, 0, 0.01, 8) : std::vector<Tensor>(4)};
        const TensorLists got = clone(want);
        cpu(&Backend::adam_update, want, std::vector<rules::AdamScalars>(4, s));
        const DeviceBatch<T, 5, rules::AdamScalars> d(got, std::vector<rules::AdamScalars>(4, s));
        emu::launch<multi_tensor_kernel<T, 5, rules::AdamScalars, AdamElement>>(kGrid, d.b, AdamElement{});
        d.download();
        check_lists(got, want, t, "Adam");
      }
      // Lion in every dtype: in 16 bits m * beta1 + g * (1 - beta1) cancels to within rounding for
      // some pairs of values, where only rules::lion's explicit fmas keep the host loop and the kernel
      // on the same side of 0 (a contracted and an uncontracted sum took opposite signs).
      for (int variant = 0; variant < 2; ++variant) {
        const rules::LionScalars s{3e-2, 0.9, 0.99, variant ? 0.1 : 0.0, variant == 1};
        const TensorLists want = {operand(t, -1, 1, 9), operand(t, -1, 1, 10), operand(t, -0.1, 0.1, 11)};
        const TensorLists got = clone(want);
        cpu(&Backend::lion_update, want, std::vector<rules::LionScalars>(4, s));
        const DeviceBatch<T, 3, rules::LionScalars> d(got, std::vector<rules::LionScalars>(4, s));
        emu::launch<multi_tensor_kernel<T, 3, rules::LionScalars, LionElement>>(kGrid, d.b, LionElement{});
        d.download();
        check_lists(got, want, t, "Lion");
      }
    });
  }
}

TEST_CASE("multi_tensor_kernel: the loss scaler's inf/NaN check and unscale") {
  for (DType t : emu::floating_dtypes())
    for (int bad : {-1, 2, 3}) {  // none, a NaN in the third tensor, an inf in the last
      CAPTURE(bad);
      std::vector<Tensor> grads = operand(t, -100, 100, 9);
      if (bad >= 0) {
        std::vector<double> v = grads[size_t(bad)].to_vector<double>();
        v[v.size() - 1] = bad == 2 ? NAN : -INFINITY;
        grads[size_t(bad)] = tensor(v, {int64_t(v.size())}, kFloat64).to(t);
      }
      for (double inv_scale : {1.0, 1.0 / 1024}) {
        const std::vector<Tensor> want = clone({grads})[0], got = clone({grads})[0];
        const Tensor found = zeros({1}, kFloat32), got_found = zeros({1}, kFloat32);
        cpu(&Backend::non_finite_check_and_unscale, want, Out(found), inv_scale);
        dispatch_floating(t, "test", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const DeviceBatch<T, 1, NoScalars> d({got}, {});
          const emu::DeviceTensor df("found_inf", got_found);
          emu::launch<multi_tensor_kernel<T, 1, NoScalars, UnscaleElement>>(
              kGrid, d.b, UnscaleElement{df.ptr<float>(), inv_scale, inv_scale != 1.0});
          d.download();
          df.download();
        });
        emu::check_equal(got_found, found, "found_inf, " + emu::name_of(t));
        check_lists({got}, {want}, t, "unscale");
      }
    }
}

TEST_CASE("multi_tensor_kernel: SGD and Adam read half gradients of float32 parameters as float32 copies") {
  // The mixed-precision step (no float32 copy of the gradients): each half gradient widened and
  // multiplied by the loss scaler's and clipping's factors must give the step a float32 copy scaled
  // by mul_ gives, to the bit: the mixed functors against the float32 ones on those copies.
  for (DType half : {kFloat16, kBFloat16})
    for (rules::GradFactors f : {rules::GradFactors{}, rules::GradFactors{1.0f / 1024, 0.37f}}) {
      CAPTURE(f.first);
      const std::vector<Tensor> h = operand(half, -100, 100, 10);
      std::vector<Tensor> copies;  // float(h) * first, then * second, each rounded to float32
      for (const Tensor& g : h) copies.push_back(g.to(kFloat32) * double(f.first) * double(f.second));
      rules::SGDScalars sgd{0.1, 0.9, 0.0, 0.01, false, false, false};
      sgd.grad = f;
      {
        const TensorLists mixed = {operand(kFloat32, -1, 1, 11), h, operand(kFloat32, -1, 1, 12)};
        TensorLists plain = clone(mixed);
        plain[1] = copies;
        const DeviceBatch<float, 3, rules::SGDScalars> dm(mixed, std::vector<rules::SGDScalars>(4, sgd));
        const DeviceBatch<float, 3, rules::SGDScalars> dp(plain, std::vector<rules::SGDScalars>(4, sgd));
        if (half == kFloat16)
          emu::launch<multi_tensor_kernel<float, 3, rules::SGDScalars, SGDMixedElement<Half>>>(kGrid, dm.b,
                                                                                               SGDMixedElement<Half>{});
        else
          emu::launch<multi_tensor_kernel<float, 3, rules::SGDScalars, SGDMixedElement<BFloat16>>>(
              kGrid, dm.b, SGDMixedElement<BFloat16>{});
        emu::launch<multi_tensor_kernel<float, 3, rules::SGDScalars, SGDElement>>(kGrid, dp.b, SGDElement{});
        dm.download(), dp.download();
        for (int k : {0, 2})
          for (size_t j = 0; j < 4; ++j) emu::check_equal(mixed[size_t(k)][j], plain[size_t(k)][j], "SGD, mixed");
      }
      rules::AdamScalars adam{1e-2, 0.9, 0.999, 1e-8, 0.01, 0, 0, false, false, true};
      adam.step_size = adam.lr / (1 - 0.9 * 0.9), adam.bias_correction2_sqrt = std::sqrt(1 - 0.999 * 0.999);
      adam.grad = f;
      const TensorLists mixed = {operand(kFloat32, -1, 1, 13), h, operand(kFloat32, -0.1, 0.1, 14),
                                 operand(kFloat32, 0, 0.01, 15), std::vector<Tensor>(4)};
      TensorLists plain = clone(mixed);
      plain[1] = copies;
      const DeviceBatch<float, 5, rules::AdamScalars> dm(mixed, std::vector<rules::AdamScalars>(4, adam));
      const DeviceBatch<float, 5, rules::AdamScalars> dp(plain, std::vector<rules::AdamScalars>(4, adam));
      if (half == kFloat16)
        emu::launch<multi_tensor_kernel<float, 5, rules::AdamScalars, AdamMixedElement<Half>>>(
            kGrid, dm.b, AdamMixedElement<Half>{});
      else
        emu::launch<multi_tensor_kernel<float, 5, rules::AdamScalars, AdamMixedElement<BFloat16>>>(
            kGrid, dm.b, AdamMixedElement<BFloat16>{});
      emu::launch<multi_tensor_kernel<float, 5, rules::AdamScalars, AdamElement>>(kGrid, dp.b, AdamElement{});
      dm.download(), dp.download();
      for (int k : {0, 2, 3})
        for (size_t j = 0; j < 4; ++j) emu::check_equal(mixed[size_t(k)][j], plain[size_t(k)][j], "AdamW, mixed");
    }
}

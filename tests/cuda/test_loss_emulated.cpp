// The cross-entropy kernels (kernels/cuda/loss.cuh) emulated on the host against the CPU backend's:
// forward and backward, with and without class weights, label smoothing, ignored rows; 1, 31, 33
// and 1025 classes, more rows than the grid has blocks, 16-bit logits with float32 losses.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/loss.cuh>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda::loss_kernels;
using emu::cpu;

}  // namespace

TEST_CASE("cross_entropy_kernel and cross_entropy_backward_kernel against the cpu") {
  const std::pair<DType, DType> types[] = {
      {kFloat32, kFloat32}, {kFloat16, kFloat32}, {kBFloat16, kFloat32}, {kFloat64, kFloat64}};
  for (int64_t C : {int64_t(1), int64_t(31), int64_t(33), int64_t(1025)})
    for (const auto& pair : types) {
      const DType t = pair.first, lt = pair.second;  // (clang 14: lambdas capture no bindings)
      for (bool weighted : {false, true})
        for (double smoothing : {0.0, 0.1}) {
          CAPTURE(C);
          CAPTURE(weighted);
          CAPTURE(smoothing);
          const int64_t N = 7, ignore = -100;
          const Tensor x = emu::uniform({N, C}, t, -5, 5, uint64_t(C));
          std::vector<int64_t> targets = emu::ints({N}, kInt64, 0, C, 3).to_vector<int64_t>();
          targets[2] = ignore;
          const Tensor target = tensor(targets, {N}, kInt64);
          const Tensor weight = weighted ? emu::uniform({C}, t, 0.1, 2, 4) : Tensor();
          const Tensor grad_loss = emu::uniform({N}, lt, -1, 1, 5);
          const Tensor loss = empty({N}, lt), got_loss = empty({N}, lt), gx = empty({N, C}, t),
                       got_gx = empty({N, C}, t);
          cpu(&Backend::cross_entropy, x, target, weight, Out(loss), ignore, smoothing);
          cpu(&Backend::cross_entropy_backward, grad_loss, x, target, weight, Out(gx), ignore, smoothing);
          dispatch_floating(t, "test", [&](auto tag) {
            using T = typename decltype(tag)::type;
            dispatch_floating(lt, "test", [&](auto ltag) {
              using L = typename decltype(ltag)::type;
              const emu::DeviceTensor dx("logits", x), dt("target", target), dw("weight", weight),
                  dg("grad_loss", grad_loss);
              const emu::DeviceTensor dl = emu::DeviceTensor::output("loss", got_loss);
              const emu::DeviceTensor dgx = emu::DeviceTensor::output("grad_logits", got_gx);
              const emu::Config c{dim3(3), dim3(128)};
              emu::launch<cross_entropy_kernel<T, L>>(c, dx.ptr<T>(), dt.ptr<int64_t>(), dw.ptr<T>(), dl.ptr<L>(), N, C,
                                                      ignore, smoothing);
              emu::launch<cross_entropy_backward_kernel<T, L>>(c, dg.ptr<L>(), dx.ptr<T>(), dt.ptr<int64_t>(),
                                                               dw.ptr<T>(), dgx.ptr<T>(), N, C, ignore, smoothing);
              dl.download();
              dgx.download();
            });
          });
          const double r = emu::rtol_for(t == kFloat64 ? t : kFloat32, 4 * std::sqrt(double(C)));
          emu::check_close(got_loss, loss, r, r, "cross_entropy, " + emu::name_of(t));
          emu::check_close(got_gx, gx, emu::rtol_for(t, 8), emu::rtol_for(t, 8) / 4,
                           "cross_entropy_backward, " + emu::name_of(t));
        }
    }
}

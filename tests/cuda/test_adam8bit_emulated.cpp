// The 8-bit Adam kernels (kernels/cuda/adam8bit.cuh), run on the host by emulated_device.h, against
// the CPU kernel bit for bit, as test_gpu compares them on a GPU: codes, absmax and parameters after
// several steps, float32 and 16-bit parameters, a partial last block, more blocks than the grid (its
// stride loop), non-finite gradients, an all-zero block, and the float32-moment kernel. Both sides
// are compiled without contracted multiply-adds (this file with -ffp-contract=off), as nvcc builds
// adam8bit.cu with --fmad=false. What the host cannot show: nvcc's own code generation.
#include <doctest/doctest.h>

#include "emulated_device.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/adam8bit.cuh>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <memgrad/memgrad.h>
#include <memgrad/ops/multi_tensor.h>

namespace {
using namespace mg;
using namespace mg::kernels::quant;

template <class T>
Tensor host_tensor(const std::vector<T>& v, DType t) {
  Tensor r = empty({int64_t(v.size())}, t);
  std::memcpy(r.raw_data(), v.data(), v.size() * sizeof(T));
  return r;
}
template <class T>
std::vector<T> bytes_of(const Tensor& t) {
  std::vector<T> r(static_cast<size_t>(t.numel()));
  std::memcpy(r.data(), t.raw_data(), r.size() * sizeof(T));
  return r;
}

// Bit for bit, but for NaN, which both sides write (the float32-moment kernel, as bitsandbytes', lets
// a non-finite gradient through) in their own encodings.
template <class T>
bool same_values(const Tensor& cpu, const std::vector<T>& emulated) {
  const std::vector<T> got = bytes_of<T>(cpu);
  for (size_t i = 0; i < got.size(); ++i) {
    const float a = float(cuda::dload(got[i])), b = float(cuda::dload(emulated[i]));
    if (std::memcmp(&got[i], &emulated[i], sizeof(T)) != 0 && !(std::isnan(a) && std::isnan(b))) return false;
  }
  return true;
}

template <class T>
T to_param(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return cuda::dstore<T>(x);
}

// One parameter of n elements: `steps` steps of the library's cpu kernel and of the emulated cuda
// kernel (on `grid` blocks) from the same state, compared byte for byte after each.
template <class T>
void check(DType dtype, int64_t n, unsigned grid, bool quantized, unsigned seed) {
  CAPTURE(n);
  CAPTURE(grid);
  CAPTURE(quantized);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<T> p(static_cast<size_t>(n));
  for (T& x : p) x = to_param<T>(normal(rng));
  std::vector<uint8_t> cm(static_cast<size_t>(n)), cv(static_cast<size_t>(n));
  std::vector<float> am(static_cast<size_t>(blocks)), av(static_cast<size_t>(blocks)), fm(static_cast<size_t>(n)),
      fv(static_cast<size_t>(n));
  for (int64_t e = 0; e < n; ++e) {
    cm[size_t(e)] = uint8_t(rng()), cv[size_t(e)] = uint8_t(rng());
    fm[size_t(e)] = 0.1f * normal(rng), fv[size_t(e)] = 0.01f * std::fabs(normal(rng));
  }
  for (int64_t b = 0; b < blocks; ++b) am[size_t(b)] = 0.1f * std::fabs(normal(rng)), av[size_t(b)] = 0.01f;
  if (blocks > 2) am[1] = av[1] = 0;  // block 1: zero moments and, below, zero gradients

  const std::vector<Tensor> state =
      quantized ? std::vector<Tensor>{host_tensor(cm, kUInt8), host_tensor(cv, kUInt8), host_tensor(am, kFloat32),
                                      host_tensor(av, kFloat32)}
                : std::vector<Tensor>{host_tensor(fm, kFloat32), host_tensor(fv, kFloat32), Tensor(), Tensor()};
  const Tensor param = host_tensor(p, dtype);
  emu::Buffer<T> dp("p", p);
  emu::Buffer<uint8_t> dcm("exp_avg codes", cm), dcv("exp_avg_sq codes", cv);
  emu::Buffer<float> dam("exp_avg absmax", am), dav("exp_avg_sq absmax", av), dfm("exp_avg", fm), dfv("exp_avg_sq", fv);
  cuda::adam8bit::Maps maps;
  maps.m = dynamic_map(true), maps.v = dynamic_map(false);
  for (int64_t step = 1; step <= 3; ++step) {
    CAPTURE(step);
    std::vector<T> g(static_cast<size_t>(n));
    for (int64_t e = 0; e < n; ++e) {
      const bool zero_block = blocks > 2 && e / kBlock == 1;
      g[size_t(e)] = to_param<T>(zero_block ? 0.f : normal(rng));
    }
    if (n > 10) g[3] = to_param<T>(NAN), g[size_t(n - 2)] = to_param<T>(-INFINITY);
    const Adam8bitScalars s{1e-2, 0.9, 0.999, 1e-8, step == 2 ? 0.0 : 0.01, step, quantized};
    const Adam8bitCoeffs c = adam8bit_coeffs(s);

    kernels::TensorLists lists = {{param}, {host_tensor(g, dtype)}, {state[0]}, {state[1]}, {state[2]}, {state[3]}};
    detail::adam8bit_update_("AdamW8bit", lists, {s});
    const emu::Buffer<T> dg("g", g);
    if (quantized)
      emu::launch<cuda::adam8bit::quantized_kernel<T>>({dim3(grid), dim3(unsigned(kBlock))}, maps, dp.data(), dg.data(),
                                                       dcm.data(), dcv.data(), dam.data(), dav.data(), n, c);
    else
      emu::launch<cuda::adam8bit::full_kernel<T>>({dim3(grid), dim3(256)}, dp.data(), dg.data(), dfm.data(), dfv.data(),
                                                  n, c);
    p = dp.to_vector(), cm = dcm.to_vector(), cv = dcv.to_vector(), am = dam.to_vector(), av = dav.to_vector();
    fm = dfm.to_vector(), fv = dfv.to_vector();

    CHECK(same_values(param, p));
    if (quantized) {
      CHECK(bytes_of<uint8_t>(state[0]) == cm);
      CHECK(bytes_of<uint8_t>(state[1]) == cv);
      CHECK(bytes_of<uint32_t>(state[2]) == bytes_of<uint32_t>(host_tensor(am, kFloat32)));
      CHECK(bytes_of<uint32_t>(state[3]) == bytes_of<uint32_t>(host_tensor(av, kFloat32)));
    } else {
      CHECK(bytes_of<uint32_t>(state[0]) == bytes_of<uint32_t>(host_tensor(fm, kFloat32)));
      CHECK(bytes_of<uint32_t>(state[1]) == bytes_of<uint32_t>(host_tensor(fv, kFloat32)));
    }
  }
}

}  // namespace

TEST_CASE("8-bit Adam's cuda kernels emulated on the host equal the cpu kernel bit for bit") {
  check<float>(kFloat32, 1000, 4, true, 1);         // three whole blocks and a partial one
  check<float>(kFloat32, 7 * 256 + 5, 3, true, 2);  // more blocks than the grid: its stride loop
  check<Half>(kFloat16, 600, 3, true, 3);           // 16-bit parameters, moments in float
  check<BFloat16>(kBFloat16, 300, 2, true, 4);      //
  check<float>(kFloat32, 1500, 2, false, 5);        // float32 moments (below min_8bit_size)
  check<BFloat16>(kBFloat16, 700, 1, false, 6);     //
}

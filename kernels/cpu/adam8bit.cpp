// bitsandbytes' 8-bit Adam (kernels/quantize8bit.h), blocks of 256 elements in parallel: each block
// dequantizes its moments, updates them and the parameter, then requantizes them against the
// block's new absmax. Tensors below the 8-bit threshold keep float32 moments (its 32-bit kernel).
#include <cmath>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>
#include <memgrad/kernels/quantize8bit.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {

using namespace kernels::quant;

// The codes of a block's values x (normalized moments), the binary search's steps taken for all of
// them at once: each step a vector gather of midpoints.
void search(const DynamicMap& map, const float* x, int* code, int64_t len) {
  for (int64_t i = 0; i < len; ++i) code[i] = 0;
  for (int s = kCodes / 2; s > 0; s >>= 1)
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) code[i] = search_step(map.mid, code[i], s, x[i]);
}

template <class T>
void quantized(T* p, const T* g, uint8_t* cm, uint8_t* cv, float* am, float* av, int64_t n, const Adam8bitCoeffs& k) {
  const DynamicMap &ms = dynamic_map(true), &mu = dynamic_map(false);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(blocks, n >= kParallelGrain, [&](int64_t b) {
    const Adam8bitCoeffs c = k;  // a copy the stores below cannot alias: the loops vectorize
    const int64_t first = b * kBlock, len = std::min(kBlock, n - first);
    const float am_b = am[b], av_b = av[b];
    float m[kBlock], v[kBlock], x[kBlock];
    int code[kBlock];
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      const int64_t e = first + i;
      const float gi = load(g[e]), pi = load(p[e]);
      float mi = ms.value[cm[e]] * am_b, vi = mu.value[cv[e]] * av_b;
      adam8bit_moments(gi, mi, vi, c);
      // as bitsandbytes: the moments of a non-finite gradient restart at 0, its parameter stays
      const bool finite = std::isfinite(gi);
      p[e] = store<T>(finite ? adam8bit_param(pi, mi, vi, c) : pi);
      m[i] = finite ? mi : 0.0f, v[i] = finite ? vi : 0.0f;
    }
    float max_m = 0, max_v = 0;  // NaN-free: fmax's result, max over |m| and |v|
#pragma omp simd reduction(max : max_m, max_v)
    for (int64_t i = 0; i < len; ++i)
      max_m = std::max(max_m, std::fabs(m[i])), max_v = std::max(max_v, std::fabs(v[i]));
    am[b] = max_m, av[b] = max_v;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) x[i] = normalized(m[i], max_m);
    search(ms, x, code, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) cm[first + i] = keep_sign(ms, code[i], m[i]);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) x[i] = normalized(v[i], max_v);
    search(mu, x, code, len);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) cv[first + i] = uint8_t(code[i]);
  });
}

template <class T>
void full(T* p, const T* g, float* m, float* v, int64_t n, const Adam8bitCoeffs& k) {
  const Adam8bitCoeffs c = k;
  parallel_for(n, n >= kParallelGrain, [&](int64_t i) {
    adam8bit_moments(load(g[i]), m[i], v[i], c);
    p[i] = store<T>(adam8bit_param(load(p[i]), m[i], v[i], c));
  });
}

}  // namespace

void adam8bit_update(const TensorLists& lists, const std::vector<quant::Adam8bitScalars>& scalars) {
  for (size_t j = 0; j < scalars.size(); ++j) {
    const Adam8bitCoeffs c = adam8bit_coeffs(scalars[j]);
    const Tensor &p = lists[0][j], &g = lists[1][j];
    dispatch_floating(p.dtype(), "Adam8bit", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (scalars[j].quantized)
        quantized(ptr<T>(p), ptr<T>(g), ptr<uint8_t>(lists[2][j]), ptr<uint8_t>(lists[3][j]), ptr<float>(lists[4][j]),
                  ptr<float>(lists[5][j]), p.numel(), c);
      else
        full(ptr<T>(p), ptr<T>(g), ptr<float>(lists[2][j]), ptr<float>(lists[3][j]), p.numel(), c);
    });
  }
}

}  // namespace mg::cpu::MG_CPU_ISA_NS

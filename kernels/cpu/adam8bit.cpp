// bitsandbytes' 8-bit Adam (kernels/quantize8bit.h), blocks of 256 elements in parallel: each block
// dequantizes its moments, updates them and the parameter, then requantizes them against the
// block's new absmax. Tensors below the 8-bit threshold keep float32 moments (its 32-bit kernel).
#include <cmath>

#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>
#include <memgrad/kernels/quantize8bit.h>

namespace mg::cpu {

namespace {

using namespace kernels::quant;

template <class T>
void quantized(T* p, const T* g, uint8_t* cm, uint8_t* cv, float* am, float* av, int64_t n, const Adam8bitCoeffs& c) {
  const DynamicMap &ms = dynamic_map(true), &mu = dynamic_map(false);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(blocks, n >= kParallelGrain, [&](int64_t b) {
    const int64_t first = b * kBlock, len = std::min(kBlock, n - first);
    float m[kBlock], v[kBlock], max_m = 0, max_v = 0;
    for (int64_t i = 0; i < len; ++i) {
      const int64_t e = first + i;
      const float gi = load(g[e]);
      m[i] = ms.value[cm[e]] * am[b], v[i] = mu.value[cv[e]] * av[b];
      if (std::isfinite(gi)) {
        adam8bit_moments(gi, m[i], v[i], c);
        p[e] = store<T>(adam8bit_param(load(p[e]), m[i], v[i], c));
      } else {  // as bitsandbytes: the moments of a non-finite gradient restart, its parameter stays
        m[i] = v[i] = 0;
      }
      max_m = std::fmax(max_m, std::fabs(m[i])), max_v = std::fmax(max_v, std::fabs(v[i]));
    }
    am[b] = max_m, av[b] = max_v;
    for (int64_t i = 0; i < len; ++i) {
      cm[first + i] = quantize_signed(ms, m[i], max_m);
      cv[first + i] = quantize_unsigned(mu, v[i], max_v);
    }
  });
}

template <class T>
void full(T* p, const T* g, float* m, float* v, int64_t n, const Adam8bitCoeffs& c) {
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

}  // namespace mg::cpu

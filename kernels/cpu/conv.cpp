// Convolution lowering (im2col / col2im) and 2-d pooling on contiguous NCHW tensors.
#include <memgrad/kernels/cpu/cpu_kernels.h>
#include <memgrad/kernels/cpu/loops.h>

namespace mg::cpu::MG_CPU_ISA_NS {

namespace {
// Calls f(plane, ...) for each of the n * c image planes, in parallel.
template <class F>
void for_each_plane(const Conv2dGeometry& g, F f) {
  parallel_for(g.n * g.c, g.n * g.c * g.h * g.w >= kParallelGrain, f);
}
}  // namespace

void im2col(const Tensor& x, const Out& col, const Conv2dGeometry& g) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = ptr<T>(x);
    T* cp = ptr<T>(col);
    const int64_t L = g.oh * g.ow;
    for_each_plane(g, [&](int64_t p) {
      const T* img = xp + p * g.h * g.w;
      T* rows = cp + p * g.kh * g.kw * L;  // rows (c, ki, kj) of image n are consecutive
      for (int64_t ki = 0; ki < g.kh; ++ki)
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          T* r = rows + (ki * g.kw + kj) * L;
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            int64_t iy = oy * g.sh - g.ph + ki * g.dh;
            for (int64_t ox = 0; ox < g.ow; ++ox) {
              int64_t ix = ox * g.sw - g.pw + kj * g.dw;
              bool in = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
              r[oy * g.ow + ox] = in ? img[iy * g.w + ix] : store<T>(0.0);
            }
          }
        }
    });
  });
}

void col2im(const Tensor& col, const Out& x, const Conv2dGeometry& g) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* xp = ptr<T>(x);
    const T* cp = ptr<T>(col);
    const int64_t L = g.oh * g.ow;
    for_each_plane(g, [&](int64_t p) {
      T* img = xp + p * g.h * g.w;
      const T* rows = cp + p * g.kh * g.kw * L;
      for (int64_t ki = 0; ki < g.kh; ++ki)
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          const T* r = rows + (ki * g.kw + kj) * L;
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            int64_t iy = oy * g.sh - g.ph + ki * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t ox = 0; ox < g.ow; ++ox) {
              int64_t ix = ox * g.sw - g.pw + kj * g.dw;
              if (ix >= 0 && ix < g.w)
                img[iy * g.w + ix] = store<T>(load(img[iy * g.w + ix]) + load(r[oy * g.ow + ox]));
            }
          }
        }
    });
  });
}

void max_pool2d(const Tensor& x, const Out& out, const Out& indices, const Conv2dGeometry& g) {
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = ptr<T>(x);
    T* op = ptr<T>(out);
    int64_t* ip = ptr<int64_t>(indices);
    for_each_plane(g, [&](int64_t p) {
      const T* img = xp + p * g.h * g.w;
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          int64_t bi = max_pool_argmax(g, oy, ox, [&](int64_t i) { return double(load(img[i])); });
          int64_t o = p * g.oh * g.ow + oy * g.ow + ox;
          op[o] = img[bi];
          ip[o] = bi;
        }
    });
  });
}

void max_pool2d_backward(const Tensor& grad, const Tensor& indices, const Out& grad_x) {
  Conv2dGeometry g{grad_x.size(0),
                   grad_x.size(1),
                   grad_x.size(2),
                   grad_x.size(3),
                   1,
                   1,
                   grad.size(2),
                   grad.size(3),
                   1,
                   1,
                   0,
                   0,
                   1,
                   1};
  dispatch(grad.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = ptr<T>(grad);
    const int64_t* ip = ptr<int64_t>(indices);
    T* xp = ptr<T>(grad_x);
    const int64_t L = g.oh * g.ow;
    for_each_plane(g, [&](int64_t p) {
      T* img = xp + p * g.h * g.w;
      for (int64_t o = p * L; o < (p + 1) * L; ++o) img[ip[o]] = store<T>(load(img[ip[o]]) + load(gp[o]));
    });
  });
}

namespace {
// Calls f(input offset in plane, output offset in plane, 1 / area) for every window tap.
template <class F>
void for_each_avg_tap(const Conv2dGeometry& g, F f) {
  for (int64_t oy = 0; oy < g.oh; ++oy)
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      double inv = 1.0 / double(avg_pool_area(g, oy, ox));
      for (int64_t iy = std::max<int64_t>(oy * g.sh - g.ph, 0); iy < std::min(oy * g.sh - g.ph + g.kh, g.h); ++iy)
        for (int64_t ix = std::max<int64_t>(ox * g.sw - g.pw, 0); ix < std::min(ox * g.sw - g.pw + g.kw, g.w); ++ix)
          f(iy * g.w + ix, oy * g.ow + ox, inv);
    }
}
}  // namespace

void avg_pool2d(const Tensor& x, const Out& out, const Conv2dGeometry& g) {
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = ptr<T>(x);
    T* op = ptr<T>(out);
    for_each_plane(g, [&](int64_t p) {
      std::vector<double> acc(size_t(g.oh * g.ow), 0.0);
      const T* img = xp + p * g.h * g.w;
      for_each_avg_tap(g, [&](int64_t i, int64_t o, double inv) { acc[o] += double(load(img[i])) * inv; });
      for (int64_t o = 0; o < g.oh * g.ow; ++o) op[p * g.oh * g.ow + o] = store<T>(acc[o]);
    });
  });
}

void avg_pool2d_backward(const Tensor& grad, const Out& grad_x, const Conv2dGeometry& g) {
  dispatch_floating(grad.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = ptr<T>(grad);
    T* xp = ptr<T>(grad_x);
    for_each_plane(g, [&](int64_t p) {
      const T* go = gp + p * g.oh * g.ow;
      T* img = xp + p * g.h * g.w;
      for_each_avg_tap(g, [&](int64_t i, int64_t o, double inv) {
        img[i] = store<T>(load(img[i]) + opmath_t<T>(double(load(go[o])) * inv));
      });
    });
  });
}

}  // namespace mg::cpu::MG_CPU_ISA_NS

// Convolution and pooling geometry, and the pooling windows, shared by the CPU and CUDA kernels.
#pragma once
#include <cstdint>

#include <memgrad/kernels/host_device.h>

namespace mg::kernels {

struct Conv2dGeometry {
  int64_t n, c, h, w;      // input
  int64_t kh, kw, oh, ow;  // kernel and output size
  int64_t sh, sw, ph, pw, dh, dw;
};

// PyTorch's avg_pool2d divisor with count_include_pad: the window clipped to the padded image.
MG_HD int64_t avg_pool_area(const Conv2dGeometry& g, int64_t oy, int64_t ox) {
  int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
  int64_t y1 = y0 + g.kh < g.h + g.ph ? y0 + g.kh : g.h + g.ph, x1 = x0 + g.kw < g.w + g.pw ? x0 + g.kw : g.w + g.pw;
  return (y1 - y0) * (x1 - x0);
}

// The flat index (iy * w + ix) in its image plane of the max of output (oy, ox)'s window, picked
// as PyTorch does: the earliest largest tap, and a NaN over any number. `value(i)` reads the
// plane's element i as double. Every window holds a tap (the op checks padding <= kernel / 2).
template <class Value>
MG_HD int64_t max_pool_argmax(const Conv2dGeometry& g, int64_t oy, int64_t ox, Value value) {
  double best = 0;
  int64_t bi = -1;
  for (int64_t ki = 0; ki < g.kh; ++ki)
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      int64_t iy = oy * g.sh - g.ph + ki * g.dh, ix = ox * g.sw - g.pw + kj * g.dw;
      if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
      double v = value(iy * g.w + ix);
      if (bi < 0 || v > best || v != v) best = v, bi = iy * g.w + ix;
    }
  return bi;
}

}  // namespace mg::kernels

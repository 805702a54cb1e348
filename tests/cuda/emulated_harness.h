// What the emulated kernel tests share: host tensors copied to emulated device memory and back, the
// CPU backend's kernel run on the same tensors, comparisons, and inputs with edge values.
#pragma once
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "emulated_device.h"

#include <memgrad/kernels/backend.h>
#include <memgrad/memgrad.h>

namespace emu {

using mg::DType;
using mg::Shape;
using mg::Tensor;

// The bytes a host tensor's view spans, in emulated device memory (its strides and offset kept, so
// a kernel taking strides reads the same layout). An undefined tensor gives null pointers.
class DeviceTensor {
 public:
  DeviceTensor(const char* name, const Tensor& t);  // a copy of the view's bytes
  // Bytes that no kernel has written yet (0xff: NaN in floating types, -1 in integers), which
  // download() writes into `t`.
  static DeviceTensor output(const char* name, const Tensor& t);
  template <class T>
  T* ptr() const {
    return host_.defined() ? reinterpret_cast<T*>(bytes_->data() + first_) : nullptr;
  }
  void download() const;  // the device's bytes back into the host tensor

 private:
  DeviceTensor(const char* name, const Tensor& t, bool copy);
  Tensor host_;
  std::unique_ptr<Buffer<unsigned char>> bytes_;
  int64_t lo_ = 0;    // the lowest element of the storage the view touches
  size_t first_ = 0;  // the view's element 0, in bytes from lo_
};

// Runs the CPU backend's kernel `fn` on `args` (as kernels::run does for a cpu tensor).
template <class Fn, class... Args>
void cpu(Fn mg::kernels::Backend::*fn, Args&&... args) {
  mg::kernels::run(mg::kCPU, fn, std::forward<Args>(args)...);
}

// got == want: exactly for integer and bool dtypes, within atol + rtol * |want| for floating ones
// (NaN where NaN, equal infinities; with no tolerance, zeros of the same sign); the first mismatch is
// reported with `what`.
void check_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what);
inline void check_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  check_close(got, want, 0, 0, what);
}
// The tolerances of a result rounded once in `dtype` (float16's and bfloat16's unit roundoff, and
// float32's and float64's with room for another summation order), times `factor`.
double rtol_for(DType dtype, double factor = 1);

// Uniform values in [lo, hi) (rounded to dtype), from a generator seeded by `seed`.
Tensor uniform(const Shape& shape, DType dtype, double lo, double hi, uint64_t seed);
// As uniform, with edge values in the first elements: 0, -0, inf, -inf, NaN, the dtype's smallest
// denormal and its largest finite value, each negated too.
Tensor with_edges(const Shape& shape, DType dtype, double lo, double hi, uint64_t seed);
// Integers in [lo, hi).
Tensor ints(const Shape& shape, DType dtype, int64_t lo, int64_t hi, uint64_t seed);

// "float32" for messages.
std::string name_of(DType dtype);
// The floating dtypes a test runs in: float32, float16, bfloat16, float64.
const std::vector<DType>& floating_dtypes();

}  // namespace emu

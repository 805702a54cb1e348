// Shapes, strides and the index arithmetic shared by every op.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <memgrad/core/small_vector.h>

namespace mg {

// A tensor's sizes, and its strides in elements: up to kInlineDims dims kept inline (no allocation
// per tensor), more on the heap. Converts from and to std::vector<int64_t> (core/small_vector.h).
inline constexpr size_t kInlineDims = 6;
using Shape = SmallVector<int64_t, kInlineDims>;
using Strides = Shape;

// Size arithmetic that cannot wrap (compiler builtins): a * b and a + b, or nullopt when the
// result does not fit in int64. Every count, extent and byte size computed from a shape uses these.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The element count; 0 when any size is 0. checked_numel gives nullopt and numel_of throws
// ShapeError naming the shape when it overflows int64.
std::optional<int64_t> checked_numel(const Shape& s);
int64_t numel_of(const Shape& s);
// Row-major strides (a size-0 dim counts as 1); ShapeError naming the shape when one overflows.
Strides contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3]"
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op` otherwise.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// PyTorch's broadcasting rule; throws ShapeError naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Shape after reducing `dims` (all dims when empty).
Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim);
// Sorted, wrapped, de-duplicated dims (all dims when empty).
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);
// Infers a single -1 in a view/reshape target shape.
Shape infer_shape(Shape target, int64_t numel, const char* op);

}  // namespace mg

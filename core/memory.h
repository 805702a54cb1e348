// The memory ledger's public face: every allocation carries a category and an owner label
// from the moment it is made, and the categories always sum to the allocated bytes.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <memgrad/core/device.h>

namespace mg {

enum class Category : uint8_t {
  Parameter,       // nn parameters
  Gradient,        // .grad buffers
  OptimizerState,  // momentum, Adam moments, master weights
  Activation,      // tensors saved by autograd for backward, while saved
  Temporary,       // op outputs nobody saved
  Input,           // tensors the user creates
  Workspace,       // GEMM/conv scratch
  Other,
};
inline constexpr int kNumCategories = 8;
const char* category_name(Category c);

// Sets the category for allocations made in this scope (optional) and pushes an owner label;
// nested labels join with '.' ("blocks.3" inside "model" gives "model.blocks.3").
class MemoryScope {
 public:
  explicit MemoryScope(Category c);
  explicit MemoryScope(const std::string& owner);
  MemoryScope(Category c, const std::string& owner);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  std::optional<Category> prev_category_;
  size_t prev_owner_len_;
};
// The category of the innermost scope that set one, else `fallback`.
Category current_category(Category fallback);
const std::string& current_owner();

// Counters for one device. Bytes are the rounded block sizes the allocator hands out.
struct MemoryStats {
  int64_t allocated = 0, peak_allocated = 0;
  int64_t reserved = 0, peak_reserved = 0;
  int64_t requested = 0;  // bytes asked for, before rounding
  std::array<int64_t, kNumCategories> by_category{}, peak_by_category{};
  // Category and owner breakdown at the moment of the global peak of `allocated`.
  std::array<int64_t, kNumCategories> at_peak_by_category{};
  std::map<std::string, int64_t> at_peak_by_owner;
  int64_t num_allocs = 0, num_frees = 0, num_segments = 0, cache_hits = 0, num_ooms = 0;
  int64_t limit = 0;  // 0: none

  int64_t category(Category c) const { return by_category[size_t(c)]; }
  int64_t peak(Category c) const { return peak_by_category[size_t(c)]; }
};

MemoryStats memory_stats(const Device& d = kCPU);
void reset_peak(const Device& d = kCPU);
// Caps the bytes allocated on `d` (0 removes the cap); past it allocation throws OutOfMemoryError.
void set_memory_limit(const Device& d, int64_t bytes);
// Live bytes per owner label on `d`.
std::map<std::string, int64_t> memory_by_owner(const Device& d = kCPU);

}  // namespace mg

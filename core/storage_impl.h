// Storage's door to the memory budget (private). Storage sits below Tensor and the budget runtime
// (core/budget/) sits above both, since its recipes replay kernels on tensors, so Storage cannot
// include the runtime: the runtime installs these functions when it first puts a device under a
// budget (budget::enable), as it installs the allocator's PressureHook. Until then every storage
// keeps its own bytes and asks nothing further.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <memgrad/core/allocator.h>

namespace mg {

namespace budget {
struct Cell;
}

namespace detail {

// What Storage asks of the runtime (core/budget/runtime_impl.h describes each): whether `d` is under
// a budget now; a cell for fresh bytes (or for a storage met under the budget later); the bytes for
// an access, brought back first; a cell's block, category and owner; the last handle gone.
struct StorageBudget {
  bool (*active)(const Device& d);
  std::shared_ptr<budget::Cell> (*adopt)(const Device& d, size_t nbytes, Block* block, void* wrapped,
                                         std::function<void(void*)> deleter, bool fresh);
  void* (*data)(budget::Cell& c);
  const Block* (*block)(const budget::Cell& c);
  void (*set_category)(budget::Cell& c, Category category);
  Category (*category)(const budget::Cell& c);
  void (*set_owner)(budget::Cell& c, const std::string& owner);
  void (*storage_died)(std::shared_ptr<budget::Cell> c);
};
// Installed once by the runtime (later calls change nothing); the door stays, a device's budget is
// switched off in the runtime (active() answers false).
void set_storage_budget(const StorageBudget& door);

}  // namespace detail
}  // namespace mg

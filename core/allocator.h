// The one allocation path for tensor storage on every device. A Block records what it is
// for (category, owner, op) so the ledger is exact bookkeeping, not a guess after the fact.
#pragma once
#include <cstddef>
#include <string>

#include <memgrad/core/device.h>
#include <memgrad/core/memory.h>

namespace mg {

struct Block {
  void* ptr = nullptr;   // null on the meta device
  size_t size = 0;       // bytes counted in the ledger (rounded)
  size_t requested = 0;  // bytes asked for
  Device device;
  Category category = Category::Other;
  std::string owner;
};

namespace memory {
// Allocates `nbytes` on `d`, under the current scope's category or `fallback`.
Block* allocate(const Device& d, size_t nbytes, Category fallback);
void release(Block* b);
// Moves a live block to another category (e.g. Temporary -> Activation when autograd saves it).
void set_category(Block* b, Category c);
// The op whose allocations follow (for owner labels of op outputs); see OpScope.
const char* current_op();
}  // namespace memory

// Marks allocations made inside an op with the op's name.
class OpScope {
 public:
  explicit OpScope(const char* op);
  ~OpScope();

 private:
  const char* prev_;
};

}  // namespace mg

// A tensor's bytes: one ledger block (or user memory wrapped by from_blob) plus the version
// counter that autograd uses to catch in-place changes to saved tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include <memgrad/core/allocator.h>

namespace mg {

namespace budget {
struct Cell;
}

class Storage {
 public:
  // Allocates through the ledger under the current scope's category, else `fallback`.
  Storage(const Device& d, size_t nbytes, Category fallback);
  // Wraps memory the caller owns; `deleter` (may be empty) runs when the storage dies.
  Storage(void* data, size_t nbytes, const Device& d, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Under a memory budget (core/budget/budget.h) the bytes may have been evicted or offloaded: reading the
  // pointer brings them back, and outside a kernel it keeps them on the device from then on.
  void* data() const;
  size_t nbytes() const { return nbytes_; }
  const Device& device() const { return device_; }
  const Block* block() const;  // null for wrapped memory (and while evicted or offloaded)

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

  // The bytes can leave while the storage stays (PyTorch's storage resize_(0) and back, on which
  // FSDP is built): every tensor over it, saved tensors included, keeps its shape and finds the bytes
  // again once they are back. release_bytes() returns them to the allocator; reacquire_bytes() books
  // fresh ones under the scope's category and owner, else `fallback` (their values undefined until
  // the caller fills them). While they are away data() raises ValueError. Storages over wrapped
  // memory or under a memory budget (core/budget/budget.h) cannot release theirs.
  void release_bytes();
  void reacquire_bytes(Category fallback);
  bool has_bytes() const { return !released_; }
  // The caller has refilled reacquired bytes with the values they held before release_bytes(): the
  // writes are not a change, so the version goes back to what it was then (tensors saved for
  // backward over this storage stay valid).
  void mark_refilled() { version_ = released_version_; }

  // While autograd holds an op output (Temporary) for backward its bytes count as Activation.
  void add_saved_ref();
  void drop_saved_ref();
  // Re-labels the bytes (e.g. a gradient stored into .grad becomes Gradient).
  void set_category(Category c);
  Category category() const;
  // Re-labels the owner of the bytes in the ledger (no-op for wrapped memory).
  void set_owner(const std::string& owner);

  // The budget runtime's record of these bytes, made on first use while the device is under a
  // budget (null otherwise). For the runtime only.
  const std::shared_ptr<budget::Cell>& budget_cell() const;

 private:
  void relabel(Category c);

  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Block* block_ = nullptr;
  std::function<void(void*)> deleter_;
  uint64_t version_ = 0, released_version_ = 0;
  bool released_ = false;
  int saved_refs_ = 0;
  Category unsaved_category_ = Category::Other;
  mutable std::shared_ptr<budget::Cell> cell_;  // when set, it holds the bytes (block_ and deleter_ moved there)
};

}  // namespace mg

#include <memgrad/core/storage.h>

#include <atomic>

#include <memgrad/core/error.h>
#include <memgrad/core/host_memory.h>
#include <memgrad/core/storage_impl.h>

namespace mg {

namespace {

std::atomic<const detail::StorageBudget*> g_budget{nullptr};  // the runtime's door (storage_impl.h)

// The door when `d` is under a budget now, else null.
const detail::StorageBudget* budget_of(const Device& d) {
  const detail::StorageBudget* b = g_budget.load(std::memory_order_acquire);
  return b && b->active(d) ? b : nullptr;
}
const detail::StorageBudget& door() { return *g_budget.load(std::memory_order_acquire); }  // a cell exists

}  // namespace

void detail::set_storage_budget(const StorageBudget& hooks) {
  static const StorageBudget installed = hooks;
  g_budget.store(&installed, std::memory_order_release);
}

Storage::Storage(const Device& d, size_t nbytes, Category fallback) : nbytes_(nbytes), device_(d) {
  if (detail::in_host_memory(d)) {  // outside the ledger: the host memory of a device (HostMemoryScope)
    data_ = detail::host_allocate(nbytes, current_category(fallback), &deleter_);
    return;
  }
  block_ = memory::allocate(d, nbytes, fallback);
  data_ = block_->ptr;
  unsaved_category_ = block_->category;
  if (const detail::StorageBudget* b = budget_of(d)) {
    cell_ = b->adopt(d, nbytes, block_, nullptr, nullptr, true);
    block_ = nullptr;
  }
}

Storage::Storage(void* data, size_t nbytes, const Device& d, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(d), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (cell_) {
    door().storage_died(std::move(cell_));
    return;
  }
  if (block_) memory::release(block_);
  if (deleter_) deleter_(data_);
}

void* Storage::data() const {
  MG_CHECK(!released_, ValueError, "storage of ", nbytes_, " B on ", device_,
           ": its bytes were released (release_bytes) and not reacquired; ZeRO-3 and parameter offload hold a "
           "unit's parameters this way between its forward and backward");
  return cell_ ? door().data(*cell_) : data_;
}

void Storage::release_bytes() {
  MG_CHECK(block_ && !cell_, ValueError, "release_bytes: expected a storage whose bytes the allocator holds, got ",
           cell_       ? "one under a memory budget"
           : released_ ? "one already released"
                       : "wrapped memory");
  unsaved_category_ = block_->category;
  memory::release(block_);
  block_ = nullptr, data_ = nullptr;
  released_ = true, released_version_ = version_;
}

void Storage::reacquire_bytes(Category fallback) {
  MG_CHECK(released_, ValueError,
           "reacquire_bytes: expected a storage whose bytes were released, got one that has them");
  block_ = memory::allocate(device_, nbytes_, fallback);
  data_ = block_->ptr;
  released_ = false;
  unsaved_category_ = block_->category;
  if (saved_refs_ > 0 && unsaved_category_ == Category::Temporary) relabel(Category::Activation);
}

const Block* Storage::block() const { return cell_ ? door().block(*cell_) : block_; }

const std::shared_ptr<budget::Cell>& Storage::budget_cell() const {
  if (const detail::StorageBudget* b = cell_ ? nullptr : budget_of(device_)) {
    cell_ = b->adopt(device_, nbytes_, block_, block_ ? nullptr : data_, std::move(deleter_), false);
    const_cast<Storage*>(this)->block_ = nullptr;
  }
  return cell_;
}

void Storage::relabel(Category c) {
  if (cell_)
    door().set_category(*cell_, c);
  else if (block_)
    memory::set_category(block_, c);
}

// Only op outputs (Temporary) become Activation: a saved parameter stays Parameter and a saved
// user input stays Input, so each byte is counted for what it is.
void Storage::add_saved_ref() {
  if (saved_refs_++ == 0 && (block_ || cell_)) {
    unsaved_category_ = category();
    if (unsaved_category_ == Category::Temporary) relabel(Category::Activation);
  }
}

void Storage::drop_saved_ref() {
  if (--saved_refs_ == 0 && (block_ || cell_)) relabel(unsaved_category_);
}

void Storage::set_category(Category c) {
  unsaved_category_ = c;
  relabel(saved_refs_ > 0 && c == Category::Temporary ? Category::Activation : c);
}

void Storage::set_owner(const std::string& owner) {
  if (cell_)
    door().set_owner(*cell_, owner);
  else if (block_)
    memory::set_owner(block_, owner);
}

Category Storage::category() const {
  if (cell_) return door().category(*cell_);
  return block_ ? block_->category : Category::Other;
}

}  // namespace mg

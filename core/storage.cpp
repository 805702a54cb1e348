#include <memgrad/core/storage.h>

namespace mg {

Storage::Storage(const Device& d, size_t nbytes, Category fallback)
    : nbytes_(nbytes), device_(d), block_(memory::allocate(d, nbytes, fallback)) {
  data_ = block_->ptr;
  unsaved_category_ = block_->category;
}

Storage::Storage(void* data, size_t nbytes, const Device& d, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(d), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (block_) memory::release(block_);
  if (deleter_) deleter_(data_);
}

// Only op outputs (Temporary) become Activation: a saved parameter stays Parameter and a saved
// user input stays Input, so each byte is counted for what it is.
void Storage::add_saved_ref() {
  if (saved_refs_++ == 0 && block_) {
    unsaved_category_ = block_->category;
    if (unsaved_category_ == Category::Temporary) memory::set_category(block_, Category::Activation);
  }
}

void Storage::drop_saved_ref() {
  if (--saved_refs_ == 0 && block_) memory::set_category(block_, unsaved_category_);
}

void Storage::set_category(Category c) {
  unsaved_category_ = c;
  if (block_) memory::set_category(block_, saved_refs_ > 0 && c == Category::Temporary ? Category::Activation : c);
}

void Storage::set_owner(const std::string& owner) {
  if (block_) memory::set_owner(block_, owner);
}

Category Storage::category() const { return block_ ? block_->category : Category::Other; }

}  // namespace mg

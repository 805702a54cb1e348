#include <memgrad/data/dataset.h>

#include <algorithm>

#include <memgrad/ops/ops.h>

namespace mg::data {

Example Dataset::get(int64_t index) const {
  MG_CHECK(index >= 0 && index < size(), IndexError, "Dataset::get: example ", index, " of ", size());
  const Field d = data_field(), t = target_field();
  Example e{empty(d.shape, d.dtype), empty(t.shape, t.dtype)};
  read(index, e.data.raw_data(), e.target.raw_data());
  return e;
}

TokenWindows::TokenWindows(std::shared_ptr<const Tokens> tokens, int64_t length, int64_t stride, int64_t begin,
                           int64_t end)
    : tokens_(std::move(tokens)), length_(length), stride_(stride), begin_(begin) {
  MG_CHECK(tokens_, ValueError, "TokenWindows: no tokens");
  if (end < 0) end = tokens_->size();
  MG_CHECK(length >= 1 && stride >= 1, ValueError, "TokenWindows: expected a length and stride >= 1, got ", length,
           " and ", stride);
  MG_CHECK(0 <= begin && begin <= end && end <= tokens_->size(), IndexError, "TokenWindows: tokens [", begin, ", ", end,
           ") of ", tokens_->name(), ", which holds ", tokens_->size());
  MG_CHECK(end - begin > length, ValueError, "TokenWindows: a window of ", length, " tokens and the token after it (",
           length + 1, ") is longer than the ", end - begin, " tokens of ", tokens_->name(),
           begin || end != tokens_->size() ? " it is given" : "");
  size_ = (end - begin - length - 1) / stride + 1;
}

void TokenWindows::read(int64_t index, void* data, void* target) const {
  auto* x = static_cast<int64_t*>(data);
  auto* y = static_cast<int64_t*>(target);
  tokens_->read(start(index), length_, x);
  std::copy(x + 1, x + length_, y);
  tokens_->read(start(index) + length_, 1, y + length_ - 1);
}

}  // namespace mg::data

// A vector that keeps its first N elements inline: no allocation until it grows past N. For the
// short per-dim lists of hot loops (a tensor rarely has more than a few dims).
#pragma once
#include <array>
#include <cstddef>
#include <vector>

namespace mg {

template <class T, size_t N>
class SmallVector {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return size_ <= N ? inline_.data() : heap_.data(); }
  const T* data() const { return size_ <= N ? inline_.data() : heap_.data(); }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  void push_back(const T& v) {
    if (size_ < N) {
      inline_[size_++] = v;
      return;
    }
    if (size_ == N) heap_.assign(inline_.begin(), inline_.end());
    heap_.push_back(v);
    ++size_;
  }

 private:
  std::array<T, N> inline_{};
  std::vector<T> heap_;  // all elements once there are more than N
  size_t size_ = 0;
};

}  // namespace mg

// SmallVector<T, N>: a vector that keeps its first N elements inline, in the object itself, and
// allocates only when it grows past N (it then moves all its elements to the heap, as a std::vector
// would). For the short lists of the hot paths: a tensor's shape and strides (Shape, core/shape.h),
// an autograd node's edges and outputs, the merged dims of a kernel's loop.
//
// It has the std::vector interface the code base uses (the same signatures and the same results,
// `at` throwing std::out_of_range), with raw pointers as iterators, and converts implicitly from and
// to std::vector<T>, so that code written for a std::vector (a Shape taken or returned as
// std::vector<int64_t>) still compiles. Differences from std::vector: iterators and references are
// also invalidated by moving the vector while its elements are inline, and it holds at most
// 2^32 - 1 elements (std::length_error beyond).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mg {

template <class T, size_t N>
class SmallVector {
  static_assert(N > 0, "SmallVector: N must be at least 1 (use std::vector for no inline elements)");

  template <class It>
  using if_input_iterator = std::enable_if_t<
      std::is_convertible_v<typename std::iterator_traits<It>::iterator_category, std::input_iterator_tag>>;

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() noexcept {}
  explicit SmallVector(size_t n) { resize(n); }
  SmallVector(size_t n, const T& value) { assign(n, value); }
  template <class It, class = if_input_iterator<It>>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  SmallVector(std::initializer_list<T> list) { assign(list.begin(), list.end()); }
  SmallVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit by design
  SmallVector(const SmallVector& other) { assign(other.begin(), other.end()); }
  SmallVector(SmallVector&& other) noexcept(std::is_nothrow_move_constructible_v<T>) { take(std::move(other)); }
  ~SmallVector() { release(); }

  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    if (this != &other) {
      release();
      data_ = inline_data();
      size_ = 0;
      capacity_ = N;
      take(std::move(other));
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> list) {
    assign(list.begin(), list.end());
    return *this;
  }
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit by design

  // ---- access
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return capacity_; }
  static constexpr size_t max_size() noexcept { return UINT32_MAX; }
  static constexpr size_t inline_capacity() noexcept { return N; }
  bool is_inline() const noexcept { return data_ == inline_data(); }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& at(size_t i) { return data_[checked(i)]; }
  const T& at(size_t i) const { return data_[checked(i)]; }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }
  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return begin(); }
  const_iterator cend() const noexcept { return end(); }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }
  const_reverse_iterator crbegin() const noexcept { return rbegin(); }
  const_reverse_iterator crend() const noexcept { return rend(); }

  // ---- changes
  void reserve(size_t n) {
    if (n > capacity_) grow_to(n);
  }
  void clear() noexcept { truncate(0); }
  void push_back(const T& value) { emplace_back(value); }
  void push_back(T&& value) { emplace_back(std::move(value)); }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) return grow_and_emplace_back(std::forward<Args>(args)...);
    T* p = ::new (static_cast<void*>(data_ + size_)) T(std::forward<Args>(args)...);
    ++size_;
    return *p;
  }
  void pop_back() { data_[--size_].~T(); }
  void resize(size_t n) {
    if (n <= size_) return truncate(n);
    reserve(n);
    for (; size_ < n; ++size_) ::new (static_cast<void*>(data_ + size_)) T();
  }
  void resize(size_t n, const T& value) {
    if (n <= size_) return truncate(n);
    const T copy(value);  // `value` may be an element, which growing moves
    reserve(n);
    for (; size_ < n; ++size_) ::new (static_cast<void*>(data_ + size_)) T(copy);
  }
  void assign(size_t n, const T& value) {
    const T copy(value);
    clear();
    resize(n, copy);
  }
  template <class It, class = if_input_iterator<It>>
  void assign(It first, It last) {
    clear();
    if constexpr (std::is_base_of_v<std::forward_iterator_tag, typename std::iterator_traits<It>::iterator_category>) {
      reserve(size_t(std::distance(first, last)));
      std::uninitialized_copy(first, last, data_);
      size_ = uint32_t(std::distance(first, last));
    } else {
      for (; first != last; ++first) emplace_back(*first);
    }
  }
  void assign(std::initializer_list<T> list) { assign(list.begin(), list.end()); }

  // Inserts before `pos`; returns an iterator to the first element inserted (`pos` when none).
  template <class... Args>
  iterator emplace(const_iterator pos, Args&&... args) {
    const size_t i = index(pos);
    emplace_back(std::forward<Args>(args)...);
    std::rotate(begin() + i, end() - 1, end());
    return begin() + i;
  }
  iterator insert(const_iterator pos, const T& value) { return emplace(pos, value); }
  iterator insert(const_iterator pos, T&& value) { return emplace(pos, std::move(value)); }
  iterator insert(const_iterator pos, size_t n, const T& value) {
    const size_t i = index(pos), old = size_;
    resize(size_ + n, value);
    std::rotate(begin() + i, begin() + old, end());
    return begin() + i;
  }
  template <class It, class = if_input_iterator<It>>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t i = index(pos), old = size_;
    // Copied first: the range may lie in this vector, which appending may move.
    SmallVector added(first, last);
    reserve(size_ + added.size());
    for (T& v : added) emplace_back(std::move(v));
    std::rotate(begin() + i, begin() + old, end());
    return begin() + i;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> list) { return insert(pos, list.begin(), list.end()); }
  // Removes [first, last) or the one element at `pos`; returns an iterator to the element after them.
  iterator erase(const_iterator first, const_iterator last) {
    T* f = begin() + index(first);
    T* l = begin() + index(last);
    if (f != l) truncate(size_t(std::move(l, end(), f) - begin()));
    return f;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  void swap(SmallVector& other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    SmallVector tmp(std::move(other));
    other = std::move(*this);
    *this = std::move(tmp);
  }
  friend void swap(SmallVector& a, SmallVector& b) noexcept(noexcept(a.swap(b))) { a.swap(b); }

  // ---- comparisons (as std::vector's; a std::vector<T> operand converts)
  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVector& a, const SmallVector& b) { return !(a == b); }
  friend bool operator<(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator>(const SmallVector& a, const SmallVector& b) { return b < a; }
  friend bool operator<=(const SmallVector& a, const SmallVector& b) { return !(b < a); }
  friend bool operator>=(const SmallVector& a, const SmallVector& b) { return !(a < b); }

 private:
  T* inline_data() noexcept { return std::launder(reinterpret_cast<T*>(inline_)); }
  const T* inline_data() const noexcept { return std::launder(reinterpret_cast<const T*>(inline_)); }
  size_t index(const_iterator pos) const { return size_t(pos - begin()); }
  size_t checked(size_t i) const {
    if (i >= size_)
      throw std::out_of_range("SmallVector::at: index " + std::to_string(i) + " >= size " + std::to_string(size_));
    return i;
  }

  // Moves the elements to a heap block of at least `n` (and at least twice the current capacity).
  void grow_to(size_t n) {
    if (n > max_size()) throw std::length_error("SmallVector: more than 2^32 - 1 elements");
    const size_t cap = std::min<size_t>(max_size(), std::max<size_t>(n, 2 * size_t(capacity_)));
    T* heap = std::allocator<T>().allocate(cap);
    std::uninitialized_move(begin(), end(), heap);
    std::destroy(begin(), end());
    if (!is_inline()) std::allocator<T>().deallocate(data_, capacity_);
    data_ = heap;
    capacity_ = uint32_t(cap);
  }
  template <class... Args>
  T& grow_and_emplace_back(Args&&... args) {
    T value(std::forward<Args>(args)...);  // the arguments may refer to elements, which growing moves
    grow_to(size_t(size_) + 1);
    T* p = ::new (static_cast<void*>(data_ + size_)) T(std::move(value));
    ++size_;
    return *p;
  }
  void truncate(size_t n) noexcept {
    std::destroy(begin() + n, end());
    size_ = uint32_t(n);
  }
  // Takes `other`'s elements (its heap block, or its inline elements one by one); `other` is left empty.
  void take(SmallVector&& other) {
    if (other.is_inline()) {
      std::uninitialized_move(other.begin(), other.end(), data_);
      size_ = other.size_;
      other.clear();
    } else {
      data_ = other.data_;
      size_ = other.size_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_data();
      other.size_ = 0;
      other.capacity_ = N;
    }
  }
  void release() noexcept {
    clear();
    if (!is_inline()) std::allocator<T>().deallocate(data_, capacity_);
  }

  T* data_ = inline_data();
  uint32_t size_ = 0;
  uint32_t capacity_ = N;
  alignas(T) unsigned char inline_[N * sizeof(T)];
};

}  // namespace mg

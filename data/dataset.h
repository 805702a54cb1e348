// Datasets: numbered examples of an input and a target, as libtorch's torch::data::datasets. An
// example is written into memory the caller provides (a row of a batch buffer the DataLoader owns),
// so reading one allocates nothing and can run on the loader's worker threads.
#pragma once
#include <cstdint>
#include <memory>

#include <memgrad/core/tensor.h>
#include <memgrad/data/tokens.h>

namespace mg::data {

// The shape and dtype of one example's input or target (a batch puts the batch dimension first).
struct Field {
  Shape shape;
  DType dtype = kFloat32;
  int64_t nbytes() const { return numel_of(shape) * int64_t(dtype_size(dtype)); }
};

// An example's tensors, or a batch's.
struct Example {
  Tensor data, target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;  // examples 0 .. size() - 1
  virtual Field data_field() const = 0;
  virtual Field target_field() const = 0;
  // Writes example `index` (in [0, size())) to `data` and `target`, contiguous host memory of the
  // fields' byte sizes. Called from several threads at once: it must not change the dataset.
  virtual void read(int64_t index, void* data, void* target) const = 0;
  // Example `index` as fresh cpu tensors (Input in the ledger). IndexError outside [0, size()).
  Example get(int64_t index) const;
};

// Next-token prediction over a token stream: example i is the window of `length` tokens starting at
// begin + i * stride (data), and the same window one token later (target), both int64 [length]. The
// windows lie in tokens [begin, end) (end -1: the stream's end), each with the token after it.
class TokenWindows : public Dataset {
 public:
  // ValueError when the range holds no window of length + 1 tokens, or for length or stride < 1.
  TokenWindows(std::shared_ptr<const Tokens> tokens, int64_t length, int64_t stride = 1, int64_t begin = 0,
               int64_t end = -1);
  int64_t size() const override { return size_; }
  Field data_field() const override { return {{length_}, kInt64}; }
  Field target_field() const override { return {{length_}, kInt64}; }
  void read(int64_t index, void* data, void* target) const override;
  int64_t start(int64_t index) const { return begin_ + index * stride_; }  // the window's first token
  const Tokens& tokens() const { return *tokens_; }

 private:
  std::shared_ptr<const Tokens> tokens_;
  int64_t length_, stride_, begin_, size_;
};

}  // namespace mg::data

// DataParallel's state and its step's machinery, shared by data_parallel.cpp (the step, gathers) and
// data_parallel_state.cpp (state dicts, the shard table).
#pragma once
#include <chrono>
#include <optional>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/host_memory.h>
#include <memgrad/core/memory.h>
#include <memgrad/distributed/data_parallel.h>
#include <memgrad/distributed/work_impl.h>
#include <memgrad/ops/ops.h>
#include <memgrad/optim/clip.h>

namespace mg::distributed {

namespace detail {

// Copies between a flattened parameter-sized tensor `flat` (n elements) and its column in a
// rank-major buffer of `ranks` rows of `row` elements: rank r's slice [r c, r c + len_r) <-> row r,
// columns [col, col + len_r). Full rows move in one strided copy, the last partial row in another.
void copy_slices(const Tensor& buffer, int64_t ranks, int64_t row, int64_t col, int64_t c, const Tensor& flat,
                 bool into_buffer);

}  // namespace detail

struct DataParallel::Impl {
  using Clock = std::chrono::steady_clock;
  struct Param {
    std::string name;
    Tensor tensor;  // the model's parameter
    size_t index = 0;
    int64_t numel = 0, chunk = 0;  // chunk: the longest slice of any rank
    size_t bucket = 0;
    int64_t flat_offset = 0;   // in the bucket's all-reduce buffer
    int64_t slice_offset = 0;  // in one rank's part of the bucket's sharded buffers
    Tensor slice;              // this rank's slice (a view of `tensor`; `tensor` itself at stage 0); may be empty
    Tensor optimized;          // what the optimizer updates for it here: `slice`, or its float32 master
    uint64_t hook = 0;
    bool ready = false;
    bool used = false;  // had a gradient of its own on this rank in this step
  };
  struct Bucket {
    BucketLayout layout;
    Device device;
    int ready = 0;
    bool launched = false, done = false;
    Tensor buffer;      // in flight: the all-reduce buffer (stages 0-1) or the reduce-scatter input (stage 2)
    Tensor shard_grad;  // stage 2: this rank's reduced gradients, summed over the step's micro-batches
    Tensor incoming;    // stage 2: a later micro-batch's reduce-scatter output, added once it arrives
    Work work;
  };

  ProcessGroup* group;
  DataParallelOptions options;
  int rank, size;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  std::vector<BucketLayout> layouts;
  std::unique_ptr<amp::MasterWeights> masters;
  std::unique_ptr<ParameterUnits> units;  // stage 3
  size_t next = 0;  // the next bucket to launch (in order, so every rank issues the same collectives)
  bool sync = true;
  double blocked = 0;

  std::pair<int64_t, int64_t> slice(const Param& p, int r) const {
    if (units) return units->piece(p.index, r);
    const int64_t begin = std::min(p.numel, int64_t(r) * p.chunk);
    return {begin, std::min(p.numel, begin + p.chunk)};
  }

  void wait(Work& w) {
    const auto t0 = Clock::now();
    w.wait();
    blocked += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void on_ready(size_t i) {
    if (!sync && options.zero_stage_ < 2) return;
    Param& p = params[i];
    MG_CHECK(!p.ready, AutogradError, "DataParallel: the gradient of '", p.name,
             "' was accumulated twice before finish_backward(); call finish_backward() after each backward");
    p.ready = true;
    ++buckets[p.bucket].ready;
    while (next < buckets.size() && buckets[next].ready == int(buckets[next].layout.params.size())) launch(next++);
  }

  void launch(size_t k) {
    NoGradGuard ng;
    Bucket& b = buckets[k];
    const BucketLayout& l = b.layout;
    bool missing = false;
    for (size_t j : l.params) {
      const bool has = params[j].tensor.grad().defined();
      missing = missing || !has;
      params[j].used = params[j].used || has;
    }
    if (options.zero_stage_ < 2) {
      b.buffer = reusable_buffer(b);
      if (b.buffer.defined()) {
        b.buffer.storage()->set_owner("ddp.bucket." + std::to_string(k));
      } else {
        b.buffer = detail::comm_buffer(l.elements, l.dtype, b.device, Category::Gradient,
                                       "ddp.bucket." + std::to_string(k), missing);
        for (size_t j : l.params) {  // the gradients move into the bucket; .grad becomes a view of it
          Param& p = params[j];
          Tensor view = b.buffer.narrow(0, p.flat_offset, p.numel).view(p.tensor.shape());
          if (Tensor g = p.tensor.grad(); g.defined()) view.copy_(g);
          p.tensor.set_grad(view);
        }
      }
      b.work = group->all_reduce(b.buffer);
    } else {
      bool padded = missing;
      for (size_t j : l.params) padded = padded || params[j].chunk * size != params[j].numel;
      b.buffer = detail::comm_buffer(l.chunk * size, l.dtype, b.device, Category::Workspace,
                                     "zero.reduce_scatter." + std::to_string(k), padded);
      for (size_t j : l.params) {
        Param& p = params[j];
        if (Tensor g = p.tensor.grad(); g.defined())
          detail::copy_slices(b.buffer, size, l.chunk, p.slice_offset, p.chunk, g.reshape({-1}), true);
        p.tensor.set_grad(Tensor());  // the full gradient is not kept
      }
      Tensor out;
      if (!b.shard_grad.defined())
        out = b.shard_grad = detail::comm_buffer(l.chunk, l.dtype, b.device, Category::Gradient,
                                                 "zero.grad_shard." + std::to_string(k), false);
      else
        out = b.incoming = detail::comm_buffer(l.chunk, l.dtype, b.device, Category::Workspace,
                                               "zero.reduce_scatter." + std::to_string(k) + ".out", false);
      b.work = group->reduce_scatter(out, b.buffer);
    }
    b.launched = true;
    if (options.zero_stage_ == 2 && k > 0) complete(k - 1);  // at most two reduce-scatter buffers alive
  }

  // The bucket's existing memory when every gradient in it is already its view (they were zeroed in
  // place instead of dropped; or the bucket holds one parameter, whose gradient buffer is the bucket),
  // so the all-reduce runs on it without a copy.
  Tensor reusable_buffer(const Bucket& b) const {
    std::shared_ptr<Storage> storage;
    int64_t base = 0;
    for (size_t j : b.layout.params) {
      const Param& p = params[j];
      Tensor g = p.tensor.grad();
      if (!g.defined() || !g.is_contiguous() || g.storage()->nbytes() != size_t(b.layout.elements) * g.element_size())
        return {};
      if (!storage) storage = g.storage(), base = g.storage_offset() - p.flat_offset;
      if (g.storage() != storage || g.storage_offset() != base + p.flat_offset || base != 0) return {};
    }
    return make_tensor(storage, {b.layout.elements}, {1}, 0, b.layout.dtype);
  }

  void complete(size_t k) {
    Bucket& b = buckets[k];
    if (!b.launched || b.done) return;
    wait(b.work);
    b.work = Work();
    b.done = true;
    if (b.incoming.defined()) {
      NoGradGuard ng;
      b.shard_grad.add_(b.incoming);
      b.incoming = Tensor();
    }
    b.buffer = Tensor();
  }

  void finish() {
    if (!sync && options.zero_stage_ < 2) return;
    while (next < buckets.size()) launch(next++);
    for (size_t k = 0; k < buckets.size(); ++k) complete(k);
    for (auto& b : buckets) b.ready = 0, b.launched = b.done = false;
    next = 0;
    // A parameter no rank gave a gradient keeps none (its bucket carried zeros for it), as in one process.
    const std::vector<bool> used = detail::on_any_rank(*group, params, [](const Param& p) { return p.used; });
    NoGradGuard ng;
    for (size_t i = 0; i < params.size(); ++i) {
      Param& p = params[i];
      p.ready = false;
      if (!used[i]) {
        p.tensor.set_grad(Tensor());
        continue;
      }
      if (options.zero_stage_ == 0 || !p.slice.defined() || p.slice.numel() == 0)
        continue;  // (an empty slice: padding)
      const auto [begin, end] = slice(p, rank);
      p.slice.set_grad(options.zero_stage_ == 1 ? p.tensor.grad().view({-1}).narrow(0, begin, end - begin)
                                                : buckets[p.bucket].shard_grad.narrow(0, p.slice_offset, end - begin));
    }
  }

  // The optimizer's parameters by index into `params` (-1: none on this rank), matched by identity.
  std::vector<int64_t> optimizer_index(const optim::Optimizer& opt) const {
    std::vector<int64_t> index;
    for (auto& g : opt.param_groups())
      for (auto& t : g.params) {
        int64_t found = -1;
        for (size_t i = 0; i < params.size() && found < 0; ++i)
          if (optimizer_tensor(i).defined() && optimizer_tensor(i).is_same(t)) found = int64_t(i);
        MG_CHECK(found >= 0, ValueError,
                 "DataParallel: expected an optimizer built over optimizer_parameters(), got one with other tensors");
        index.push_back(found);
      }
    return index;
  }
  Tensor optimizer_tensor(size_t i) const { return params[i].optimized; }

  // Rank r's part of state kept per `block` elements of parameter p (stages 1-2, whose slices start at
  // multiples of the block): blocks [first, second) of its ceil(n / block); block 0: its elements.
  std::pair<int64_t, int64_t> blocks(const Param& p, int r, int64_t block) const {
    if (block == 0) return slice(p, r);
    const int64_t n = (p.numel + block - 1) / block, c = p.chunk / block, begin = std::min(n, int64_t(r) * c);
    return {begin, std::min(n, begin + c)};
  }
  // The whole of parameter p's `values` (this rank's slice of it, or undefined for none), gathered
  // from every rank's slice (collective): padded to the longest, all-gathered, put end to end. With a
  // `block`, values kept per block of the slice (one value each), into the whole's blocks (1-D).
  Tensor gather_slices(const Param& p, DType dtype, const Tensor& values, int64_t block = 0) const {
    const TensorOptions o = TensorOptions(dtype).device(p.tensor.device());
    const int64_t c = block ? p.chunk / block : p.chunk, n = block ? (p.numel + block - 1) / block : p.numel;
    Tensor mine = zeros({c}, o), all = empty({c * size}, o), whole = empty({n}, o);
    if (values.defined()) mine.narrow(0, 0, values.numel()).copy_(values.reshape({-1}));
    group->all_gather(all, mine).wait();
    for (int r = 0; r < size; ++r)
      if (const auto [begin, end] = blocks(p, r, block); end > begin)
        whole.narrow(0, begin, end - begin).copy_(all.narrow(0, int64_t(r) * c, end - begin));
    return block ? whole : whole.view(p.tensor.shape());
  }
  // This rank's slice of `t`, a whole value of parameter p (checked for its size); with a `block`, of
  // a value per block of p (8-bit state's absmax).
  Tensor my_slice(const Param& p, const Tensor& t, const std::string& key, int64_t block = 0) const {
    const int64_t n = block ? (p.numel + block - 1) / block : p.numel;
    MG_CHECK(t.numel() == n, ShapeError, "DataParallel: '", key, "' expected ",
             block ? "[" + std::to_string(n) + "] (one value per " + std::to_string(block) + " elements of the"
                   : shape_str(p.tensor.shape()) + " (the",
             " parameter '", p.name, "'), got ", shape_str(t.shape()));
    if (options.zero_stage_ == 0) return t;
    const auto [begin, end] = blocks(p, rank, block);
    return t.reshape({-1}).narrow(0, begin, end - begin).contiguous();
  }
};

}  // namespace mg::distributed

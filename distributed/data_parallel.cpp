#include <memgrad/distributed/data_parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/host_memory.h>
#include <memgrad/core/memory.h>
#include <memgrad/distributed/data_parallel_impl.h>
#include <memgrad/distributed/work_impl.h>
#include <memgrad/ops/ops.h>
#include <memgrad/optim/clip.h>

namespace mg::distributed {

namespace detail {

void copy_slices(const Tensor& buffer, int64_t ranks, int64_t row, int64_t col, int64_t c, const Tensor& flat,
                 bool into_buffer) {
  const int64_t n = flat.numel(), full = n / c, rest = n - full * c;
  const Tensor grid = buffer.view({ranks, row});
  auto move = [into_buffer](Tensor b, Tensor f) { into_buffer ? b.copy_(f) : f.copy_(b); };
  if (full > 0) move(grid.narrow(0, 0, full).narrow(1, col, c), flat.narrow(0, 0, full * c).view({full, c}));
  if (rest > 0) move(grid.select(0, full).narrow(0, col, rest), flat.narrow(0, full * c, rest));
}

}  // namespace detail

namespace {

using detail::comm_buffer;
using detail::copy_slices;

}  // namespace

DataParallel::DataParallel(const nn::NamedTensors& named, ProcessGroup& group, const DataParallelOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  MG_CHECK(options.zero_stage_ >= 0 && options.zero_stage_ <= 3, ValueError,
           "DataParallel: expected ZeRO stage 0, 1, 2 or 3, got ", options.zero_stage_);
  MG_CHECK(!options.offload_ || options.zero_stage_ == 3, ValueError,
           "DataParallel: parameter offload runs ZeRO-3's schedule with host memory as the shards' home; expected "
           "zero_stage(3), got ",
           options.zero_stage_);
  MG_CHECK(options.bucket_bytes_ > 0, ValueError, "DataParallel: expected bucket_bytes > 0, got ",
           options.bucket_bytes_);
  MG_CHECK(options.slice_multiple_ >= 1 && options.slice_multiple_ <= (int64_t(1) << 40), ValueError,
           "DataParallel: expected slice_multiple in [1, 2^40], got ", options.slice_multiple_);
  MG_CHECK(!named.empty(), ValueError, "DataParallel: expected parameters, got none");
  m.group = &group, m.options = options, m.rank = group.rank(), m.size = group.size();
  int halves = 0;
  for (auto& [name, t] : named) {
    MG_CHECK(t.defined() && t.is_leaf() && t.requires_grad() && is_floating(t.dtype()), ValueError,
             "DataParallel: expected floating leaf tensors that require grad, got '", name, "'");
    MG_CHECK(t.is_contiguous(), ValueError, "DataParallel: expected contiguous parameters, got '", name, "'");
    for (auto& p : m.params)
      MG_CHECK(!p.tensor.is_same(t), ValueError, "DataParallel: parameter '", name, "' appears twice");
    Impl::Param p;
    p.name = name, p.tensor = t, p.index = m.params.size(), p.numel = t.numel();
    const int64_t k = options.slice_multiple_;  // (ZeRO-3's units cut their own pieces: k plays no part there)
    p.chunk = std::max<int64_t>(1, (p.numel + m.size - 1) / m.size);
    if (options.zero_stage_ == 1 || options.zero_stage_ == 2) p.chunk = (p.chunk + k - 1) / k * k;
    halves += is_half(t.dtype());
    m.params.push_back(std::move(p));
  }
  MG_CHECK(halves == 0 || halves == int(named.size()), DTypeError,
           "DataParallel: expected parameters all float32/float64, or all float16/bfloat16 (stepped through "
           "float32 masters), got ",
           halves, " half of ", named.size());

  // Buckets in reverse order, as backward reaches the parameters (stages 0-2).
  for (size_t i = options.zero_stage_ == 3 ? 0 : m.params.size(); i-- > 0;) {
    Impl::Param& p = m.params[i];
    const int64_t bytes = p.numel * int64_t(p.tensor.element_size());
    Impl::Bucket* b = m.buckets.empty() ? nullptr : &m.buckets.back();
    if (!b || b->layout.dtype != p.tensor.dtype() || b->device != p.tensor.device() ||
        (b->layout.elements * int64_t(p.tensor.element_size()) + bytes > options.bucket_bytes_)) {
      m.buckets.emplace_back();
      b = &m.buckets.back();
      b->layout.dtype = p.tensor.dtype();
      b->device = p.tensor.device();
    }
    p.bucket = m.buckets.size() - 1;
    p.flat_offset = b->layout.elements, p.slice_offset = b->layout.chunk;
    b->layout.params.push_back(i);
    b->layout.elements += p.numel, b->layout.chunk += p.chunk;
  }
  for (auto& b : m.buckets) m.layouts.push_back(b.layout);

  const bool deferred = nn::is_placeholder(m.params[0].tensor);
  MG_CHECK(!deferred || (options.zero_stage_ == 3 && options.deferred_), ValueError,
           "DataParallel: placeholder parameters (built under nn::DeferredInit) are materialized by ZeRO stage 3 "
           "with DataParallelOptions::deferred; at stage ",
           options.zero_stage_, " materialize them first");
  NoGradGuard ng;
  for (auto& p : m.params) {  // every rank starts from rank 0's values (deferred: computes the same)
    if (deferred) break;
    Tensor values = p.tensor.detach();
    m.group->broadcast(values, 0).wait();
    values.storage()->bump_version();
  }
  if (options.zero_stage_ == 3)  // the parameters become views of their units, each rank keeping its shard
    m.units = std::make_unique<ParameterUnits>(
        named, group, UnitOptions{options.units_, options.offload_, options.prefetch_, options.deferred_});
  for (auto& p : m.params) {
    if (m.units) {
      p.slice = m.units->piece_view(p.index);
      p.chunk = std::max(p.chunk, m.units->longest_piece(p.index));
      continue;
    }
    const auto [begin, end] = m.slice(p, m.rank);
    if (options.zero_stage_ == 0)
      p.slice = p.tensor;
    else if (end > begin)
      p.slice = p.tensor.detach().view({-1}).narrow(0, begin, end - begin);
  }
  // A rank past the last element of every parameter (more ranks than a parameter has elements) keeps
  // an empty slice of the first: its optimizer then has a parameter (an optimizer over none is an
  // error, as in torch), which never gets a gradient, and it runs the step every rank runs.
  if (options.zero_stage_ > 0 &&
      std::none_of(m.params.begin(), m.params.end(), [](auto& p) { return p.slice.defined(); }))
    m.params[0].slice = m.params[0].tensor.detach().view({-1}).narrow(0, 0, 0);
  if (halves) {
    nn::NamedTensors slices;
    for (auto& p : m.params)
      if (p.slice.defined()) slices.emplace_back(p.name, p.slice);
    std::optional<HostMemoryScope> in_host;  // offloaded: the masters live where the shards do
    if (options.offload_) in_host.emplace(m.params[0].tensor.device());
    m.masters = std::make_unique<amp::MasterWeights>(slices);
  }
  size_t next_master = 0;
  for (auto& p : m.params)
    if (p.slice.defined()) p.optimized = m.masters ? m.masters->parameters()[next_master++] : p.slice;
  Impl* impl = impl_.get();
  for (size_t i = 0; i < m.params.size() && !m.units; ++i)
    m.params[i].hook =
        m.params[i].tensor.register_post_accumulate_grad_hook([impl, i](const Tensor&) { impl->on_ready(i); });
}

DataParallel::~DataParallel() {
  for (auto& p : impl_->params)
    if (p.hook) p.tensor.remove_post_accumulate_grad_hook(p.hook);
  for (auto& b : impl_->buckets)  // collectives still in flight finish before their tensors go
    try {
      b.work.wait();
    } catch (const Error&) {
    }
}

ProcessGroup& DataParallel::group() const { return *impl_->group; }
int DataParallel::rank() const { return impl_->rank; }
int DataParallel::world_size() const { return impl_->size; }
int DataParallel::zero_stage() const { return impl_->options.zero_stage_; }
const std::vector<BucketLayout>& DataParallel::buckets() const { return impl_->layouts; }
const ParameterUnits* DataParallel::units() const { return impl_->units.get(); }
bool DataParallel::offloads_parameters() const { return impl_->units && impl_->units->offloaded(); }
std::pair<int64_t, int64_t> DataParallel::slice(size_t i, int rank) const {
  MG_CHECK(i < impl_->params.size() && rank >= 0 && rank < impl_->size, IndexError, "DataParallel::slice: parameter ",
           i, " of ", impl_->params.size(), ", rank ", rank, " of ", impl_->size);
  return impl_->slice(impl_->params[i], rank);
}

nn::NamedTensors DataParallel::optimizer_parameters() const {
  nn::NamedTensors r;
  for (size_t i = 0; i < impl_->params.size(); ++i)
    if (Tensor t = impl_->optimizer_tensor(i); t.defined()) r.emplace_back(impl_->params[i].name, t);
  return r;
}

amp::MasterWeights* DataParallel::masters() const { return impl_->masters.get(); }

void DataParallel::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  Impl& m = *impl_;
  auto clear = [set_to_none](const Tensor& t) {
    if (!t.defined() || !t.grad().defined()) return;
    if (set_to_none)
      t.set_grad(Tensor());
    else
      t.grad().zero_();
  };
  for (auto& p : m.params) clear(p.tensor), clear(p.slice), p.used = false;
  if (m.masters)
    for (auto& t : m.masters->parameters()) clear(t);
  for (auto& b : m.buckets)
    if (set_to_none)
      b.shard_grad = Tensor();
    else if (b.shard_grad.defined())
      b.shard_grad.zero_();
  if (m.units) m.units->reset(set_to_none);
}

void DataParallel::prepare_forward() {
  if (impl_->units) impl_->units->prepare_forward();
}

Tensor DataParallel::run_unit(size_t k, const std::function<Tensor()>& forward) {
  return impl_->units ? impl_->units->run(k, forward) : forward();
}

std::unique_ptr<ParameterUnits::Gathered> DataParallel::full_parameters() {
  return impl_->units ? impl_->units->gather_all() : nullptr;
}

void DataParallel::prepare_backward(bool sync) {
  for (auto& p : impl_->params)
    MG_CHECK(!p.ready, AutogradError, "DataParallel: a backward pass was not followed by finish_backward()");
  impl_->sync = sync;
  if (impl_->units) impl_->units->prepare_backward();
}

void DataParallel::finish_backward() {
  if (impl_->units) return impl_->units->finish_backward();
  impl_->finish();
}

bool DataParallel::any_rank(bool flag) const { return impl_->group->all_reduce(flag ? 1.0 : 0.0, ReduceOp::Max) != 0; }

double DataParallel::clip_grad_norm_(double max_norm, double norm_type) {
  std::function<double(double)> combine;  // the slices' parts summed across ranks (stages 1-3)
  if (impl_->options.zero_stage_ > 0) {
    ProcessGroup* g = impl_->group;
    const ReduceOp op = std::isinf(norm_type) ? ReduceOp::Max : ReduceOp::Sum;
    combine = [g, op](double partial) { return g->all_reduce(partial, op); };
  }
  // Half parameters: the masters' gradients are the half ones, read with the loss scaler's factor.
  if (impl_->masters) return impl_->masters->clip_grad_norm_(max_norm, norm_type, combine);
  std::vector<Tensor> tensors;
  for (auto& [name, t] : optimizer_parameters()) tensors.push_back(t);
  return optim::clip_grad_norm_(tensors, max_norm, norm_type, combine);
}

void DataParallel::gather_parameters() {
  Impl& m = *impl_;
  if (m.options.zero_stage_ == 0 || m.units) return;  // stage 3: the shards themselves were updated
  NoGradGuard ng;
  struct InFlight {
    size_t bucket;
    Tensor buffer;
    Work work;
  };
  auto unpack = [&m](InFlight& f) {
    m.wait(f.work);
    const BucketLayout& l = m.buckets[f.bucket].layout;
    for (size_t j : l.params) {
      auto& p = m.params[j];
      copy_slices(f.buffer, m.size, l.chunk, p.slice_offset, p.chunk, p.tensor.detach().view({-1}), false);
    }
  };
  std::optional<InFlight> previous;  // the next bucket's gather runs while this one is unpacked
  for (size_t k = 0; k < m.buckets.size(); ++k) {
    const BucketLayout& l = m.buckets[k].layout;
    Tensor buffer = comm_buffer(l.chunk * m.size, l.dtype, m.buckets[k].device, Category::Workspace,
                                "zero.all_gather." + std::to_string(k), false);
    Tensor mine = buffer.narrow(0, int64_t(m.rank) * l.chunk, l.chunk);
    for (size_t j : l.params)
      if (const auto& p = m.params[j]; p.slice.defined())
        mine.narrow(0, p.slice_offset, p.slice.numel()).copy_(p.slice);
    InFlight now{k, buffer, m.group->all_gather(buffer, mine)};
    if (previous) unpack(*previous);
    previous = std::move(now);
  }
  if (previous) unpack(*previous);
}

double DataParallel::communication_seconds() const {
  if (!impl_->units) return impl_->blocked;
  const UnitStats& s = impl_->units->stats();
  return impl_->blocked + s.gather_wait + s.reduce_wait;
}

}  // namespace mg::distributed

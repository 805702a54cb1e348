// A memory budget runtime: training inside a hard limit by dynamic rematerialization (DTR,
// Kirisame et al., ICLR 2021) and offload to host memory.
//
// With a budget on a device, every kernel run records, for each storage it writes, how to make
// those bytes again: the kernel, its arguments (random draws included: seed and Philox offset are
// kernel arguments), and its measured time (or a modeled one: Cost). When an allocation would pass the limit even after
// the allocator has released its cache, the runtime frees the bytes of resident storages it can
// re-create (evicts them) and, with offload on, copies others to a separately accounted host
// pool. A storage is rematerialized when a kernel (or a read of its values) touches it again:
// recursively, from the recorded kernels, bitwise as the first time.
//
// What is never evicted: parameters, gradients and optimizer state (by ledger category), tensors
// pinned with pin(), storages whose values the user has read or written through data pointers
// (raw_data/data_ptr/item outside kernels), and the arguments of the kernel running now.
// Eviction picks the smallest DTR score h = cost / (bytes x staleness), where cost is the storage's
// recompute time plus that of the evicted storages it would bring back (the paper's equivalence
// classes: evicted neighbours merged with union-find); a storage no handle refers to costs nothing
// while no evicted storage needs it. Offload is chosen for a storage when moving
// it out and back is cheaper than recomputing it (bandwidth and compute measured), and is the only
// way out for storages that cannot be recomputed. Backward fetches offloaded saved tensors back
// ahead of the nodes that read them, within the limit (Options::prefetch; on cuda the copies run on
// a side stream and a kernel waits only for those it touches: never run on a GPU).
//
// An in-place write to a storage whose old value an evicted storage still needs brings that one
// back first; nothing is recomputed from values that changed. Storages no user handle refers to
// any more are freed at once but keep their recipe while a recipe that may run needs them.
//
// Under a budget that cannot work (pinned bytes plus the working set of one kernel exceed it)
// allocation raises MemoryBudgetError naming that minimum. The runtime is for one thread at a time
// per device (the kernels' own worker threads are fine).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/tensor.h>

namespace mg {

namespace budget {

enum class Remat : uint8_t { None, Dynamic };  // None: offload only (or a plain limit)
enum class Offload : uint8_t { None, Activations, Optimizer, All };
// How eviction prices a storage and ages it. Modeled (the default): each kernel takes the time the
// cost model (Options::model) gives its matmul FLOPs and its arguments' bytes, both to price a
// recompute and as the clock staleness is counted on, and offload moves at the model's host
// bandwidth. The same program under the same budget and model then evicts, recomputes and offloads
// the same storages, in the same order, on any machine and under any load, and on meta as on the
// device it stands for. Measured (DTR's): each recorded kernel's measured time, staleness in
// wall-clock time, offload at the copy bandwidth measured at enable(); two runs may decide
// differently, as the machine's load does.
enum class Cost : uint8_t { Measured, Modeled };

// The time a kernel takes, modeled: flops / flops_per_second + bytes / bytes_per_second +
// seconds_per_kernel, where flops are its matmul FLOPs and bytes those of its tensor arguments; a
// copy to the host pool or back moves at host_bytes_per_second. fixed() is the same on every
// machine (100 GFLOP/s, 10 GB/s, no launch cost); fit_cost_model() fits this machine's.
struct CostModel {
  double flops_per_second = 1e11, bytes_per_second = 1e10, seconds_per_kernel = 0, host_bytes_per_second = 1e10;
  static CostModel fixed() { return {}; }
  double kernel_seconds(double flops, double bytes) const {
    return flops / flops_per_second + bytes / bytes_per_second + seconds_per_kernel;
  }
  double copy_seconds(double bytes) const { return bytes / host_bytes_per_second; }
  std::string str() const;  // "95 GFLOP/s, 8.1 GB/s, 2.0 us a kernel, host copies 9.7 GB/s"
};
// The cost model fitted (least squares, rates positive) to the measured times of the kernels `d` ran
// under the runtime since enable() or reset_stats(), plus `outside` seconds a kernel (the steps' time
// outside kernels, dispatch, autograd and allocation, spread over them), with the host bandwidth
// measured at enable(): a model of this machine for this program. On meta (no times) `base` comes back.
CostModel fit_cost_model(const Device& d, double outside, const CostModel& base = CostModel::fixed());

// A planner's decision about one storage of a step (a per-tensor plan, plan/per_tensor.h): the storage
// that is the `birth`-th one first written by a kernel since begin_step() leaves when the step's
// kernel `leave_after` has run (kernels counted from begin_step() too; recomputes are not kernels
// here), offloaded to the host pool or evicted to be recomputed, and comes back when a kernel touches
// it again (fetched or recomputed then: not prefetched, so that a plan's memory is what it models).
// A directive whose storage is not the one planned (another size, or another kernel made it), or
// cannot leave then (pinned, read by a running kernel, no recipe), is skipped and counted
// (Stats::directives_missed).
struct Directive {
  enum class Action : uint8_t { Offload, Recompute };
  int64_t birth = 0;
  Action action = Action::Offload;
  int64_t leave_after = 0;
  int64_t bytes = 0;   // the storage's bytes (rounded, as the ledger counts them)
  std::string kernel;  // the kernel that first wrote it
};

struct Options {
  // Bytes the device may allocate (set_memory_limit); 0: no limit, the runtime only watches (records
  // recipes, the floor and the modeled time; nothing leaves).
  int64_t limit = 0;
  Remat remat = Remat::Dynamic;
  Offload offload = Offload::None;
  // Fetch offloaded saved tensors back as backward reaches the node that reads them and the one
  // after it (within the limit: a prefetch never makes anything else leave), rather than when a
  // kernel first touches them.
  bool prefetch = true;
  Cost cost = Cost::Modeled;
  CostModel model;  // the rates of Cost::Modeled (and of Stats::modeled_seconds in either mode)
  // A per-tensor plan, carried out in every step begun with begin_step(). With remat and offload
  // None nothing else leaves: the runtime does exactly what the plan says.
  std::vector<Directive> directives;
  bool trace = false;  // record each step begun with begin_step() for a planner (trace())
};

// Puts `d` under a budget: sets its memory limit and turns the runtime on. Storages allocated from
// now on are managed; existing ones are, once a kernel touches them. On meta (no bytes) the runtime
// runs as it would on the device meta stands for (meta_target()), with modeled costs: a plan's
// evictions, recomputes, offloads, floor and modeled time, without any memory.
void enable(const Device& d, const Options& options);
// Back to a plain device: every evicted or offloaded storage still alive is brought back first
// (the limit stays; set_memory_limit(d, 0) removes it).
void disable(const Device& d);
bool enabled(const Device& d);
Options options(const Device& d);

// Never evict or offload `t`'s storage.
void pin(const Tensor& t);
// True when `t`'s bytes are on the device now (not evicted, not offloaded).
bool is_resident(const Tensor& t);

// What the runtime did on one device since enable() or reset_stats(). Byte counts are the
// ledger's (rounded) block sizes; by_category is the category a storage had when it left.
struct Stats {
  int64_t evictions = 0, rematerializations = 0;
  CategoryBytes evicted_bytes{};     // cumulative, by category
  int64_t rematerialized_bytes = 0;  // cumulative
  double recompute_seconds = 0;      // kernel time spent recomputing
  double recompute_flops = 0;        // matmul FLOPs recomputed (2 per multiply-add; as FlopCounter counts)
  int64_t offloads = 0, fetches = 0;
  int64_t prefetches = 0;                       // of the fetches, those made ahead of the kernel that reads them
  CategoryBytes offloaded_bytes{};              // cumulative, by category
  int64_t host_bytes = 0, peak_host_bytes = 0;  // the host pool: bytes held now and at most
  double transfer_seconds = 0;                  // copying to and from the host pool
  int64_t banished = 0;                         // recipes dropped because an input changed in place
  int64_t directives_missed = 0;                // Options::directives skipped (see Directive)
  int64_t largest_working_set = 0;              // bytes of the largest kernel's arguments
  std::string largest_working_set_kernel;       // that kernel's name
  // The modeled time (Options::model) of every kernel run, recompute and host copy: what the steps
  // cost by the model, to compare with a plan's prediction (on meta it is the prediction).
  double modeled_seconds = 0;
  int64_t kernels = 0;        // kernel runs (not counting recomputes)
  double kernel_seconds = 0;  // their measured time
  // Bytes/s to the host pool and back, measured at enable(); offload is chosen for a storage when
  // 2 x bytes / bandwidth is below its recompute cost (its recorded kernels' time, or Cost::Modeled's).
  double bandwidth = 0;
};
Stats stats(const Device& d = kCPU);

// The floor: the smallest limit the kernels run since enable() or reset_stats() can run under, in
// one mode (remat, offload), and what sets it. Each kernel needs its tensor arguments (inputs and
// outputs) and its scratch resident together with every storage that cannot leave in that mode:
// parameters and gradients always, optimizer state unless it is offloaded, tensors that cannot be
// recomputed (without offload), storages allocated but not yet written, pinned, or whose pointer
// the user holds; with neither remat nor offload, everything alive. Each storage counts once (a
// kernel's argument is not also counted as held). On meta (enable(kMeta, ...)) it is computed for
// the device meta stands for, without running anything; the runtime reaches it within a few
// allocations (tests/budget checks it against the smallest limit that trains, found by bisection).
struct Floor {
  int64_t bytes = 0;      // the floor
  std::string kernel;     // the kernel that sets it (the first to need that much)
  int64_t arguments = 0;  // that kernel's tensor arguments (resident for it)
  int64_t scratch = 0;    // the scratch it allocates while it runs
  CategoryBytes held{};   // by category: the bytes beside them that cannot leave in this mode
  std::vector<std::pair<std::string, int64_t>> tensors;  // its arguments: owner and bytes, largest first
  // "25.05 MiB (26267648 B) at adam_update: its arguments 12.73 MiB (...), scratch 0 B, beside
  // Parameter 3.18 MiB, ..."
  std::string str() const;
};
Floor floor(const Device& d, Remat remat, Offload offload);
// The floor of the mode `d` runs in now.
Floor floor(const Device& d = kCPU);
void reset_stats(const Device& d = kCPU);

// A step starts on `d`: kernels and first-written storages are counted from here (Directive), and with
// Options::trace the trace starts again. The planner calls it before each step it runs.
void begin_step(const Device& d);

// The step since begin_step() as the runtime saw it (Options::trace): each kernel window's peak and
// each storage first written in it, with its uses and what recomputing it before each use would take.
// On meta it is the step's plan to the byte; a planner chooses what leaves from it (plan/per_tensor.h).
struct StepTrace {
  struct Kernel {
    std::string name;
    // The peaks from the end of the previous kernel (or begin_step) to the end of this one.
    int64_t reserved = 0, allocated = 0;
    double seconds = 0;  // modeled
  };
  struct Use {
    int64_t kernel = 0;  // the kernel that had the storage as an argument
    // Recomputing the storage just before that kernel, were it evicted: the modeled seconds (its
    // recipe and those of the freed storages it reads, transitively; -1: it cannot be recomputed),
    // the bytes that recompute holds beside it for a moment (those freed storages, the recipe's other
    // outputs), and the storages of this step it reads that are resident (their births).
    double recompute_seconds = -1;
    int64_t recompute_bytes = 0;
    std::vector<int64_t> needs;
  };
  struct Storage {
    int64_t birth = 0;  // Directive::birth: its index in `storages`
    std::string kernel;
    int64_t bytes = 0;   // rounded
    int64_t nbytes = 0;  // requested (what a host copy moves)
    bool saved = false;  // it was saved for backward (an Activation) at one of its uses
    bool gradient = false;
    std::vector<Use> uses;  // in order; the first is the kernel that wrote it
    int64_t died = -1;      // the kernel count when its last handle went (-1: alive at the end)
  };
  std::vector<Kernel> kernels;
  std::vector<Storage> storages;
};
StepTrace trace(const Device& d = kCPU);
// "evicted 12.0 MiB in 40 storages (Activation 10.0 MiB, Temporary 2.0 MiB), ..." for reports.
std::string stats_report(const Device& d = kCPU);

}  // namespace budget
}  // namespace mg

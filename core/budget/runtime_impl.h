// The budget runtime's hooks for Storage, autograd and kernels::run (private; the public
// face is core/budget/budget.h). A Cell holds a managed storage's bytes (resident, evicted or offloaded)
// and how to make them again; Storage keeps a Cell when its device is under a budget.
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <memgrad/core/allocator.h>
#include <memgrad/core/tensor.h>

namespace mg::budget {

struct Cell;

namespace detail {

extern std::atomic<int> g_active_devices;  // devices under a budget now (a fast "none" check)
bool active(const Device& d);
inline bool any_active() { return g_active_devices.load(std::memory_order_relaxed) > 0; }

// ---- Storage's bytes under a budget

// A cell owning `block` (a fresh allocation: written by no kernel yet) or wrapped user memory.
std::shared_ptr<Cell> adopt(const Device& d, size_t nbytes, Block* block, void* wrapped,
                            std::function<void(void*)> deleter, bool fresh);
// The bytes for an access: brought back first when evicted or offloaded. Outside kernels::run the
// caller may keep or write through the pointer, so the cell is never evicted again.
void* data(Cell& c);
const Block* block(const Cell& c);  // null while evicted or offloaded, and for wrapped memory
void set_category(Cell& c, Category category);
Category category(const Cell& c);
void set_owner(Cell& c, const std::string& owner);
// The last Storage handle is gone: the bytes are freed unless a recipe that may run still needs them.
void storage_died(std::shared_ptr<Cell> c);

// Backward is about to run nodes that read `storages` (their saved tensors): the offloaded ones
// are fetched now, as far as each fits under the limit without making anything else leave. On cuda
// the copies run on the side stream; a kernel waits for one only when it touches its storage.
void prefetch(const std::vector<std::weak_ptr<Storage>>& storages);

// `t` carries a gradient into backward (a seed): what kernels make from it is a gradient too, and
// while a handle refers to one it never leaves for recompute (making it again would replay backward
// from the loss, and at the floor that chain does not fit); offload may move it.
void mark_gradient(const Tensor& t);

// ---- kernels::run

// Kernels running now on any thread (their worker threads' accesses are not the user's).
// t_kernel_depth: those on this thread (a kernel run inside another is part of that one).
extern std::atomic<int> g_kernel_depth;
extern thread_local int t_kernel_depth;
struct KernelDepth {
  KernelDepth() { g_kernel_depth.fetch_add(1, std::memory_order_relaxed), ++t_kernel_depth; }
  ~KernelDepth() { g_kernel_depth.fetch_sub(1, std::memory_order_relaxed), --t_kernel_depth; }
};
bool replaying();  // true on this thread while a recipe runs (nested kernel runs are not recorded)

// Runs the kernel again on the tensors of a recorded call (same order as KernelRun's `tensors`).
using Replay = std::function<void(const std::vector<Tensor>& tensors)>;

// One kernel run on a device under a budget: its tensor arguments are brought back and locked for
// the run, in-place writes first rescue what depends on the old values, and each storage the
// kernel writes gets `replay` as its recipe (none when `replay` is empty).
class KernelRun {
 public:
  // written[i]: the kernel writes tensors[i] (it may read it too).
  KernelRun(const Device& d, const char* kernel, std::vector<Tensor> tensors, std::vector<bool> written, Replay replay,
            double flops);
  ~KernelRun();
  KernelRun(const KernelRun&) = delete;
  KernelRun& operator=(const KernelRun&) = delete;
  void run(const std::function<void()>& body);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace detail
}  // namespace mg::budget

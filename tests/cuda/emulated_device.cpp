// The scheduler behind emulated_device.h: fibers on one host thread, switched at every collective
// operation; the collective itself runs in the scheduler, once its threads are all there. A fiber is
// made once (ucontext) and lives across blocks and launches, looping over the kernel body; switches
// are sigsetjmp/siglongjmp without the signal mask (swapcontext's two system calls per switch were
// half the suite's time). Built without access instrumentation: nothing here is the kernels' code.
#undef _FORTIFY_SOURCE  // its longjmp check refuses jumps between stacks
#include <setjmp.h>
#include <ucontext.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "emulated_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace emu {
namespace {

enum class Wait : uint8_t { Running, Barrier, Warp, Done };
enum class WarpOp : uint8_t { Sync, Shuffle, Vote, Mma };
const char* op_name(WarpOp op) {
  static const char* names[] = {"__syncwarp", "a shuffle", "a vote", "mma.sync"};
  return names[int(op)];
}

constexpr size_t kStackBytes = 256 * 1024;
constexpr int kWarp = 32;

struct Thread {
  ucontext_t context{};  // its first entry
  sigjmp_buf jmp{};      // where it continues
  std::unique_ptr<char[]> stack{new char[kStackBytes]};
  bool ready = false;    // its context is made (else it is made afresh: a fiber abandoned mid-kernel)
  bool started = false;  // it has run, and continues from jmp
  detail::ThreadInfo info;
  Wait wait = Wait::Done;
  bool armed = false;
  int barriers = 0;  // __syncthreads reached in this block
  const char* file = nullptr;
  int line = 0;
  // a warp collective's operands, and a shuffle's or vote's result in `bits`
  WarpOp op{};
  unsigned mask = 0;
  Shuffle shuffle{};
  Vote vote{};
  int arg = 0, width = kWarp;
  uint64_t bits = 0;
  bool pred = false;
  float* c = nullptr;
  uint32_t a[4] = {}, b[2] = {};
  bool bf16 = false;
  void* fake_stack = nullptr;  // AddressSanitizer's, while the fiber is switched out
};

struct Device {
  sigjmp_buf scheduler{};
  const void* scheduler_stack = nullptr;  // AddressSanitizer's view of the host stack
  size_t scheduler_stack_bytes = 0;
  std::vector<std::unique_ptr<Thread>> threads;  // never moved: a suspended context points into itself
  unsigned count = 0;                            // threads of the current launch's blocks
  Thread* current = nullptr;
  uint3 block{};
  dim3 block_dim{1, 1, 1}, grid_dim{1, 1, 1};
  const std::function<void()>* body = nullptr;
  std::string kernel;
  Mutation mutation = Mutation::None;
  int skip_barrier = -1;
  std::vector<std::string> findings;
  size_t finding_count = 0;
  std::set<std::string> executed;
};
Device g;

void to_scheduler() {
  Thread* th = g.current;
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(&th->fake_stack, g.scheduler_stack, g.scheduler_stack_bytes);
#endif
  if (sigsetjmp(th->jmp, 0) == 0) siglongjmp(g.scheduler, 1);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(th->fake_stack, &g.scheduler_stack, &g.scheduler_stack_bytes);
#endif
}

void to_fiber(Thread& th) {
  g.current = &th;
  detail::g_checked = th.armed ? &th.info : nullptr;
#ifdef EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, th.stack.get(), kStackBytes);
#endif
  if (sigsetjmp(g.scheduler, 0) == 0) {
    if (th.started) siglongjmp(th.jmp, 1);
    th.started = true;
    setcontext(&th.context);  // its first run, into entry()
  }
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  detail::g_checked = nullptr;
  g.current = nullptr;
}

void entry() {
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g.scheduler_stack, &g.scheduler_stack_bytes);
#endif
  for (;;) {
    try {
      (*g.body)();
    } catch (const std::exception& e) {
      detail::report("exception", e.what());
    }
    g.current->armed = false;
    detail::g_checked = nullptr;
    g.current->wait = Wait::Done;
    to_scheduler();  // resumed for the same thread of the next block
  }
}

void prepare(Thread& th) {
  if (th.ready) return;
  getcontext(&th.context);
  th.context.uc_stack.ss_sp = th.stack.get();
  th.context.uc_stack.ss_size = kStackBytes;
  th.context.uc_link = nullptr;
  makecontext(&th.context, entry, 0);
  th.info.stack_lo = th.stack.get();
  th.info.stack_hi = th.stack.get() + kStackBytes;
  th.ready = true;
  th.started = false;
}

std::string coords(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}
std::string site(const Thread& th) {
  const char* slash = std::strrchr(th.file, '/');
  return std::string(slash ? slash + 1 : th.file) + ":" + std::to_string(th.line);
}

Thread& thread(unsigned i) { return *g.threads[i]; }

// ---- warp collectives
float decode(uint32_t half_bits, bool bf16) {
  if (bf16) {
    const uint32_t f = half_bits << 16;
    float v;
    std::memcpy(&v, &f, sizeof v);
    return v;
  }
  return __half2float(__ushort_as_half(static_cast<unsigned short>(half_bits)));
}

// PTX ISA, "Matrix fragments for mma.m16n8k16" (16-bit a and b, 32-bit c and d): lane 4g + t holds
// a's elements (g, 2t..2t+1) in register 0, (g + 8, 2t..) in 1, (g, 2t + 8..) in 2, (g + 8, 2t + 8..)
// in 3 (the lower index in the lower half); b's (2t..2t+1, g) in register 0 and (2t + 8.., g) in 1;
// c's (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
void run_mma(Thread* const* lanes) {
  double A[16][16] = {}, B[16][8] = {}, C[16][8] = {};
  const bool bf16 = lanes[0]->bf16;
  for (int lane = 0; lane < kWarp; ++lane) {
    const Thread& th = *lanes[lane];
    const int gr = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r) {
      int reg_row = r & 1, reg_col = r >> 1;
      if (g.mutation == Mutation::ARegisters) std::swap(reg_row, reg_col);
      for (int h = 0; h < 2; ++h)
        A[gr + 8 * reg_row][2 * t + h + 8 * reg_col] = decode((th.a[r] >> (16 * h)) & 0xffffu, bf16);
    }
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h) {
        const int row = g.mutation == Mutation::BRows ? 2 * t + r + 8 * h : 2 * t + h + 8 * r;
        B[row][gr] = decode((th.b[r] >> (16 * h)) & 0xffffu, bf16);
      }
    for (int e = 0; e < 4; ++e) C[gr + 8 * (e >> 1)][2 * t + (e & 1)] = th.c[e];
  }
  for (int lane = 0; lane < kWarp; ++lane) {
    const int gr = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
      int row = gr + 8 * (e >> 1);
      if (g.mutation == Mutation::CRows) row ^= 8;
      const int col = 2 * t + (e & 1);
      double d = C[row][col];
      for (int k = 0; k < 16; ++k) d += A[row][k] * B[k][col];
      lanes[lane]->c[e] = float(d);
    }
  }
}

// The lane whose value `lane` receives (CUDA's rules: a lane past its width-group keeps its own).
int shuffle_source(const Thread& th, int lane) {
  const int w = th.width, base = lane & ~(w - 1);
  switch (th.shuffle) {
    case Shuffle::Index:
      return base + (th.arg & (w - 1));
    case Shuffle::Up:
      return lane - th.arg < base ? lane : lane - th.arg;
    case Shuffle::Down:
      return lane + th.arg >= base + w ? lane : lane + th.arg;
    case Shuffle::Xor:
      return (lane ^ th.arg) >= base + w ? lane : lane ^ th.arg;
  }
  return lane;
}

void run_collective(Thread* const* lanes, unsigned mask) {
  const Thread& lead = *lanes[__builtin_ctz(mask)];
  if (lead.op == WarpOp::Mma) return run_mma(lanes);
  uint64_t got[kWarp] = {};
  unsigned ballot = 0;
  for (int l = 0; l < kWarp; ++l)
    if (mask >> l & 1 && lanes[l]->pred) ballot |= 1u << l;
  for (int l = 0; l < kWarp; ++l) {
    if (!(mask >> l & 1)) continue;
    const Thread& th = *lanes[l];
    if (th.op == WarpOp::Shuffle) {
      const int src = shuffle_source(th, l);
      if (!(mask >> src & 1))
        detail::report("synccheck", "lane " + std::to_string(l) + "'s shuffle reads lane " + std::to_string(src) +
                                        ", which is not in its mask");
      got[l] = lanes[src]->bits;
    } else if (th.op == WarpOp::Vote) {
      got[l] = th.vote == Vote::Ballot ? ballot : th.vote == Vote::Any ? ballot != 0 : ballot == mask;
    }
  }
  for (int l = 0; l < kWarp; ++l)
    if (mask >> l & 1) lanes[l]->bits = got[l];
  if (lead.op == WarpOp::Sync) detail::shared_warp_sync(lead.info.warp);
}

[[noreturn]] void stuck(const std::string& why) {
  std::string what = "emu: " + g.kernel + ", block " + coords(g.block) + ": " + why;
  for (unsigned i = 0; i < g.count; ++i) {
    const Thread& th = thread(i);
    if (th.wait == Wait::Barrier) what += "\n  thread " + coords(th.info.index) + " waits at " + site(th);
    if (th.wait == Wait::Warp) what += "\n  thread " + coords(th.info.index) + " waits at " + op_name(th.op);
  }
  for (unsigned i = 0; i < g.count; ++i)  // abandoned mid-kernel: their contexts are made afresh
    if (thread(i).wait != Wait::Done) thread(i).ready = false;
  throw LaunchError(what);
}

// Runs the collectives of warp w whose lanes have all arrived; true if any ran.
bool resolve_warp(unsigned w) {
  Thread* lanes[kWarp];
  for (int l = 0; l < kWarp; ++l) lanes[l] = &thread(w * kWarp + l);
  bool any = false;
  for (int l = 0; l < kWarp; ++l) {
    const Thread& lead = *lanes[l];
    if (lead.wait != Wait::Warp) continue;
    const unsigned mask = lead.op == WarpOp::Mma ? 0xffffffffu : lead.mask;
    if (!(mask >> l & 1)) stuck("lane " + std::to_string(l) + " is not in the mask of its own " + op_name(lead.op));
    bool ready = true;
    for (int k = 0; k < kWarp; ++k) {
      if (!(mask >> k & 1)) continue;
      const Thread& th = *lanes[k];
      if (th.wait == Wait::Done)
        stuck("lane " + std::to_string(k) + " has exited, but is in the mask of " + op_name(lead.op));
      if (th.wait == Wait::Warp && (th.op != lead.op || (th.op != WarpOp::Mma && th.mask != lead.mask)))
        stuck("the lanes of warp " + std::to_string(w) + " meet at different warp collectives or masks");
      ready &= th.wait == Wait::Warp;
    }
    if (!ready) continue;
    run_collective(lanes, mask);
    for (int k = 0; k < kWarp; ++k)
      if (mask >> k & 1) lanes[k]->wait = Wait::Running;
    any = true;
  }
  return any;
}

// Runs every collective whose threads have all arrived; false when none could run.
bool resolve() {
  bool any = false;
  for (unsigned w = 0; w < g.count / kWarp; ++w) any |= resolve_warp(w);
  if (any) return true;
  const Thread* first = nullptr;  // exited threads count as arrived, as on the device
  for (unsigned i = 0; i < g.count; ++i) {
    const Thread& th = thread(i);
    if (th.wait != Wait::Barrier && th.wait != Wait::Done) return false;
    if (th.wait == Wait::Barrier && !first) first = &th;
  }
  if (!first) return false;
  for (unsigned i = 0; i < g.count; ++i) {
    Thread& th = thread(i);
    if (th.wait != Wait::Barrier) continue;
    if (th.file != first->file || th.line != first->line)
      detail::report("synccheck", "threads " + coords(first->info.index) + " and " + coords(th.info.index) +
                                      " wait at different __syncthreads (" + site(*first) + ", " + site(th) + ")");
    th.wait = Wait::Running;
  }
  detail::shared_barrier();
  return true;
}

void run_block(unsigned threads) {
  for (unsigned i = 0; i < g.count; ++i) {
    Thread& th = thread(i);
    prepare(th);
    th.info.index = uint3{i % g.block_dim.x, i / g.block_dim.x % g.block_dim.y, i / (g.block_dim.x * g.block_dim.y)};
    th.info.linear = i;
    th.info.warp = i / kWarp;
    th.wait = i < threads ? Wait::Running : Wait::Done;  // a partial last warp's missing lanes
    th.armed = false;
    th.barriers = 0;
  }
  for (;;) {
    bool done = true;
    for (unsigned i = 0; i < g.count; ++i) {
      Thread& th = thread(i);
      if (th.wait == Wait::Running) to_fiber(th);
      done &= th.wait == Wait::Done;
    }
    if (done) return;
    if (!resolve()) stuck("threads wait at different collectives, or for lanes that never come");
  }
}

// "mg::cuda::x::name<float, 4>" from pretty<Kernel>()'s text (GCC and clang spell it differently).
std::string kernel_of(const std::string& pretty) {
  size_t at = pretty.find("Kernel = ");
  std::string k = at == std::string::npos ? pretty : pretty.substr(at + 9);
  if (!k.empty() && k.back() == ']') k.pop_back();
  while (!k.empty() && (k[0] == '&' || k[0] == '(')) k.erase(0, 1);
  const size_t open = k.find('<');
  const size_t colons = k.rfind("::", open);
  return colons == std::string::npos ? k : k.substr(colons + 2);
}

void check_config(const Config& c) {
  const unsigned threads = c.block.x * c.block.y * c.block.z;
  const bool ok = threads >= 1 && threads <= 1024 && c.block.z <= 64 && c.grid.x >= 1 && c.grid.y >= 1 &&
                  c.grid.z >= 1 && c.grid.x <= 0x7fffffffu && c.grid.y <= 65535 && c.grid.z <= 65535 &&
                  c.shared_bytes <= 227 * 1024;
  if (!ok)
    throw LaunchError("emu: " + g.kernel + ": invalid configuration argument (grid " +
                      coords({c.grid.x, c.grid.y, c.grid.z}) + ", block " + coords({c.block.x, c.block.y, c.block.z}) +
                      ", " + std::to_string(c.shared_bytes) + " B of dynamic shared memory)");
}

}  // namespace

namespace detail {

const ThreadInfo* g_checked = nullptr;

std::string where() {
  std::string w = g.kernel + ", block " + coords(g.block);
  if (g.current) w += ", thread " + coords(g.current->info.index);
  return w;
}

void report(const char* check, const std::string& message) {
  Unchecked unchecked;
  if (++g.finding_count <= 10) g.findings.push_back(std::string(check) + ": " + where() + ": " + message);
}

void arm() {
  g.current->armed = true;
  g_checked = &g.current->info;
}

void run(const char* pretty, const Config& c, const std::function<void()>& body) {
  g.kernel = kernel_of(pretty);
  check_config(c);
  const unsigned threads = c.block.x * c.block.y * c.block.z, blocks = c.grid.x * c.grid.y * c.grid.z;
  g.count = (threads + kWarp - 1) / kWarp * kWarp;
  while (g.threads.size() < g.count) g.threads.push_back(std::make_unique<Thread>());
  g.block_dim = c.block;
  g.grid_dim = c.grid;
  g.body = &body;
  g.findings.clear();
  g.finding_count = 0;
  g.executed.insert(g.kernel.substr(0, g.kernel.find('<')));
  set_warps(g.count / kWarp);
  for (unsigned b = 0; b < blocks && g.finding_count == 0; ++b) {  // the first faulty block ends it
    g.block = uint3{b % c.grid.x, b / c.grid.x % c.grid.y, b / (c.grid.x * c.grid.y)};
    shared_begin_block(c.shared_bytes);
    run_block(threads);
  }
  if (g.finding_count == 0) return;
  std::string what = std::to_string(g.finding_count) + " finding(s) in " + g.kernel + ":";
  for (const std::string& f : g.findings) what += "\n  " + f;
  throw LaunchError(what);
}

}  // namespace detail

const std::set<std::string>& executed_kernels() { return g.executed; }

uint3 thread_idx() { return g.current->info.index; }
uint3 block_idx() { return g.block; }
dim3 block_dim() { return g.block_dim; }
dim3 grid_dim() { return g.grid_dim; }

void syncthreads(const char* file, int line) {
  Thread* th = g.current;
  if (th->barriers++ == g.skip_barrier) return;
  th->file = file;
  th->line = line;
  th->wait = Wait::Barrier;
  to_scheduler();
}

namespace {
uint64_t warp_collective(Thread* th, WarpOp op, unsigned mask) {
  th->op = op;
  th->mask = mask;
  th->wait = Wait::Warp;
  to_scheduler();
  return th->bits;
}
}  // namespace

void syncwarp(unsigned mask) { warp_collective(g.current, WarpOp::Sync, mask); }

uint64_t shuffle(Shuffle kind, unsigned mask, uint64_t bits, int arg, int width) {
  Thread* th = g.current;
  if (width < 1 || width > kWarp || (width & (width - 1)) != 0) {
    detail::report("synccheck", "shuffle width " + std::to_string(width) + " is not a power of 2 up to 32");
    width = kWarp;
  }
  th->shuffle = kind;
  th->bits = bits;
  th->arg = arg;
  th->width = width;
  return warp_collective(th, WarpOp::Shuffle, mask);
}

unsigned vote(Vote kind, unsigned mask, bool predicate) {
  Thread* th = g.current;
  th->vote = kind;
  th->pred = predicate;
  return unsigned(warp_collective(th, WarpOp::Vote, mask));
}

unsigned active_mask() {
  unsigned m = 0;
  const unsigned w0 = g.current->info.warp * kWarp;
  for (int l = 0; l < kWarp; ++l)
    if (thread(w0 + l).wait != Wait::Done) m |= 1u << l;
  return m;
}

void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  Thread* th = g.current;
  th->c = c;
  std::copy(a, a + 4, th->a);
  th->b[0] = b0;
  th->b[1] = b1;
  th->bf16 = bf16;
  warp_collective(th, WarpOp::Mma, 0xffffffffu);
}

void trap() {
  detail::report("trap", "__trap()");
  g.current->armed = false;
  g.current->ready = false;  // its stack is abandoned mid-kernel
  g.current->wait = Wait::Done;
  for (;;) to_scheduler();
}

void set_mutation(Mutation m) { g.mutation = m; }
void skip_barrier(int n) { g.skip_barrier = n; }

}  // namespace emu

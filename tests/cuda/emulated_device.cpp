// The fibers behind emulated_device.h: ucontext threads on one host thread, switched at every
// collective operation; the collective itself runs in the scheduler, once its threads are all there.
#include "emulated_device.h"

#include <ucontext.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace emu {
namespace {

enum class Wait { Running, Barrier, Shuffle, Mma, Done };

struct Thread {
  ucontext_t context{};
  std::unique_ptr<char[]> stack;
  uint3 index{};
  Wait wait = Wait::Running;
  uint64_t bits = 0;  // a shuffle's value, then its result
  int lane_mask = 0;
  float* c = nullptr;  // an mma's operands (c is the thread's own accumulator)
  uint32_t a[4] = {}, b[2] = {};
  bool bf16 = false;
};

constexpr size_t kStackBytes = 256 * 1024;
constexpr int kWarp = 32;

struct Device {
  ucontext_t scheduler{};
  std::vector<Thread> threads;
  Thread* current = nullptr;
  uint3 block{};
  dim3 block_dim{1, 1, 1}, grid_dim{1, 1, 1};
  const std::function<void()>* kernel = nullptr;
  Mutation mutation = Mutation::None;
};
Device g;

void yield(Wait w) {
  g.current->wait = w;
  swapcontext(&g.current->context, &g.scheduler);
}

void entry() {
  (*g.kernel)();
  g.current->wait = Wait::Done;
  swapcontext(&g.current->context, &g.scheduler);
}

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
void run_mma(Thread* lanes) {
  double A[16][16] = {}, B[16][8] = {}, C[16][8] = {};
  const bool bf16 = lanes[0].bf16;
  for (int lane = 0; lane < kWarp; ++lane) {
    const Thread& th = lanes[lane];
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
      lanes[lane].c[e] = float(d);
    }
  }
}

// Runs every collective whose threads have all arrived; false when none could run.
bool resolve(std::vector<Thread>& threads) {
  bool any = false;
  for (size_t w0 = 0; w0 < threads.size(); w0 += kWarp) {
    Thread* lanes = &threads[w0];
    const Wait w = lanes[0].wait;
    if (w != Wait::Shuffle && w != Wait::Mma) continue;
    bool all = true;
    for (int l = 0; l < kWarp; ++l) all &= lanes[l].wait == w;
    if (!all) continue;
    if (w == Wait::Mma) {
      run_mma(lanes);
    } else {
      uint64_t got[kWarp];
      for (int l = 0; l < kWarp; ++l) got[l] = lanes[l ^ lanes[l].lane_mask].bits;
      for (int l = 0; l < kWarp; ++l) lanes[l].bits = got[l];
    }
    for (int l = 0; l < kWarp; ++l) lanes[l].wait = Wait::Running;
    any = true;
  }
  if (any) return true;
  bool barrier = true, live = false;  // exited threads count as arrived, as on the device
  for (const Thread& th : threads) {
    barrier &= th.wait == Wait::Barrier || th.wait == Wait::Done;
    live |= th.wait == Wait::Barrier;
  }
  if (!barrier || !live) return false;
  for (Thread& th : threads)
    if (th.wait == Wait::Barrier) th.wait = Wait::Running;
  return true;
}

}  // namespace

const uint3& thread_idx() { return g.current->index; }
const uint3& block_idx() { return g.block; }
const dim3& block_dim() { return g.block_dim; }
const dim3& grid_dim() { return g.grid_dim; }
void syncthreads() { yield(Wait::Barrier); }

uint64_t shfl_xor(uint64_t bits, int lane_mask) {
  g.current->bits = bits;
  g.current->lane_mask = lane_mask;
  yield(Wait::Shuffle);
  return g.current->bits;
}

void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16) {
  Thread* th = g.current;
  th->c = c;
  std::copy(a, a + 4, th->a);
  th->b[0] = b0;
  th->b[1] = b1;
  th->bf16 = bf16;
  yield(Wait::Mma);
}

void set_mutation(Mutation m) { g.mutation = m; }

void launch(unsigned grid, unsigned threads, unsigned char* shared, size_t shared_bytes,
            const std::function<void()>& kernel) {
  launch(dim3(grid, 1, 1), dim3(threads, 1, 1), shared, shared_bytes, kernel);
}

void launch(dim3 grid, dim3 block, unsigned char* shared, size_t shared_bytes, const std::function<void()>& kernel) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads % kWarp != 0) throw std::runtime_error("emu::launch: threads must be whole warps");
  g.threads.resize(threads);
  g.block_dim = block;
  g.grid_dim = grid;
  g.kernel = &kernel;
  const unsigned blocks = grid.x * grid.y * grid.z;
  for (unsigned b = 0; b < blocks; ++b) {
    g.block = uint3{b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y)};
    if (shared_bytes) std::memset(shared, 0xff, shared_bytes);
    for (unsigned i = 0; i < threads; ++i) {
      Thread& th = g.threads[i];
      if (!th.stack) th.stack.reset(new char[kStackBytes]);
      th.index = uint3{i % block.x, i / block.x % block.y, i / (block.x * block.y)};
      th.wait = Wait::Running;
      getcontext(&th.context);
      th.context.uc_stack.ss_sp = th.stack.get();
      th.context.uc_stack.ss_size = kStackBytes;
      th.context.uc_link = nullptr;
      makecontext(&th.context, entry, 0);
    }
    for (;;) {
      for (Thread& th : g.threads) {
        if (th.wait != Wait::Running) continue;
        g.current = &th;
        swapcontext(&g.scheduler, &th.context);
      }
      g.current = nullptr;
      bool done = true;
      for (const Thread& th : g.threads) done &= th.wait == Wait::Done;
      if (done) break;
      if (!resolve(g.threads))
        throw std::runtime_error("emu::launch: block " + std::to_string(b) +
                                 ": threads wait at different collectives (divergent __syncthreads or shuffle)");
    }
  }
}

}  // namespace emu

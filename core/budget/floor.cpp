// The floor: what each kernel needs resident, in every mode at once, and the message an allocation
// that cannot be made room for raises. A kernel needs its arguments and its scratch, and beside them
// every storage that cannot leave in the mode; each storage is counted once.
#include <algorithm>
#include <unordered_set>

#include <memgrad/core/budget/cell_impl.h>

namespace mg::budget {

namespace impl {

namespace {

// Why a storage stays, from the one that can never leave to the one that leaves most easily.
enum Hold { kStuck, kPinned, kState, kKept, kRecomputable, kEmpty, kHolds };

Hold hold_of(const Cell& c) {
  if (may_drop(c) || (c.fresh && !c.block && !c.scratch)) return kEmpty;  // not written yet: nothing to keep
  if (c.fresh || c.exposed || c.user_pinned) return kStuck;               // a kernel's scratch, or not ours to move
  const Category cat = detail::category(c);
  if (cat == Category::Parameter || cat == Category::Gradient) return kPinned;
  if (cat == Category::OptimizerState) return kState;
  return c.recomputable && !(c.gradient && c.has_storage) ? kRecomputable : kKept;
}

bool offloads_activations(int o) { return o == int(Offload::Activations) || o == int(Offload::All); }
bool offloads_state(int o) { return o == int(Offload::Optimizer) || o == int(Offload::All); }

bool can_leave(Hold h, int remat, int offload) {
  switch (h) {
    case kState:
      return offloads_state(offload);
    case kKept:
      return offloads_activations(offload);
    case kRecomputable:
      return remat || offloads_activations(offload);
    case kEmpty:
      return true;
    default:
      return false;
  }
}

int64_t rounded(const Cell& c) { return int64_t(memory::round_size(c.nbytes)); }

int64_t sum(const CategoryBytes& b) {
  int64_t s = 0;
  for (int64_t v : b) s += v;
  return s;
}

const char* offload_flag(int o) {
  static const char* names[] = {"no offload", "--offload activations", "--offload optimizer", "--offload all"};
  return names[o];
}
std::string mode_name(int r, int o) {
  if (!r && !o) return "no remat or offload";
  if (!o) return "--remat dynamic";
  return r ? std::string("--remat dynamic ") + offload_flag(o) : offload_flag(o);
}

}  // namespace

int64_t KernelNeed::bytes(int r, int o) const { return arguments[r][o] + sum(held[r][o]); }

KernelNeed kernel_need(DeviceBudget& db, const char* kernel, const std::vector<std::shared_ptr<Cell>>& arguments) {
  KernelNeed n;
  n.kernel = kernel;
  std::unordered_set<const Cell*> is_argument;
  for (const auto& c : arguments) {
    if (!c || c->wrapped || !is_argument.insert(c.get()).second) continue;
    const int64_t b = rounded(*c);
    const bool state = detail::category(*c) == Category::OptimizerState;
    for (int r = 0; r < 2; ++r)
      for (int o = 0; o < 4; ++o)
        if (!(state && offloads_state(o) && steps_on_host(c->device))) n.arguments[r][o] += b;
    const std::string owner = c->block ? c->block->owner() : c->owner;
    n.tensors.emplace_back(owner.empty() ? std::string("a ") + category_name(detail::category(*c)) : owner, b);
  }
  std::sort(n.tensors.begin(), n.tensors.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  CategoryBytes by_hold[kHolds] = {};
  for (const Cell* c : db.cells) {
    if (is_argument.count(c) || c->wrapped || !(c->has_storage || c->resident() || c->offloaded())) continue;
    const Category cat = detail::category(*c);
    by_hold[hold_of(*c)][size_t(cat)] += rounded(*c);
  }
  for (int r = 0; r < 2; ++r)
    for (int o = 0; o < 4; ++o)
      for (int h = 0; h < kHolds; ++h)
        if (!can_leave(Hold(h), r, o))
          for (int cat = 0; cat < kNumCategories; ++cat) n.held[r][o][size_t(cat)] += by_hold[h][size_t(cat)];
  return n;
}

void note_floor(DeviceBudget& db, const KernelNeed& need, int64_t scratch) {
  for (int r = 0; r < 2; ++r)
    for (int o = 0; o < 4; ++o) {
      Floor& f = db.floors[r][o];
      const int64_t bytes = need.bytes(r, o) + scratch;
      if (bytes <= f.bytes) continue;
      f.bytes = bytes;
      f.kernel = need.kernel;
      f.arguments = need.arguments[r][o];
      f.scratch = scratch;
      f.held = need.held[r][o];
      f.tensors = need.tensors;
    }
}

std::string floor_message(DeviceBudget& db, const Device& d, size_t request) {
  const MemoryStats s = memory_stats(d);
  const KernelNeed now = kernel_need(db, "", {});
  const int64_t asked = int64_t(memory::round_size(request));
  // In each mode: the floor of the kernels run so far, of the one running now, and of this allocation
  // beside what cannot leave now.
  auto need = [&](int r, int o) {
    Floor f = db.floors[r][o];
    auto take = [&](const KernelNeed& n, int64_t extra, const std::string& what) {
      if (n.bytes(r, o) + extra <= f.bytes) return;
      f.bytes = n.bytes(r, o) + extra;
      f.kernel = what;
      f.arguments = n.arguments[r][o] + extra;
      f.scratch = 0;
      f.held = n.held[r][o];
      f.tensors = n.tensors;
    };
    if (db.running) take(*db.running, 0, db.running->kernel);
    take(now, asked,
         mg::detail::str("an allocation of ", format_bytes(asked),
                         db.running ? std::string(" for ") + db.running->kernel : std::string()));
    return f;
  };
  const int r = db.options.remat == Remat::Dynamic, o = int(db.options.offload);
  const Floor f = need(r, o);
  std::string m = mg::detail::str("memory budget of ", format_bytes(s.limit), " on ", d,
                                  " is too small: ", format_bytes(int64_t(request)),
                                  " more would not fit and nothing left can leave (", mode_name(r, o), "). ");
  if (f.bytes > s.limit)
    m += "A step needs at least " + f.str();
  else
    m += mg::detail::str("The kernels run so far need at least ", format_bytes(f.bytes), " (", f.bytes,
                         " B), within the budget, but the runtime could not make room: ",
                         format_bytes(sum(now.held[r][o])), " are held by tensors that cannot leave now");
  std::string others;  // the modes that need less, from the same kernels
  for (auto [r2, o2] : {std::pair{1, 0}, {0, 1}, {1, 1}, {1, 3}})
    if ((r2 != r || o2 != o) && need(r2, o2).bytes < f.bytes)
      others += mg::detail::str(others.empty() ? "" : "; ", mode_name(r2, o2), " ", format_bytes(need(r2, o2).bytes));
  if (!others.empty()) m += ". The same kernels need less with " + others;
  return m;
}

}  // namespace impl

std::string Floor::str() const {
  std::string args;
  for (size_t i = 0; i < tensors.size() && i < 4; ++i)
    args += mg::detail::str(i ? ", " : "", tensors[i].first, " ", format_bytes(tensors[i].second));
  if (tensors.size() > 4) args += mg::detail::str(" and ", tensors.size() - 4, " more");
  std::string beside;
  for (int c = 0; c < kNumCategories; ++c)
    if (held[size_t(c)])
      beside +=
          mg::detail::str(beside.empty() ? "" : " + ", category_name(Category(c)), " ", format_bytes(held[size_t(c)]));
  return mg::detail::str(format_bytes(bytes), " (", bytes, " B), set by ", kernel.empty() ? "no kernel" : kernel,
                         ": its arguments ", format_bytes(arguments), args.empty() ? "" : " (" + args + ")",
                         scratch ? mg::detail::str(" and scratch ", format_bytes(scratch)) : std::string(),
                         ", beside what cannot leave: ", beside.empty() ? std::string("nothing") : beside);
}

using namespace impl;

Floor floor(const Device& d, Remat remat, Offload offload) {
  Lock g(mu());
  return device_budget(d).floors[remat == Remat::Dynamic][int(offload)];
}

Floor floor(const Device& d) {
  Lock g(mu());
  const Options& o = device_budget(d).options;
  return device_budget(d).floors[o.remat == Remat::Dynamic][int(o.offload)];
}

}  // namespace mg::budget

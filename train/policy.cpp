// Checkpoint policies by name, chains of blocks, and running a chain under a policy.
#include <memgrad/train/policy.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include <memgrad/autograd/checkpoint.h>
#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>

namespace mg::train {

namespace {
thread_local ChainRunner* t_runner = nullptr;
}  // namespace

ChainRunner::ChainRunner() : previous_(t_runner) { t_runner = this; }
ChainRunner::~ChainRunner() { t_runner = previous_; }

Policy Policy::none() { return {}; }
Policy Policy::every_block(int64_t n) {
  Policy p{"every block", {}, false};
  for (int64_t i = 0; i < n; ++i) p.segments.push_back({i, i + 1});
  return p;
}
Policy Policy::uniform(int64_t n, int64_t k) {
  MG_CHECK(k >= 1 && k <= std::max<int64_t>(n, 1), ValueError, "train::Policy::uniform: expected 1 <= k <= ", n,
           " segments, got ", k);
  Policy p{std::to_string(k) + " segments", {}, false};
  for (int64_t j = 0; j < k && n > 0; ++j) p.segments.push_back({j * n / k, (j + 1) * n / k});
  return p;
}
Policy Policy::sqrt_n(int64_t n) {
  Policy p = uniform(n, std::max<int64_t>(1, std::llround(std::sqrt(double(n)))));
  p.name = "sqrt(n)";
  return p;
}
Policy Policy::selective_only() { return {"selective", {}, true}; }
Policy Policy::parse(const std::string& name, int64_t n) {
  if (name == "none") return none();
  if (name == "sqrt") return sqrt_n(n);
  if (name == "selective") return selective_only();
  const std::string k_text = name.rfind("every-", 0) == 0 ? name.substr(6) : "";
  MG_CHECK(!k_text.empty() && k_text.size() <= 18 && k_text.find_first_not_of("0123456789") == std::string::npos,
           ValueError, "checkpoint ", name, ": expected none, every-K (K >= 1 blocks per segment), sqrt or selective");
  const int64_t k = std::stoll(k_text);
  MG_CHECK(k >= 1 && k <= n, ValueError, "checkpoint ", name, ": the model has only ", n, " blocks");
  Policy p{"every " + std::to_string(k), {}, false};
  for (int64_t b = 0; b < n; b += k) p.segments.push_back({b, std::min(n, b + k)});
  return p;
}
int64_t Policy::recomputed_blocks() const {
  int64_t r = 0;
  for (auto& s : segments) r += s.end - s.begin;
  return r;
}
std::string Policy::str() const {
  if (segments.empty()) return selective ? "selective" : "-";
  std::ostringstream os;
  for (size_t i = 0; i < segments.size(); ++i)
    os << (i ? " " : "") << "[" << segments[i].begin << "," << segments[i].end << ")";
  return os.str();
}

// ---- chains

Chain chain_of(int64_t n, std::function<Tensor(int64_t, const Tensor&)> forward) {
  return {n, [forward](int64_t i, const Tensor& x, bool selective) -> Tensor {
            MemoryScope scope(std::to_string(i));
            if (!selective) return forward(i, x);
            return checkpoint([forward, i](const Tensor& in) { return forward(i, in); }, x,
                              CheckpointPolicy::keep_matmuls());
          }};
}

Chain chain_of(const nn::Sequential& blocks) {
  const nn::Sequential* seq = &blocks;
  return chain_of(int64_t(blocks.size()), [seq](int64_t i, const Tensor& x) { return (*seq)[size_t(i)]->forward(x); });
}

Tensor run_chain(const Chain& chain, const Tensor& x, const Policy& policy) {
  if (t_runner) return t_runner->run(chain, x);
  const int64_t n = chain.n;
  std::vector<int64_t> segment_end(size_t(n), -1);
  for (auto& s : policy.segments) {
    MG_CHECK(s.begin >= 0 && s.begin < s.end && s.end <= n, ValueError,
             "train::run_chain: expected segments inside [0, ", n, "), got ", policy.str());
    segment_end[size_t(s.begin)] = s.end;
  }
  Tensor h = x;
  for (int64_t i = 0; i < n;) {
    const int64_t end = segment_end[size_t(i)];
    if (end < 0) {
      h = chain.block(i, h, policy.selective);
      ++i;
      continue;
    }
    auto block = chain.block;  // the checkpoint runs again in backward: it keeps its own copy
    h = checkpoint(
        [block, i, end](const Tensor& in) {
          Tensor y = in;
          for (int64_t k = i; k < end; ++k) y = block(k, y, false);
          return y;
        },
        h);
    i = end;
  }
  return h;
}

}  // namespace mg::train

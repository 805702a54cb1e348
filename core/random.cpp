#include <memgrad/core/random.h>

#include <algorithm>

#include <memgrad/core/error.h>

namespace mg {

namespace {
thread_local std::vector<DrawLog*> t_recording;  // innermost last
thread_local const DrawLog* t_replay = nullptr;
thread_local size_t t_replay_next = 0;
}  // namespace

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seed_;
}
uint64_t Generator::offset() const {
  std::lock_guard<std::mutex> lock(mu_);
  return offset_;
}
void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_ = seed, offset_ = 0;
}
void Generator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  offset_ = offset;
}

Generator::Draw Generator::draw(uint64_t n) {
  Draw d;
  if (t_replay) {
    const DrawLog& log = *t_replay;
    size_t i = t_replay_next++;
    MG_CHECK(i < log.draws.size() && log.sizes[i] == n, AutogradError,
             "checkpoint: the recomputed segment drew random numbers its first run did not (draw ", i + 1, " of ",
             log.draws.size(), ", ", n, " counters); a segment must repeat its random ops in the same order");
    d = log.draws[i];
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    d = {seed_, offset_};
    offset_ += (n + 3) / 4 * 4;
  }
  for (DrawLog* log : t_recording) log->draws.push_back(d), log->sizes.push_back(n);
  return d;
}

Generator& default_generator() {
  static Generator g;
  return g;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

DrawLog::Recording::Recording(DrawLog& log) { t_recording.push_back(&log); }
DrawLog::Recording::~Recording() { t_recording.pop_back(); }

DrawLog::Replay::Replay(const DrawLog& log) : prev_(t_replay), prev_next_(t_replay_next) {
  t_replay = &log;
  t_replay_next = 0;
}
DrawLog::Replay::~Replay() {
  t_replay = prev_;
  t_replay_next = prev_next_;
}

}  // namespace mg

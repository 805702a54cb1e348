#include <memgrad/core/flops.h>

namespace mg {

namespace {
thread_local FlopCounter* t_innermost = nullptr;
thread_local bool t_recomputing = false;
}  // namespace

FlopCounter::FlopCounter() : outer_(t_innermost) { t_innermost = this; }
FlopCounter::~FlopCounter() { t_innermost = outer_; }

void count_flops(double flops) {
  for (FlopCounter* c = t_innermost; c; c = c->outer_) {
    c->total_ += flops;
    if (t_recomputing) c->recompute_ += flops;
  }
}

RecomputeScope::RecomputeScope() : prev_(t_recomputing) { t_recomputing = true; }
RecomputeScope::~RecomputeScope() { t_recomputing = prev_; }

}  // namespace mg

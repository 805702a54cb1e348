#include <memgrad/plan/fits.h>

#include <algorithm>
#include <optional>

#include <memgrad/core/error.h>
#include <memgrad/core/shape.h>
#include <memgrad/plan/planner.h>
#include <memgrad/plan/zero.h>

namespace mg::plan {

train::ModelSpec scaled(const train::ModelSpec& base, Family family, int64_t k) {
  MG_CHECK(base.kind == train::ModelSpec::Kind::GPT && k >= 1, ValueError,
           "plan::scaled: expected a GPT and k >= 1, got ", k);
  train::ModelSpec m = base;
  if (family == Family::Layers) {
    m.gpt.n_layer = k;
  } else {
    const std::optional<int64_t> width = checked_mul(k, base.gpt.n_embd / base.gpt.n_head);
    MG_CHECK(width, ValueError, "plan::scaled: expected a width that fits in int64, got ", k, " heads of ",
             base.gpt.n_embd / base.gpt.n_head);
    m.gpt.n_embd = *width;
    m.gpt.n_head = k;
  }
  return m;
}

namespace {
// (vocab + block) h + layers (12 h^2 + 13 h) + 2 h, in double: never wraps, exact below 2^53.
double parameters_approx(const nn::GPTConfig& c) {
  const double h = double(c.n_embd);
  return (double(c.vocab_size) + double(c.block_size)) * h + double(c.n_layer) * (12 * h * h + 13 * h) + 2 * h;
}
}  // namespace

int64_t gpt_parameters(const nn::GPTConfig& c) {
  const int64_t h = c.n_embd;
  std::optional<int64_t> per_layer = checked_mul(h, h), r;
  if (per_layer) per_layer = checked_mul(*per_layer, 12);
  if (per_layer) per_layer = checked_add(*per_layer, 13 * h);  // h^2 fits, so 13 h does
  if (per_layer) r = checked_mul(*per_layer, c.n_layer);
  if (r) r = checked_add(*r, 2 * h);
  std::optional<int64_t> embeddings = checked_add(c.vocab_size, c.block_size);
  if (embeddings) embeddings = checked_mul(*embeddings, h);
  r = r && embeddings ? checked_add(*r, *embeddings) : std::nullopt;
  MG_CHECK(r, ValueError, "plan::gpt_parameters: expected a parameter count that fits in int64, got n_layer ",
           c.n_layer, ", n_embd ", h, ", vocab ", c.vocab_size, ", block ", c.block_size);
  return *r;
}

namespace {
// The largest k in [1, max_k] with fits(k) (largest_fitting), and its model's parameters.
LargestModel search(const train::ModelSpec& base, Family family, int64_t max_k,
                    const std::function<bool(int64_t)>& fits) {
  LargestModel r;
  const int64_t k = largest_fitting(max_k, fits);
  if (k == 0) return r;
  r.k = k, r.capped = k == max_k, r.parameters = gpt_parameters(scaled(base, family, k).gpt);
  return r;
}
}  // namespace

LargestModel largest_model(const train::ModelSpec& base, Family family, const train::InputShape& input,
                           const train::StepOptions& step, int64_t budget, int64_t max_k, const PlanOptions& options) {
  return search(base, family, max_k, [&](int64_t k) {
    const train::ModelSpec m = scaled(base, family, k);
    if (options.progress) options.progress(std::to_string(gpt_parameters(m.gpt)) + " parameters");
    return fits(program(m, input, step), context(input), budget, options);
  });
}

LargestModel largest_by_formula(const train::ModelSpec& base, Family family, const train::StepOptions& step,
                                int64_t budget, int64_t max_k) {
  const bool half = train::storage_dtype(step.precision).has_value();
  const double p = half ? 2 : 4, k = optimizer_state_bytes_per_parameter(step.optimizer, half),
               per = zero_bytes_per_parameter(p, p, k, step.sharding_stage(), step.world_size);
  // In double: the doubling may try sizes whose count would not fit in int64 (no model of those fits).
  return search(base, family, max_k, [&](int64_t x) {
    const int64_t head = base.gpt.n_embd / base.gpt.n_head;
    if (family == Family::Width && double(x) * double(head) > 9e18) return false;
    const double n = parameters_approx(scaled(base, family, x).gpt);
    return n < 9e18 && n * per <= double(budget);
  });
}

}  // namespace mg::plan

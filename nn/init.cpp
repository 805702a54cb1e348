#include <memgrad/nn/init.h>

#include <cmath>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/random.h>
#include <memgrad/nn/deferred.h>
#include <memgrad/nn/module.h>
#include <memgrad/ops/random_fill_impl.h>

namespace mg::nn::init {

double calculate_gain(Nonlinearity nl, double negative_slope) {
  switch (nl) {
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1 + negative_slope * negative_slope));
    case Nonlinearity::Tanh:
      return 5.0 / 3;
    default:
      return 1.0;
  }
}

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  MG_CHECK(t.dim() >= 2, ShapeError, "init: fan in and fan out need a tensor of 2 or more dims, got shape ",
           shape_str(t.shape()));
  int64_t field = 1;
  for (int64_t d = 2; d < t.dim(); ++d) field *= t.size(d);
  return {t.size(1) * field, t.size(0) * field};
}

namespace {
void check(const char* op, const Tensor& t) {
  MG_CHECK(t.defined() && is_floating(t.dtype()), DTypeError, op, ": expected a floating tensor, got ",
           t.defined() ? dtype_name(t.dtype()) : "an undefined one");
}
}  // namespace

// The fills run as ops (ops/), under NoGradGuard: parameters are leaves that require grad.
namespace {
// A placeholder parameter (nn/deferred.h) is not filled: the fill's recipe is recorded, with the
// generator's draw, which advances the generator as the fill would.
template <class Fill>
Tensor& fill_or_record(Tensor& t, InitRecipe recipe, Generator* generator, const Fill& fill) {
  if (!is_placeholder(t)) return fill();
  const std::shared_ptr<DeferredParameters>& deferred = DeferredInit::active();
  MG_CHECK(deferred, ValueError, "nn::init: a deferred parameter (a placeholder of shape ", shape_str(t.shape()),
           ") filled outside nn::DeferredInit; materialize it first");
  recipe.dtype = t.dtype();
  if (recipe.kind != InitRecipe::Kind::Constant) {
    DrawLog log;
    {
      DrawLog::Recording recording(log);
      fill();  // on meta: draws its counters, writes nothing
    }
    MG_CHECK(log.draws.size() == 1, ValueError, "nn::init: expected one draw per fill, got ", log.draws.size());
    recipe.seed = log.draws[0].seed, recipe.offset = log.draws[0].offset;
  }
  (void)generator;
  deferred->record(t, recipe);
  return t;
}
}  // namespace

Tensor& constant_(Tensor& t, double value) {
  check("constant_", t);
  NoGradGuard no_grad;
  InitRecipe r;
  r.kind = InitRecipe::Kind::Constant, r.a = value;
  return fill_or_record(t, r, nullptr, [&]() -> Tensor& { return t.fill_(value); });
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& normal_(Tensor& t, double mean, double std, Generator* generator) {
  check("normal_", t);
  NoGradGuard no_grad;
  InitRecipe r;
  r.kind = InitRecipe::Kind::Normal, r.a = mean, r.b = std;
  return fill_or_record(t, r, generator, [&]() -> Tensor& { return mg::detail::normal_(t, mean, std, generator); });
}

Tensor& uniform_(Tensor& t, double lo, double hi, Generator* generator) {
  check("uniform_", t);
  NoGradGuard no_grad;
  InitRecipe r;
  r.kind = InitRecipe::Kind::Uniform, r.a = lo, r.b = hi;
  return fill_or_record(t, r, generator, [&]() -> Tensor& { return mg::detail::uniform_(t, lo, hi, generator); });
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* generator) {
  auto [fi, fo] = fans(t);
  double a = gain * std::sqrt(6.0 / double(fi + fo));
  return uniform_(t, -a, a, generator);
}
Tensor& xavier_normal_(Tensor& t, double gain, Generator* generator) {
  auto [fi, fo] = fans(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / double(fi + fo)), generator);
}

namespace {
double kaiming_std(const Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  auto [fi, fo] = fans(t);
  return calculate_gain(nl, a) / std::sqrt(double(mode == FanMode::FanIn ? fi : fo));
}
}  // namespace
Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator* generator) {
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  return uniform_(t, -bound, bound, generator);
}
Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, Nonlinearity nl, Generator* generator) {
  return normal_(t, 0.0, kaiming_std(t, a, mode, nl), generator);
}

void gpt2_init_(Module& model, int64_t n_layer, const std::string& residual_suffix) {
  auto ends_with = [](const std::string& s, const std::string& e) {
    return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
  };
  for (auto& [path, m] : model.named_modules()) {
    for (auto& [name, p] : m->named_parameters(false)) {
      std::string full = path.empty() ? name : path + "." + name;
      const std::string& type = m->type_name();
      if (type == "LayerNorm")
        name == "weight" ? ones_(p) : zeros_(p);
      else if (name == "bias")
        zeros_(p);
      else if (ends_with(full, residual_suffix))
        normal_(p, 0.0, 0.02 / std::sqrt(2.0 * double(n_layer)));
      else
        normal_(p, 0.0, 0.02);
    }
  }
}

}  // namespace mg::nn::init

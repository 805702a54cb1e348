// The one case list of memgrad's ops, after ggml's tests/test-backend-ops.cpp: each case names
// its op, its inputs (shapes, value ranges, dtypes, views), the op's arguments and its
// tolerances once, and every mode runs it:
//   test_ops   "<op>: matches PyTorch and formulas"  against tests/reference/fixtures/ops_*.json
//              "<op>: gradcheck"                      float64 central differences
//              "<op>: meta books the CPU's bytes"     shapes, dtypes, ledger and alloc/free trace
//   test_gpu   "cuda: <op> matches the cpu"           every kernel variant and floating dtype
//   bench_ops  "<op>/<case>/<device>/<dtype>/..."     forward and forward + backward
// and `test_ops --dump-cases FILE` writes the list (with its inputs) for make_fixtures.py.
//
// An op is one MG_OP_CASES block in tests/ops/cases_<family>.cpp (families follow the kernel
// files): its mg call, then its cases.
//
//   MG_OP_CASES(layer_norm) {
//     call([](const Tensors& x, const Args& a) {
//       return mg::layer_norm(x[0], ints_arg(a, "normalized_shape"), x[1], x[2], float_arg(a, "eps"));
//     });
//     add_case("layer_norm_affine", {U({3, 4, 6}), U({6}), U({6})}, {{"normalized_shape", {6}}, {"eps", 1e-5}});
//   }
//
// and its entry in TORCH_OPS of tests/reference/make_fixtures.py (see docs/kernels.md, "Testing").
//
// Why a macro that writes the TEST_CASEs, rather than a loop over the list at run time: doctest
// filters on TEST_CASE names, and only TEST_CASEs registered at static initialisation have names
// (its run-time registration is in doctest::detail). So each op's block registers one TEST_CASE per
// mode, named after the op, and `--test-case='*layer_norm*'` finds all of an op's tests. Which modes
// depends on the program: each compiles the case files with its own MG_OP_MODES_* definition
// (test_ops the cpu modes, test_gpu the cuda mode, bench_ops none).
#pragma once
#include <cstddef>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <memgrad/autograd/gradcheck.h>
#include <memgrad/core/random.h>
#include <memgrad/ops/ops.h>
#include <nlohmann/json_fwd.hpp>

namespace mg::optest {

using Tensors = std::vector<Tensor>;
using V = std::vector<double>;

// One argument of an op, as make_fixtures.py receives it in JSON: null, a bool, an integer (a
// Python int, which promotes differently from a float), a float, a string or a list of integers.
// (A small type of its own rather than a JSON value keeps the case files quick to compile.)
struct Arg {
  enum class Kind { Null, Bool, Int, Float, String, Ints };
  Kind kind = Kind::Null;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;

  Arg(std::nullptr_t = nullptr) {}
  Arg(bool v) : kind(Kind::Bool), b(v) {}
  Arg(int v) : kind(Kind::Int), i(v) {}
  Arg(int64_t v) : kind(Kind::Int), i(v) {}
  Arg(double v) : kind(Kind::Float), f(v) {}
  Arg(const char* v) : kind(Kind::String), s(v) {}
  Arg(std::string v) : kind(Kind::String), s(std::move(v)) {}
  Arg(std::vector<int64_t> v) : kind(Kind::Ints), ints(std::move(v)) {}
  Arg(const Shape& v) : kind(Kind::Ints), ints(v) {}  // a Shape would need two conversions through the one above
  Arg(std::initializer_list<int64_t> v) : kind(Kind::Ints), ints(v) {}
};
using Args = std::map<std::string, Arg>;

// |got - want| <= atol + rtol * |want|.
struct Tol {
  double rtol = 0, atol = 0;
};
// About one unit in the last place of `t`: what two backends that compute 16-bit types in float and
// round once agree to (float32 2e-5/2e-6, float16 4e-3/2e-3, bfloat16 3e-2/1.6e-2).
Tol tol_for(DType t);
inline Tol scaled(Tol t, double factor) { return {t.rtol * factor, t.atol * factor}; }

// One step that turns an input into a view after it becomes a leaf, so backward runs through it.
struct View {
  std::string kind;          // transpose, permute, slice, select, expand
  std::vector<int64_t> arg;  // transpose: d0 d1; permute: dims; slice: dim start end step; select: dim index;
                             // expand: shape
};

// One input of a case: its shape, how its values are drawn (from a generator seeded by the case
// name and the input's position, so every mode and make_fixtures.py see the same values), its
// dtype and the views taken of it.
struct Input {
  enum class Fill { Uniform, Away, Ints, Bools, Grid, Values };
  Fill fill = Fill::Uniform;
  Shape shape;
  double lo = -2, hi = 2;      // Uniform, Away (magnitudes), Ints ([lo, hi))
  V values;                    // Grid: the values drawn from; Values: the data, row-major
  std::optional<DType> dtype;  // unset: the floating dtype the case runs in
  std::vector<View> views;
  std::optional<bool> grad;                                // unset: floating inputs require grad
  std::function<double(size_t index, double value)> edit;  // applied to each drawn value (flat index)

  Input t(int64_t d0 = 0, int64_t d1 = 1) const { return with({"transpose", {d0, d1}}); }
  Input permute(const std::vector<int64_t>& dims) const { return with({"permute", dims}); }
  Input slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const {
    return with({"slice", {dim, start, end, step}});
  }
  Input select(int64_t dim, int64_t index) const { return with({"select", {dim, index}}); }
  Input expand(const Shape& s) const { return with({"expand", s}); }
  Input as(DType t) const;
  Input no_grad() const;
  // Edits the drawn values: `f(flat index, value)` gives the element (say, -inf to mask it).
  Input map(std::function<double(size_t, double)> f) const;
  bool floating() const { return !dtype || is_floating(*dtype); }

 private:
  Input with(View v) const;
};
Input U(const Shape& s, double lo = -2, double hi = 2);      // uniform in [lo, hi)
Input Away(const Shape& s, double lo = 0.3, double hi = 2);  // |x| in [lo, hi), random sign: off kinks at 0
Input Ints(const Shape& s, int64_t lo, int64_t hi);          // int64 in [lo, hi)
Input Bools(const Shape& s);
Input Grid(const Shape& s, const V& values);  // drawn from a few exact values, so elements compare equal
Input Vals(const V& data);                    // given values, 1-d
Input Vals(const V& data, const Shape& s);    // given values of shape `s` ({}: 0-d)
Input IntVals(const V& data);                 // int64
Input IntVals(const V& data, const Shape& s);

// Expected outputs from a formula written in the case, computed in double from the inputs' values
// (views applied, row-major): one vector per output.
using Formula = std::function<std::vector<V>(const std::vector<V>& inputs)>;
// The formula of an element-wise op of one input.
Formula each(std::function<double(double)> f);

// A property a case checks beyond values (say, that an op returns its input itself): the failure
// message, or "" when it holds.
using Property = std::function<std::string(const Tensors& inputs, const Tensors& outputs)>;
// The property that every output has dtype `t` (for cases PyTorch cannot check).
Property outputs_of_dtype(DType t);

struct Case {
  std::string name, op, family;
  std::vector<Input> inputs;
  Args args;
  std::vector<DType> dtypes{kFloat32, kFloat16, kBFloat16, kFloat64};  // floating dtypes for meta and cuda
  bool large = false;                // kernel-path sizes: no fixture, no gradcheck (too big, too slow)
  std::string no_torch;              // why PyTorch cannot be the reference
  std::string no_grad;               // why no mode runs backward (a kink, a tie)
  std::vector<size_t> grad_outputs;  // outputs that get an upstream gradient; empty: every floating one
  Tol torch_tol{1e-5, 1e-6};
  std::string torch_tol_why;
  GradcheckOptions grad_options;
  std::function<Tol(DType, const std::string& variant)> cuda_tol;  // forward; backward allows 4x
  bool tf32 = false;  // cuda runs float32 matmul and conv on TF32 tensor cores
  Formula formula;
  Tol formula_tol{1e-6, 1e-6};
  Property property;

  // Chainable settings, for the case files.
  Case& only(std::vector<DType> d) { return dtypes = std::move(d), *this; }
  Case& big() { return large = true, *this; }
  Case& not_torch(std::string why) { return no_torch = std::move(why), *this; }
  Case& no_backward(std::string why) { return no_grad = std::move(why), *this; }
  Case& grad_of(std::vector<size_t> outputs) { return grad_outputs = std::move(outputs), *this; }
  Case& torch_tolerance(Tol t, std::string why) { return torch_tol = t, torch_tol_why = std::move(why), *this; }
  Case& gradcheck_options(double eps, double atol, double rtol);
  Case& cuda_tolerance(double factor);  // tol_for(dtype) times `factor`
  Case& cuda_tolerance(std::function<Tol(DType, const std::string&)> f) { return cuda_tol = std::move(f), *this; }
  Case& with_tf32() { return tf32 = true, *this; }
  Case& expect(std::vector<V> outputs, Tol tol = {1e-6, 1e-6});
  Case& expect(Formula f, Tol tol = {1e-6, 1e-6}) { return formula = std::move(f), formula_tol = tol, *this; }
  Case& check(Property p) { return property = std::move(p), *this; }

  // The floating dtypes this case runs in for meta and cuda: one entry (the fixed dtypes) when no
  // input follows the run's dtype.
  std::vector<DType> run_dtypes() const;
  bool has_gradient() const;  // backward runs: some floating input requires grad and no reason says not
};

using OpFn = std::function<Tensors(const Tensors&, const Args&)>;

// One op: its mg call and its cases. MG_OP_CASES defines build(), which the first use runs.
class OpDef {
 public:
  OpDef(std::string name, const char* file);
  virtual ~OpDef() = default;
  const std::string& name() const { return name_; }
  const std::string& family() const { return family_; }
  const OpFn& fn() const { return fn_; }
  const std::deque<Case>& cases();
  // The kernels whose cuda variants the cuda mode loops over (default: the op's own name). The case
  // block may name others (variants_of), so this builds the cases first.
  const std::vector<std::string>& variant_ops() {
    cases();
    return variant_ops_;
  }

  // For the case files (MG_OP_CASES blocks and the helpers they call):
  template <class F>
  void call(F f) {  // the op's mg call: returns a Tensor or a Tensors
    fn_ = [f](const Tensors& x, const Args& a) -> Tensors {
      if constexpr (std::is_same_v<decltype(f(x, a)), Tensor>)
        return {f(x, a)};
      else
        return f(x, a);
    };
  }
  Case& add_case(std::string name, std::vector<Input> inputs, Args args = {});
  // Settings every case added after this starts from (dtypes, tolerances, ...).
  Case& defaults() { return defaults_; }
  void variants_of(std::vector<std::string> ops) { variant_ops_ = std::move(ops); }

 protected:
  virtual void build() = 0;

 private:
  std::string name_, family_;
  OpFn fn_;
  std::vector<std::string> variant_ops_;
  Case defaults_;
  std::deque<Case> cases_;  // references stay valid while cases are added
  bool built_ = false;
};

bool register_op(std::unique_ptr<OpDef> op);
OpDef& op_named(const std::string& name);  // raises ValueError for an op not in the list
std::vector<OpDef*> all_ops();             // by family, then name

// ---- arguments (ValueError for a missing key or another kind)
int64_t int_arg(const Args& a, const char* key);
double float_arg(const Args& a, const char* key);  // a float or an integer
bool bool_arg(const Args& a, const char* key);
const std::string& string_arg(const Args& a, const char* key);
std::vector<int64_t> ints_arg(const Args& a, const char* key);
bool null_arg(const Args& a, const char* key);
Scalar scalar_arg(const Args& a, const char* key);                          // keeps int, float or bool
std::optional<Scalar> optional_scalar_arg(const Args& a, const char* key);  // null: none
Tensor optional_input(const Tensors& x, size_t i);                          // undefined past the end
DType dtype_named(const std::string& name);  // "float32" -> kFloat32; ValueError for an unknown name

// ---- running a case (every mode does it this way)

// The inputs as leaves on `device`: floating inputs that follow the run in `dtype`; each requires
// grad when the case differentiates it and `grads` is true.
Tensors make_leaves(const Case& c, DType dtype, const Device& device, bool grads);
// The leaves' views, then the op: one forward, the generator seeded from the case name (so random
// ops draw the same numbers on every device and in every evaluation). `offset`, when given,
// receives the generator's offset after the op (random ops advance it).
Tensors forward(const Case& c, const Tensors& leaves, uint64_t* offset = nullptr);
Tensors apply_views(const Case& c, const Tensors& leaves);
// Whether output `i` gets an upstream gradient: a floating output that requires grad, and one of
// the case's grad_outputs when it names them.
bool gets_gradient(const Case& c, size_t i, const Tensor& output);
// An upstream gradient on `device` for each output that gets one (undefined for the others), the
// same values on every device: uniform in [-1, 1), drawn from the case name and the output's position.
Tensors upstream_for(const Case& c, const Tensors& outputs, const Device& device);
// Backward from every output with an upstream gradient; false when there is none.
bool backward(const Tensors& outputs, const Tensors& upstream);

// Every combination of the variants of `kernels` on device type `d` (kernel_variants): (kernel,
// variant) pairs to select; one empty selection when none has variants (cuda: or without CUDA).
using VariantSelection = std::vector<std::pair<std::string, std::string>>;
std::vector<VariantSelection> variant_selections(const std::vector<std::string>& kernels, DeviceType d);
std::string variant_label(const VariantSelection& s);  // "cudnn", "block+im2col", "" for none
// Selects each (kernel, variant) of `s` on `d` for its lifetime, then each kernel's default again.
class VariantGuard {
 public:
  VariantGuard(const VariantSelection& s, DeviceType d);
  ~VariantGuard();
  VariantGuard(const VariantGuard&) = delete;
  VariantGuard& operator=(const VariantGuard&) = delete;

 private:
  VariantSelection selection_;
  DeviceType device_;
};

// A digest of a case's inputs and upstream gradients in float32 (what a fixture was computed
// from): a fixture whose digest differs is stale.
std::string digest(const Tensors& leaves, const Tensors& upstream);
// The whole list as JSON for tests/reference/make_fixtures.py: every case that PyTorch checks, with
// its inputs' values, upstream gradients and tolerance.
nlohmann::json dump_cases();

}  // namespace mg::optest

// ---- the TEST_CASEs each program registers per op (see the top of this file)
#if defined(MG_OP_MODES_CPU)
#include <doctest/doctest.h>
namespace mg::optest {
void check_values(const std::string& op);
void check_gradients(const std::string& op);
void check_meta(const std::string& op);
}  // namespace mg::optest
#define MG_OP_MODE_TESTS(name)                                                             \
  TEST_CASE(#name ": matches PyTorch and formulas") { ::mg::optest::check_values(#name); } \
  TEST_CASE(#name ": gradcheck") { ::mg::optest::check_gradients(#name); }                 \
  TEST_CASE(#name ": meta books the CPU's bytes") { ::mg::optest::check_meta(#name); }
#elif defined(MG_OP_MODES_CUDA)
#include <doctest/doctest.h>
namespace mg::optest {
void check_cuda(const std::string& op);
}  // namespace mg::optest
#define MG_OP_MODE_TESTS(name) \
  TEST_CASE("cuda: " #name " matches the cpu") { ::mg::optest::check_cuda(#name); }
#else
#define MG_OP_MODE_TESTS(name)
#endif

#define MG_OP_CASES(name)                                                                                         \
  namespace {                                                                                                     \
  struct OpCases_##name : ::mg::optest::OpDef {                                                                   \
    OpCases_##name() : OpDef(#name, __FILE__) {}                                                                  \
    void build() override;                                                                                        \
  };                                                                                                              \
  [[maybe_unused]] const bool kRegistered_##name = ::mg::optest::register_op(std::make_unique<OpCases_##name>()); \
  }                                                                                                               \
  MG_OP_MODE_TESTS(name)                                                                                          \
  void OpCases_##name::build()

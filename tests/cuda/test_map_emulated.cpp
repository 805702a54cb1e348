// The elementwise map's kernels (kernels/cuda/map.cuh) with elementwise.cuh's functors, emulated on
// the host against the CPU backend's kernels on the same tensors: copies and casts between dtypes,
// fill, every unary op and its gradient, every binary op and comparison, bias_gelu and where. Each
// runs on every path that takes its operands: the strided loop (transposed and broadcast inputs, a
// transposed output), and for contiguous operands the scalar loop and the 16-byte vector loop, on
// grids smaller than the work; sizes 1, 31, 33, 1025, 65537; inf, NaN, -0, denormals and the largest
// finite values among the floating inputs.
#include "emulated_harness.h"
// after the emulation's definitions:
#include <memgrad/kernels/cuda/elementwise.cuh>
#include <memgrad/kernels/cuda/map.cuh>

#include <algorithm>

#include <memgrad/ops/op_util.h>
#include <utility>

namespace {

using namespace mg;
using namespace mg::kernels;
using namespace mg::cuda;
using namespace mg::cuda::elementwise_kernels;
using emu::cpu;

enum class Path { Strided, Scalar, Vector };
const char* path_name(Path p) { return p == Path::Strided ? "strided" : p == Path::Scalar ? "scalar" : "vector"; }

// out = f(in...) through map.cuh's kernel for `path`, on 3 blocks of 64 threads.
template <class Out, class... In, class F, size_t... I>
void launch_map(Path path, const Tensor& out, F f, const std::vector<Tensor>& in, std::index_sequence<I...>) {
  constexpr int N = 1 + sizeof...(In);
  static const char* names[] = {"in0", "in1", "in2", "in3"};
  const emu::DeviceTensor dout = emu::DeviceTensor::output("out", out);
  std::vector<emu::DeviceTensor> din;
  for (size_t k = 0; k < in.size(); ++k) din.emplace_back(names[k], in[k]);
  const int64_t n = out.numel();
  const emu::Config c{dim3(3), dim3(64)};
  if (path == Path::Strided) {
    const Iter<N> it = make_iter<N>("map", out.shape(), {&out.strides(), &in[I].strides()...});
    emu::launch<map_strided_kernel<Out, F, In...>>(c, it, n, dout.ptr<Out>(), f, din[I].template ptr<In>()...);
  } else if (path == Path::Scalar) {
    emu::launch<map_contiguous_kernel<1, Out, F, In...>>(c, n, dout.ptr<Out>(), f, din[I].template ptr<In>()...);
  } else {
    constexpr size_t widest = std::max({sizeof(Out), sizeof(In)...});
    constexpr int V = int(16 / widest) > 0 ? int(16 / widest) : 1;
    emu::launch<map_contiguous_kernel<V, Out, F, In...>>(c, n, dout.ptr<Out>(), f, din[I].template ptr<In>()...);
  }
  dout.download();
}

// Runs f on every path the operands allow (contiguous ones: all three) into a fresh output laid
// out as `layout` (empty: contiguous), each compared with the CPU's `want`.
template <class Out, class... In, class F>
void check_map(const std::string& what, F f, const Tensor& want, const std::vector<Tensor>& in, double rtol,
               const Tensor& layout = Tensor()) {
  bool contiguous = !layout.defined();
  for (const Tensor& t : in) contiguous &= t.is_contiguous();
  for (Path p : {Path::Strided, Path::Scalar, Path::Vector}) {
    if (p != Path::Strided && !contiguous) continue;
    const Tensor got = layout.defined() ? empty(layout.shape(), want.dtype()).t() : empty(want.shape(), want.dtype());
    launch_map<Out, In...>(p, got, f, in, std::index_sequence_for<In...>{});
    emu::check_close(got, want, rtol, rtol / 64, what + ", " + path_name(p) + ", " + emu::name_of(want.dtype()));
  }
}

const int64_t kSizes[] = {1, 31, 33, 1025};

// An input of n elements in each layout: contiguous, every other element of 2n, reversed (a negative
// stride) and for 1025 elements transposed.
std::vector<Tensor> layouts(DType t, int64_t n, double lo, double hi, uint64_t seed) {
  const Tensor flat = emu::with_edges({n}, t, lo, hi, seed), twice = emu::with_edges({2 * n}, t, lo, hi, seed);
  std::vector<Tensor> r = {flat, twice.slice(0, 0, 2 * n, 2), detail::as_strided_view(flat, {n}, {-1}, n - 1)};
  if (n == 1025) r.push_back(flat.view({25, 41}).t());
  return r;
}

}  // namespace

TEST_CASE("map kernels: copies and casts between dtypes, strided and flipped views included") {
  const std::pair<DType, DType> casts[] = {
      {kFloat32, kFloat16}, {kFloat16, kFloat32},  {kFloat32, kBFloat16}, {kBFloat16, kFloat32}, {kFloat64, kFloat32},
      {kFloat32, kFloat64}, {kFloat16, kBFloat16}, {kFloat32, kFloat32},  {kInt64, kInt32},      {kInt32, kFloat32},
      {kUInt8, kInt64},     {kBool, kFloat32},     {kFloat32, kBool},     {kInt8, kFloat16},     {kFloat64, kInt64}};
  for (int64_t n : {int64_t(1), int64_t(33), int64_t(1025), int64_t(65537)})
    for (const auto& pair : casts) {
      const DType from = pair.first, to = pair.second;  // (clang 14: lambdas capture no bindings)
      const bool floating = is_floating(from) && is_floating(to);
      Tensor src = floating ? emu::with_edges({n}, from, -3e4, 3e4, uint64_t(n))
                            : emu::ints({n}, from, from == kBool ? 0 : -100, from == kBool ? 2 : 100, uint64_t(n));
      if (from == kUInt8) src = emu::ints({n}, from, 0, 250, 7);
      const Tensor reversed = detail::as_strided_view(src, {n}, {-1}, n - 1);
      for (const Tensor& s :
           n == 1025 ? std::vector<Tensor>{src, src.view({25, 41}).t(), reversed} : std::vector<Tensor>{src}) {
        const Tensor want = empty(s.shape(), to);
        cpu(&kernels::Backend::copy, s, Out(want));
        dispatch(to, [&](auto dt) {
          using D = typename decltype(dt)::type;
          dispatch(from, [&](auto st) {
            using S = typename decltype(st)::type;
            check_map<D, S>("copy " + emu::name_of(from), Identity{}, want, {s}, 0);
          });
        });
      }
    }
  // into a transposed output
  const Tensor src = emu::uniform({41, 25}, kFloat32, -1, 1, 3), want = src.clone();
  check_map<float, float>("copy into a transposed view", Identity{}, want, {src}, 0, src.t());
}

TEST_CASE("map kernels: fill, negative values into unsigned types wrapping as integers do") {
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8, kBool})
    for (double value : {2.5, -1.0})
      for (int64_t n : kSizes) {
        const Tensor want = empty({n}, t);
        cpu(&kernels::Backend::fill, Out(want), value);
        if (t == kUInt8 && value < 0) CHECK(want.to_vector<int64_t>()[0] == 255);
        dispatch(t, [&](auto tag) {
          using T = typename decltype(tag)::type;
          check_map<T>("fill", Constant<opmath_t<T>>{scalar_as<opmath_t<T>>(value)}, want, {}, 0);
        });
      }
}

TEST_CASE("map kernels: every unary op and its gradient, floating dtypes, edge values") {
  for (DType t : emu::floating_dtypes())
    for (int64_t n : kSizes) {
      const Tensor g = emu::uniform({n}, t, -2, 2, 5);
      const std::vector<Tensor> xs = layouts(t, n, -4, 4, uint64_t(n) + 10);
      const Tensor positive = emu::uniform({n}, t, 0.01, 9, uint64_t(n));
      for (int op = 0; op <= int(UnaryOp::RsubScalar); ++op) {
        const UnaryOp u = UnaryOp(op);
        const UnaryParams p{op == int(UnaryOp::PowScalar) ? 2.5 : -1.5, 0.75};
        const double tol = emu::rtol_for(t, t == kFloat32 ? 4 : 2);
        for (const Tensor& in : xs) {
          const Tensor want = empty(in.shape(), t);
          cpu(&kernels::Backend::unary, u, in, Out(want), p);
          dispatch_floating(t, "test", [&](auto tag) {
            using T = typename decltype(tag)::type;
            check_map<T, T>("unary " + std::to_string(op), unary_fn<T>(u, p), want, {in}, tol);
          });
        }
        // the gradient, at x (or the output y, as kernels/unary.h says) in the op's domain
        const Tensor saved =
            u == UnaryOp::Log || u == UnaryOp::Sqrt || u == UnaryOp::Rsqrt ? positive : emu::uniform({n}, t, -3, 3, 9);
        const Tensor want = empty({n}, t);
        cpu(&kernels::Backend::unary_backward, u, g, saved, Out(want), p);
        dispatch_floating(t, "test", [&](auto tag) {
          using T = typename decltype(tag)::type;
          check_map<T, T, T>("unary_backward " + std::to_string(op), UnaryGradFn<opmath_t<T>>{u, p}, want, {g, saved},
                             tol);
        });
      }
    }
}

TEST_CASE("map kernels: unary ops on integers") {
  // the ops that keep integers (the float-only ones, exp and the like, promote them to float32 first)
  const UnaryOp ops[] = {UnaryOp::Neg,       UnaryOp::Abs,       UnaryOp::Relu,      UnaryOp::Clamp,
                         UnaryOp::AddScalar, UnaryOp::MulScalar, UnaryOp::RsubScalar};
  for (DType t : {kInt32, kInt64, kInt8, kUInt8})
    for (UnaryOp u : ops) {
      const Tensor x = emu::ints({33}, t, t == kUInt8 ? 0 : -6, 7, 4);
      const Tensor want = empty({33}, t);
      const UnaryParams p{-2, 3};  // -2 in uint8: 254
      cpu(&kernels::Backend::unary, u, x, Out(want), p);
      if (t == kUInt8 && u == UnaryOp::AddScalar)
        CHECK(want.to_vector<int64_t>()[0] == (x.to_vector<int64_t>()[0] + 254) % 256);
      dispatch(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
          check_map<T, T>("unary " + std::to_string(int(u)), unary_fn<T>(u, p), want, {x}, 0);
      });
    }
}

TEST_CASE("map kernels: every binary op and comparison, broadcast operands, edge values") {
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kBool})
    for (int64_t n : {int64_t(1), int64_t(31), int64_t(1025), int64_t(65537)}) {
      const bool floating = is_floating(t);
      const Tensor a = floating ? emu::with_edges({n}, t, -3, 3, 1) : emu::ints({n}, t, t == kBool ? 0 : -9, 10, 1);
      const Tensor b = floating ? emu::uniform({n}, t, -3, 3, 2) : emu::ints({n}, t, 1, t == kBool ? 2 : 9, 2);
      for (int op = 0; op <= int(BinaryOp::Ge); ++op) {
        const BinaryOp o = BinaryOp(op);
        if (!floating && (o == BinaryOp::Pow || (t == kBool && (o == BinaryOp::Sub || o == BinaryOp::Div)))) continue;
        if (n == 65537 && op > int(BinaryOp::Mul)) continue;              // the long one: the add and the vector path
        for (int broadcast = 0; broadcast <= (n == 1025); ++broadcast) {  // b's row 3 over a [41, 25] a
          const Tensor x = broadcast ? a.view({41, 25}) : a;
          const Tensor y = broadcast ? b.view({41, 25}).select(0, 3).expand({41, 25}) : b;
          const bool compare = o >= BinaryOp::Eq;
          const Tensor want = empty(x.shape(), compare ? kBool : t);
          cpu(&kernels::Backend::binary, o, x, y, Out(want), 0.5);
          const double tol = o == BinaryOp::Pow ? emu::rtol_for(t, 4) : floating ? emu::rtol_for(t, 0.5) : 0;
          dispatch(t, [&](auto tag) {
            using T = typename decltype(tag)::type;
            const std::string what = "binary " + std::to_string(op);
            if (compare)
              check_map<bool, T, T>(what, compare_fn<T>(o), want, {x, y}, 0);
            else
              check_map<T, T, T>(what, binary_fn<T>(o, 0.5), want, {x, y}, tol);
          });
        }
      }
    }
}

TEST_CASE("map kernels: bias_gelu and its gradient, where") {
  for (DType t : emu::floating_dtypes())
    for (bool tanh : {false, true}) {
      const Tensor x = emu::with_edges({37, 33}, t, -5, 5, 3), g = emu::uniform({37, 33}, t, -1, 1, 4);
      const Tensor bias = emu::uniform({33}, t, -1, 1, 5).expand({37, 33});
      const Tensor want = empty({37, 33}, t), grad = empty({37, 33}, t);
      cpu(&kernels::Backend::bias_gelu, x, bias, Out(want), tanh);
      cpu(&kernels::Backend::bias_gelu_backward, g, x, bias, Out(grad), tanh);
      dispatch_floating(t, "test", [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = opmath_t<T>;
        check_map<T, T, T>("bias_gelu", BiasGelu<A>{tanh}, want, {x, bias}, emu::rtol_for(t, 4));
        check_map<T, T, T, T>("bias_gelu_backward", BiasGeluGrad<A>{tanh}, grad, {g, x, bias}, emu::rtol_for(t, 4));
      });
    }
  for (DType t : {kFloat32, kBFloat16, kInt64, kBool}) {
    const Tensor cond = emu::ints({65, 33}, kBool, 0, 2, 6), a = emu::ints({65, 33}, t, 0, 2, 7);
    const Tensor b = emu::ints({33}, t, 0, 2, 8).expand({65, 33});
    const Tensor want = empty({65, 33}, t);
    cpu(&kernels::Backend::where, cond, a, b, Out(want));
    dispatch(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      check_map<T, bool, T, T>("where", Select{}, want, {cond, a, b}, 0);
    });
  }
}

// Matrix products (kernels/*/matmul.*): matmul in every rank combination with batch broadcasting,
// and linear.
#include "ops/op_case.h"

using namespace mg;
using namespace mg::optest;

namespace {

// cuBLAS and the cpu sum in other orders (16-bit types round the float32 sum once, on both).
Tol gemm_tol(DType t, const std::string&) {
  return t == kFloat32 ? Tol{1e-4, 1e-4} : t == kFloat64 ? Tol{1e-10, 1e-10} : Tol{2e-2, 2e-2};
}

// a [M, K] times b [K, N] in double.
V product(const V& a, const V& b, size_t M, size_t K, size_t N) {
  V out(M * N, 0.0);
  for (size_t i = 0; i < M; ++i)
    for (size_t k = 0; k < K; ++k)
      for (size_t j = 0; j < N; ++j) out[i * N + j] += a[i * K + k] * b[k * N + j];
  return out;
}

// Over a [P, Q] batch, out[p, q] = a[ia(p, q)] @ b[ib(p, q)] in double, matrices numbered row-major.
using BatchIndex = std::function<size_t(size_t, size_t)>;
Formula batched_product(size_t P, size_t Q, size_t M, size_t K, size_t N, BatchIndex ia, BatchIndex ib) {
  return [=](const std::vector<V>& in) {
    V out;
    for (size_t p = 0; p < P; ++p)
      for (size_t q = 0; q < Q; ++q) {
        const V a(in[0].begin() + long(ia(p, q) * M * K), in[0].begin() + long((ia(p, q) + 1) * M * K));
        const V b(in[1].begin() + long(ib(p, q) * K * N), in[1].begin() + long((ib(p, q) + 1) * K * N));
        const V c = product(a, b, M, K, N);
        out.insert(out.end(), c.begin(), c.end());
      }
    return std::vector<V>{out};
  };
}
BatchIndex same(size_t Q) {  // an operand with the whole [P, Q] batch
  return [Q](size_t p, size_t q) { return p * Q + q; };
}

const V kA = {1, 2, 3, 4}, kB = {5, 6, 7, 8};  // [2, 2]
Input small(const Shape& s) { return U(s, -0.5, 0.5); }

}  // namespace

MG_OP_CASES(matmul) {
  call([](const Tensors& x, const Args&) { return mg::matmul(x[0], x[1]); });
  defaults().cuda_tolerance(gemm_tol);
  add_case("matmul_dot", {U({7}), U({7})});
  add_case("matmul_vec_mat", {U({5}), U({5, 3})});
  add_case("matmul_mat_vec", {U({3, 5}), U({5})});
  add_case("matmul_mat_mat", {U({3, 5}), U({5, 4})});
  add_case("matmul_transposed", {U({5, 3}).t(), U({4, 5}).t()});
  add_case("matmul_batched", {U({2, 3, 5}), U({2, 5, 4})});
  add_case("matmul_batched_broadcast", {U({2, 1, 3, 5}), U({3, 5, 4})});
  add_case("matmul_mat_batched", {U({3, 5}), U({2, 5, 4})});
  add_case("matmul_vec_batched", {U({5}), U({2, 5, 4})});
  add_case("matmul_batched_vec", {U({2, 3, 5}), U({5})});
  add_case("matmul_batched_mat", {U({2, 3, 4}), U({4, 2})});
  add_case("matmul_batched_transposed", {U({2, 3, 4}), U({2, 3, 4}).t(1, 2)});
  add_case("matmul_broadcast_batch_shape", {U({3, 1, 2, 4}), U({5, 4, 6})});
  add_case("matmul_values", {Vals(kA, {2, 2}), Vals(kB, {2, 2})}).expect({{19, 22, 43, 50}});
  add_case("matmul_values_transposed", {Vals(kA, {2, 2}).t(), Vals(kB, {2, 2})}).expect({{26, 30, 38, 44}});
  add_case("matmul_values_dot", {Vals({1, 2}), Vals({3, 4})}).expect({{11}});  // 1-d @ 1-d: 0-d
  add_case("matmul_values_vec_mat", {Vals({1, 1}), Vals(kB, {2, 2})}).expect({{12, 14}});
  add_case("matmul_values_mat_vec", {Vals(kA, {2, 2}), Vals({1, -1})}).expect({{-1, -1}});
  add_case("matmul_values_batch_eye", {Vals({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}), Vals({1, 0, 0, 1}, {2, 2})})
      .expect({{1, 2, 3, 4, 5, 6, 7, 8}});
  add_case("matmul_values_batch", {Vals({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}), Vals(kA, {2, 2})})
      .expect({{7, 10, 15, 22, 23, 34, 31, 46}});
  add_case("matmul_values_k0", {Vals({}, {2, 0}), Vals({}, {0, 2})}).expect({{0, 0, 0, 0}});
  add_case("matmul_int32", {IntVals(kA, {2, 2}).as(kInt32), IntVals(kB, {2, 2}).as(kInt32)}).expect({{19, 22, 43, 50}});
  // Half: products and sums in float, one rounding at the end (a half accumulator stalls at 2048).
  add_case("matmul_float16_4096",
           {Vals(V(4096, 1.0), {1, 4096}).as(kFloat16), Vals(V(4096, 1.0), {1, 4096}).as(kFloat16).t()})
      .expect({{4096}}, {0, 0})
      .not_torch("PyTorch 1.13 has no float16 matmul on the cpu")
      .check(outputs_of_dtype(kFloat16));
  // The cpu's threaded GEMM blocks against the product in double: split by rows (M > N) and by
  // columns. The formula sees the second input as the [K, N] view it is.
  for (bool by_rows : {true, false}) {
    const size_t M = by_rows ? 300 : 130, N = by_rows ? 130 : 300, K = 70;
    add_case(by_rows ? "matmul_300x70x130" : "matmul_130x70x300",
             {U({int64_t(M), 70}, -1.7, 1.7), U({int64_t(N), 70}, -1.7, 1.7).t()})
        .big()
        .expect([=](const std::vector<V>& in) { return std::vector<V>{product(in[0], in[1], M, K, N)}; }, {0, 1e-4});
  }
  // The gpu's layouts, every dtype (cuBLAS batched, transposed, broadcast, strided, vector).
  add_case("matmul_bmm", {small({5, 37, 29}), small({5, 29, 43})}).big();
  add_case("matmul_bmm_transposed", {small({5, 29, 43}).t(1, 2), small({5, 37, 29}).t(1, 2)}).big();
  add_case("matmul_broadcast_rhs", {small({5, 37, 29}), small({29, 43})}).big();
  add_case("matmul_vector_column", {small({29, 43}).select(1, 3), small({29, 43})}).big();
  // Operands with neither stride 1 are copied contiguous inside the kernel, on the cpu and on cuda,
  // as Workspace; meta books the same copies (the kernel's scratch function), so the ledgers agree.
  add_case("matmul_strided_rows", {small({5, 37, 29}).slice(2, 0, 29, 2), small({29, 43}).slice(0, 0, 29, 2)}).big();
  // Attention's heads: batch dims that do not merge ([B, T, H, D] viewed as [B, H, T, D]). Small
  // products copy them (a transposed matrix, k^T, in its own orientation, then used transposed);
  // large enough ones run one kernel call per index of the outer batch dims, as does a broadcast
  // operand (stride 0 in one batch dim) on either side.
  add_case("matmul_heads_q_kT", {small({2, 7, 3, 5}).permute({0, 2, 1, 3}), small({2, 6, 3, 5}).permute({0, 2, 3, 1})})
      .big()
      .expect(batched_product(2, 3, 7, 5, 6, same(3), same(3)), {0, 1e-5});
  add_case("matmul_heads_qT_g", {small({2, 7, 3, 5}).permute({0, 2, 3, 1}), small({2, 3, 7, 4})})
      .big()
      .expect(batched_product(2, 3, 5, 7, 4, same(3), same(3)), {0, 1e-5});
  add_case("matmul_heads_looped",
           {small({2, 128, 3, 96}).permute({0, 2, 1, 3}), small({2, 128, 3, 96}).permute({0, 2, 3, 1})})
      .big()
      .expect(batched_product(2, 3, 128, 96, 128, same(3), same(3)), {0, 1e-5});
  // A transposed left operand (q^T of split heads) against a contiguous one, and two outer dims.
  add_case("matmul_heads_qT_looped", {small({2, 128, 3, 64}).permute({0, 2, 3, 1}), small({2, 3, 128, 128})})
      .big()
      .expect(batched_product(2, 3, 64, 128, 128, same(3), same(3)), {0, 1e-5});
  add_case("matmul_two_outer_dims_looped",
           {small({2, 3, 128, 4, 64}).permute({0, 1, 3, 2, 4}), small({2, 3, 4, 64, 128})})
      .big()
      .expect(batched_product(6, 4, 128, 64, 128, same(4), same(4)), {0, 1e-5});
  add_case("matmul_broadcast_looped", {small({2, 1, 96, 128}), small({3, 128, 96})})
      .big()
      .expect(batched_product(
                  2, 3, 96, 128, 96, [](size_t p, size_t) { return p; }, [](size_t, size_t q) { return q; }),
              {0, 1e-5});
  add_case("matmul_int64_bmm", {Ints({3, 7, 5}, -4, 4), Ints({3, 5, 6}, -4, 4)}).big();
  add_case("matmul_k0", {U({4, 0}), U({0, 3})});
  // float32 on TF32 tensor cores when allowed (10-bit mantissa inputs, float32 accumulation).
  add_case("matmul_tf32", {U({256, 512}, -1.7, 1.7), U({512, 128}, -1.7, 1.7)})
      .big()
      .only({kFloat32})
      .with_tf32()
      .cuda_tolerance([](DType, const std::string&) {
        return Tol{1e-2, 5e-2};
      });
}

MG_OP_CASES(linear) {  // x W^T + b
  call([](const Tensors& x, const Args&) { return mg::linear(x[0], x[1], optional_input(x, 2)); });
  defaults().cuda_tolerance(gemm_tol);
  add_case("linear_bias", {U({4, 7}), U({5, 7}), U({5})});
  add_case("linear_no_bias", {U({4, 7}), U({5, 7})});
  add_case("linear_3d", {U({2, 3, 7}), U({5, 7}), U({5})});
  add_case("linear_transposed_input", {U({7, 4}).t(), U({5, 7}), U({5})});
  add_case("linear_transposed_weight", {U({3, 4}), U({4, 5}).t(), U({5})});
  add_case("linear_3d_no_bias", {U({2, 3, 4}), U({5, 4})});
  const Input w = Vals({1, 0, 0, 1, 1, 1}, {3, 2});
  add_case("linear_values", {Vals(kA, {2, 2}), w, Vals({0.5, 0, -1})}).expect({{1.5, 2, 2, 3.5, 4, 6}});
  add_case("linear_values_no_bias", {Vals(kA, {2, 2}), w}).expect({{1, 2, 3, 3, 4, 7}});
  add_case("linear_big", {small({5, 37, 29}), small({19, 29}), U({19}, -1.7, 1.7)}).big();
}

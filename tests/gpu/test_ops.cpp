// The cuda mode of the op case list (tests/ops/cases_*.cpp, whose MG_OP_CASES blocks register
// "cuda: <op> matches the cpu" here): every case of the op on cuda against the cpu, for every
// combination of the kernel variants it runs through and every floating dtype of the case. Outputs
// within the case's tolerance (integers and bools exactly), then the gradient of every input under
// the same upstream gradient, within 4x that: backward sums over more terms than forward.
#include <set>

#include "gpu_util.h"

namespace mg::optest {

namespace {

// TF32 on for the case, off again however the case ends.
struct Tf32For {
  explicit Tf32For(bool on) { cuda::set_allow_tf32(on); }
  ~Tf32For() { cuda::set_allow_tf32(false); }
};

void run_on_both(const Case& c, DType t, const std::string& variant) {
  const Device gpu = cuda_device(0);
  Tf32For tf32(c.tf32);
  Tensors cpu_leaves = make_leaves(c, t, kCPU, true), gpu_leaves = make_leaves(c, t, gpu, true);
  Tensors cpu_out = forward(c, cpu_leaves), gpu_out = forward(c, gpu_leaves);
  const Tol tol = c.cuda_tol ? c.cuda_tol(t, variant) : tol_for(t);
  REQUIRE(gpu_out.size() == cpu_out.size());
  for (size_t i = 0; i < cpu_out.size(); ++i) {
    CHECK_MESSAGE(gpu_out[i].device() == gpu, "output ", i, " is on ", gpu_out[i].device());
    expect_close(gpu_out[i], cpu_out[i], tol, "output " + std::to_string(i));
  }
  if (backward(cpu_out, upstream_for(c, cpu_out, kCPU))) {
    REQUIRE(backward(gpu_out, upstream_for(c, gpu_out, gpu)));
    for (size_t i = 0; i < cpu_leaves.size(); ++i) {
      if (!cpu_leaves[i].requires_grad()) continue;
      REQUIRE_MESSAGE(gpu_leaves[i].grad().defined(), "no cuda gradient for input ", i);
      expect_close(gpu_leaves[i].grad(), cpu_leaves[i].grad(), scaled(tol, 4),
                   "gradient of input " + std::to_string(i));
    }
  }
}

}  // namespace

void check_cuda(const std::string& op_name) {
  OpDef& op = op_named(op_name);
  for (const VariantSelection& selection : variant_selections(op.variant_ops())) {
    for (const auto& [kernel, variant] : selection) cuda::set_kernel_variant(kernel, variant);
    const std::string variant = variant_label(selection);
    for (const Case& c : op.cases())
      for (DType t : c.run_dtypes()) {
        INFO("case ", c.name, " (", dtype_name(t), variant.empty() ? "" : ", variant ", variant, ")");
        run_on_both(c, t, variant);
      }
  }
  for (const std::string& k : op.variant_ops())
    if (!cuda::kernel_variants(k).empty()) cuda::set_kernel_variant(k, cuda::kernel_variants(k).front());
}

}  // namespace mg::optest

TEST_CASE("cuda: every kernel with variants runs through some op of the case list [no-gpu]") {
  std::set<std::string> covered;
  for (mg::optest::OpDef* op : mg::optest::all_ops())
    for (const std::string& k : op->variant_ops()) covered.insert(k);
  for (const std::string& k : mg::cuda::kernel_ops())
    CHECK_MESSAGE(covered.count(k), "the variants of ", k, " are not tested: no op of tests/ops lists them");
}

// One thread's GEMM (kernels/cpu/gemm.h): matmul's kernel variants and the libraries behind them,
// which ISA level each runs here, what "auto" picks, the calls into oneDNN (dnnl_sgemm) and OpenBLAS
// (cblas), and Eigen for the rest.
//
// "auto" decides from what the libraries report, the CPU's vendor and the product's shape, and from a
// table committed with the measurements that justify it, never from timings taken by the process: the
// same machine and build pick the same library in every process, so a resumed run, or one rank of a
// data-parallel run, computes the same sums as one uninterrupted process (a calibration that timed
// candidates, as cuDNN's benchmark mode does, could pick differently from one process to the next).
#include <algorithm>
#include <array>
#include <climits>
#include <type_traits>

#include <Eigen/Core>
#ifdef MG_WITH_OPENBLAS
#include <cblas.h>
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);
#endif
#ifdef MG_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <memgrad/core/cpu_isa_impl.h>
#include <memgrad/core/variants_impl.h>
#include <memgrad/kernels/blas_layout.h>
#include <memgrad/kernels/cpu/gemm.h>

namespace mg::cpu {

namespace {

template <class A>
using RowMat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class A, int Order>
using MatMap = Eigen::Map<const Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Order>, 0, Eigen::OuterStride<>>;

const KernelVariant<Gemm> kGemm(DeviceType::CPU, "matmul", {
#if defined(MG_WITH_ONEDNN) || defined(MG_WITH_OPENBLAS)
  {Gemm::Auto, "auto"},
#endif
#ifdef MG_WITH_ONEDNN
      {Gemm::OneDNN, "onednn"},
#endif
#ifdef MG_WITH_OPENBLAS
      {Gemm::OpenBLAS, "openblas"},
#endif
      {Gemm::Eigen, "eigen"},
});

// Below this inner size Eigen compiled for the CPU's level matches the libraries (bench_gemm, one core,
// AVX-512: K = 10, the MLP's 1024 -> 10 layer's input gradient, 96 GFLOP/s against OpenBLAS's 103 and
// oneDNN's 83); from K = 64 on the libraries win every step shape. Compiled for the baseline, as a
// default build compiles this file, Eigen reached 29 there.
constexpr int64_t kEigenMaxInner = 15;

// The level of the code Eigen runs: what this file was compiled for (once, at the build's base level).
constexpr CpuIsa kCompiledIsa = detail::compiled_cpu_isa();

// "auto"'s table: the classes of product for which a CPU's measured rates made another library than
// the enum's order the faster one, keyed by the CPU's vendor and the level of the code the libraries
// run (the best level any offers for float32). No row: the enum's order. The rates are bench_gemm_libs's
// (bench/run_gemm_libs.sh): every library on the products of bench/compare's six training steps, one
// thread's share of each as matmul splits it over two threads. bench/results/gemm_libs_zen4_2026-12-07.md
// has every library's rates on a Zen 4 at both levels; bench/RESULTS.md (issue 46) what `auto` costs
// against the fastest library per shape: 0.2-1.6% more at AVX-512, 1-5% at AVX2.
struct GemmRow {
  bool amd;
  CpuIsa level;
  GemmClass cls;
  Gemm library;
};
constexpr GemmRow kTable[] = {
    // AMD at AVX2: measured on a Zen 4 with every library held to its AVX2 code (oneDNN 2.6.3
    // ONEDNN_MAX_CPU_ISA=AVX2, OpenBLAS 0.3.21 core Haswell), the proxy for Zen 3, whose whole steps ran
    // faster on OpenBLAS too (the gpt-512: 495 ms a step against oneDNN's 584-595). oneDNN's
    // AVX2 GEMM ran the weight gradients of 1024 and 2048 rows at 37-89 GFLOP/s against OpenBLAS's
    // 68-93 (the LM heads' at half OpenBLAS's rate), and products of 256 rows at 52-96 against 67-92; it
    // stays ahead on the rest (attention's products by 5-15%). At AVX-512 oneDNN led (or tied) on
    // nearly every shape, on Zen 4 and Zen 5: no row.
    {true, CpuIsa::AVX2, GemmClass::WeightGradient, Gemm::OpenBLAS},
    {true, CpuIsa::AVX2, GemmClass::FewRows, Gemm::OpenBLAS},
};

bool amd_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

#ifdef MG_WITH_OPENBLAS
// OpenBLAS's cores by the level of their GEMM kernels (0.3.21's DYNAMIC_ARCH names); any other
// core (Prescott, Core2, Nehalem, Sandybridge, ...) runs SSE or AVX kernels: the baseline here.
CpuIsa openblas_level(const std::string& core) {
  for (const char* c : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == c) return CpuIsa::AVX512;
  for (const char* c : {"Haswell", "Zen"})
    if (core == c) return CpuIsa::AVX2;
  return CpuIsa::Baseline;
}
#endif

#ifdef MG_WITH_ONEDNN
// dnnl_cpu_isa_t values are bit masks that contain the masks of the ISAs below them.
CpuIsa onednn_level(dnnl_cpu_isa_t isa) {
  if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core) return CpuIsa::AVX512;
  if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2) return CpuIsa::AVX2;
  return CpuIsa::Baseline;
}
const char* onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}
#endif

#ifdef MG_WITH_OPENBLAS
// Whether the OpenBLAS loaded is its pthreads build; then its own threads are turned off, once, as
// libmemgrad loads (after OpenBLAS: it depends on it). Debian installs the pthreads, OpenMP and serial
// builds under one soname, libopenblas.so.0, chosen by update-alternatives: the pthreads build (priority
// 100) replaces the OpenMP one we link (95) as soon as it is installed (README advised it for Debian's
// torch until issue 46). Its threads are a pool of its own: called from the threads of matmul's split it hands
// each product's work to them, three threads or more on two cores, the idle ones spinning on
// sched_yield (issue 46: a GPT step's CPU time 1.4 times as long at AVX-512, 3.1 times at AVX2). The
// OpenMP build runs single-threaded inside our parallel regions by itself; its openblas_set_num_threads
// would set OpenMP's own thread count, so it is left alone.
const bool kOpenblasThreads = [] {
  if (openblas_get_parallel() != OPENBLAS_THREAD) return false;
  openblas_set_num_threads(1);  // gemm_serial: one thread's GEMM
  return true;
}();
#endif

std::string describe(const char* what, CpuIsa level) {
  std::string s = std::string(what) + " (" + to_string(level);
  if (level < cpu_isa()) s += std::string(", below this CPU's ") + to_string(cpu_isa());
  return s + ")";
}

std::vector<GemmLibrary> find_libraries() {
  std::vector<GemmLibrary> libs;
#ifdef MG_WITH_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const std::string what = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                           std::to_string(v->patch) + ", " + onednn_isa_name(isa);
  libs.push_back({Gemm::OneDNN, "onednn", onednn_level(isa), describe(what.c_str(), onednn_level(isa))});
#endif
#ifdef MG_WITH_OPENBLAS
  const std::string core = openblas_get_corename(), config = openblas_get_config();
  const std::string version = config.substr(0, config.find(' ', config.find(' ') + 1));  // "OpenBLAS 0.3.21"
  const std::string flavour = kOpenblasThreads ? ", pthreads build: its own threads off" : "";
  libs.push_back({Gemm::OpenBLAS, "openblas", openblas_level(core),
                  describe((version + flavour + ", core " + core).c_str(), openblas_level(core))});
#endif
  const std::string eigen = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) +
                            "." + std::to_string(EIGEN_MINOR_VERSION);
  libs.push_back({Gemm::Eigen, "eigen", kCompiledIsa, describe(eigen.c_str(), kCompiledIsa)});
  return libs;
}

// The first library in the enum's order among those of the highest level any offers for `dtype`.
const GemmLibrary& best_library(DType dtype) {
  const GemmLibrary* best = nullptr;
  for (const GemmLibrary& l : gemm_libraries())
    if ((l.library != Gemm::OneDNN || dtype == kFloat32) && (!best || l.level > best->level)) best = &l;
  return *best;
}

const GemmLibrary* find_library(Gemm g) {
  for (const GemmLibrary& l : gemm_libraries())
    if (l.library == g) return &l;
  return nullptr;
}

// What "auto" runs a product of `dtype` and class c on; tiny: an inner size up to kEigenMaxInner.
Gemm auto_library(DType dtype, GemmClass c, bool tiny) {
  const GemmLibrary& best = best_library(dtype);
  if (tiny && gemm_libraries().back().level >= best.level) return Gemm::Eigen;
  const GemmLibrary* preferred = dtype == kFloat32 ? find_library(gemm_preferred(c)) : nullptr;
  return preferred && preferred->level == best.level ? preferred->library : best.library;
}

constexpr GemmClass kClasses[] = {GemmClass::Small, GemmClass::WeightGradient, GemmClass::FewRows, GemmClass::Large};

// "auto"'s detail: the library of large products, then the classes that run elsewhere.
std::string describe_auto() {
  const GemmLibrary* large = find_library(auto_library(kFloat32, GemmClass::Large, false));
  std::string s = large->name;
  for (const GemmLibrary& l : gemm_libraries()) {
    std::string classes;
    for (GemmClass c : kClasses)
      if (c != GemmClass::Large && l.library != large->library && auto_library(kFloat32, c, false) == l.library)
        classes += std::string(classes.empty() ? "" : ", ") + to_string(c);
    if (!classes.empty()) s += std::string(", ") + l.name + " for " + classes;
  }
  if (std::any_of(std::begin(kClasses), std::end(kClasses),
                  [](GemmClass c) { return gemm_preferred(c) != Gemm::Auto; }))
    s += std::string(" (table: ") + (amd_cpu() ? "amd " : "") + to_string(best_library(kFloat32).level) + ")";
  const GemmLibrary& d = best_library(kFloat64);
  if (d.library != large->library) s += std::string(" (float64: ") + d.name + ")";
  if (auto_library(kFloat32, GemmClass::Large, true) == Gemm::Eigen)
    s += ", eigen for inner sizes up to " + std::to_string(kEigenMaxInner);
  return s;
}

const bool kDescribed = [] {
  detail::describe_kernel_variants(DeviceType::CPU, "matmul", [](const std::string& variant) -> std::string {
    if (variant == "auto") return describe_auto();
    for (const GemmLibrary& l : gemm_libraries())
      if (variant == l.name) return l.detail;
    return "";
  });
  return true;
}();

// Whether a library takes a stored rows x cols row-major matrix with leading dimension ld as it is
// (kernels::blas_layout, which also sets ld for a single row); Eigen maps the others. OpenBLAS's
// sizes are ints.
bool library_leading_dim(int64_t rows, int64_t cols, int64_t& ld, int64_t limit) {
  const kernels::BlasLayout l = kernels::blas_layout(rows, cols, ld, 1);
  ld = l.ld;
  return l.kind == kernels::BlasLayout::Rows && std::max({rows, cols, ld}) <= limit;
}

}  // namespace

// (The operands are unused in a build with neither library.)
template <class A>
bool library_gemm(Gemm library, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, [[maybe_unused]] A alpha,
                  [[maybe_unused]] const A* a, int64_t lda, [[maybe_unused]] const A* b, int64_t ldb,
                  [[maybe_unused]] A beta, [[maybe_unused]] A* c, int64_t ldc) {
  const int64_t limit = library == Gemm::OpenBLAS ? INT32_MAX : INT64_MAX;
  if (!library_leading_dim(trans_a ? k : m, trans_a ? m : k, lda, limit) ||
      !library_leading_dim(trans_b ? n : k, trans_b ? k : n, ldb, limit) || !library_leading_dim(m, n, ldc, limit))
    return false;
#ifdef MG_WITH_ONEDNN
  if constexpr (std::is_same_v<A, float>)
    if (library == Gemm::OneDNN)
      return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) ==
             dnnl_success;
#endif
#ifdef MG_WITH_OPENBLAS
  if (library == Gemm::OpenBLAS) {
    const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<A, float>)
      cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
    else
      cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
    return true;
  }
#endif
  return false;
}
template bool library_gemm<float>(Gemm, bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                                  const float*, int64_t, float, float*, int64_t);
template bool library_gemm<double>(Gemm, bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                   const double*, int64_t, double, double*, int64_t);

const std::vector<GemmLibrary>& gemm_libraries() {
  static const std::vector<GemmLibrary> libs = find_libraries();
  return libs;
}

GemmClass gemm_class(bool trans_a, int64_t m, int64_t n, int64_t k) {
  if (m * n * k <= (int64_t(1) << 21)) return GemmClass::Small;
  if (trans_a && k >= 512) return GemmClass::WeightGradient;
  return m <= 256 ? GemmClass::FewRows : GemmClass::Large;
}

const char* to_string(GemmClass c) {
  switch (c) {
    case GemmClass::Small:
      return "small products";
    case GemmClass::WeightGradient:
      return "weight gradients";
    case GemmClass::FewRows:
      return "products of few rows";
    default:
      return "large products";
  }
}

Gemm gemm_preferred(GemmClass c) {
  static const bool amd = amd_cpu();
  const CpuIsa level = best_library(kFloat32).level;
  for (const GemmRow& r : kTable)
    if (r.amd == amd && r.level == level && r.cls == c) return r.library;
  return Gemm::Auto;
}

Gemm gemm_library(DType dtype, bool trans_a, int64_t m, int64_t n, int64_t k) {
  Gemm v = kGemm.get();
  if (v == Gemm::OneDNN && dtype != kFloat32) v = Gemm::Auto;
  if (v != Gemm::Auto) return v;
  // [dtype is float64][class][inner size up to kEigenMaxInner], decided once.
  static const auto choice = [] {
    std::array<std::array<std::array<Gemm, 2>, std::size(kClasses)>, 2> t{};
    for (int f64 = 0; f64 < 2; ++f64)
      for (GemmClass c : kClasses)
        for (int tiny = 0; tiny < 2; ++tiny) t[f64][size_t(c)][tiny] = auto_library(f64 ? kFloat64 : kFloat32, c, tiny);
    return t;
  }();
  return choice[dtype == kFloat64][size_t(gemm_class(trans_a, m, n, k))][k <= kEigenMaxInner];
}

template <class A>
void gemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, A alpha, const A* a, int64_t lda,
                 const A* b, int64_t ldb, A beta, A* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_integral_v<A>) {
    // Integers: row by row, exact in any order (wrapping as the type does). Eigen's blocked products
    // for the four integer types were two thirds of this file's compile time (bench/RESULTS.md, issue
    // 42), for products no training step runs.
    const int64_t bs = trans_b ? ldb : 1;  // b's stride along n
    for (int64_t i = 0; i < m; ++i) {
      A* ci = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) ci[j] = beta == A(0) ? A(0) : A(beta * ci[j]);
      for (int64_t p = 0; p < k; ++p) {
        const A s = A(alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]));
        const A* bp = trans_b ? b + p : b + p * ldb;
        for (int64_t j = 0; j < n; ++j) ci[j] = A(ci[j] + s * bp[j * bs]);
      }
    }
  } else {
    const Gemm library = gemm_library(dtype_of<A>::value, trans_a, m, n, k);
    if (library != Gemm::Eigen &&
        library_gemm<A>(library, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
      return;
    using Stride = Eigen::OuterStride<>;
    Eigen::Map<RowMat<A>, 0, Stride> cm(c, m, n, Stride(ldc));
    auto product = [&](const auto& am, const auto& bm) {
      if (beta == A(0)) return void(cm.noalias() = alpha * am * bm);
      if (beta != A(1)) cm *= beta;
      cm.noalias() += alpha * am * bm;
    };
    auto with_b = [&](const auto& am) {  // a transposed operand is a column-major view of its storage
      if (trans_b)
        product(am, MatMap<A, Eigen::ColMajor>(b, k, n, Stride(ldb)));
      else
        product(am, MatMap<A, Eigen::RowMajor>(b, k, n, Stride(ldb)));
    };
    if (trans_a)
      with_b(MatMap<A, Eigen::ColMajor>(a, m, k, Stride(lda)));
    else
      with_b(MatMap<A, Eigen::RowMajor>(a, m, k, Stride(lda)));
  }
}
// Every dtype matmul dispatches over (the integer ones in the plain loop).
#define MG_GEMM_SERIAL(A)                                                                                             \
  template void gemm_serial<A>(bool, bool, int64_t, int64_t, int64_t, A, const A*, int64_t, const A*, int64_t, A, A*, \
                               int64_t);
MG_GEMM_SERIAL(float)
MG_GEMM_SERIAL(double)
MG_GEMM_SERIAL(int32_t)
MG_GEMM_SERIAL(int64_t)
MG_GEMM_SERIAL(uint8_t)
MG_GEMM_SERIAL(int8_t)
#undef MG_GEMM_SERIAL

}  // namespace mg::cpu

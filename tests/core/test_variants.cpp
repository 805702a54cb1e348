// The kernel-variant registry (core/variants.h) and the CPU matmul variants: each variant on
// every operand layout the kernel distinguishes (row- or column-major views, strides BLAS cannot
// express, broadcast batches, one-row and one-column products, the parallel row and column
// splits) against a float64 product of the same values, with the same ledger whatever the variant.
#include <dirent.h>
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <memgrad/core/variants_impl.h>
#include <memgrad/kernels/cpu/gemm.h>
#include <memgrad/memgrad.h>

namespace {

using mg::DeviceType;
using mg::Tensor;

// The float64 product of a [.., M, K] and b [.., K, N] (same batch), from their values.
std::vector<double> reference(const Tensor& a, const Tensor& b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1), B = a.numel() / std::max<int64_t>(M * K, 1);
  std::vector<double> x = a.contiguous().to_vector<double>(), y = b.contiguous().to_vector<double>(), out(B * M * N);
  for (int64_t s = 0; s < B; ++s)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += x[(s * M + i) * K + k] * y[(s * K + k) * N + j];
        out[(s * M + i) * N + j] = acc;
      }
  return out;
}

struct Layout {
  std::string name;
  std::function<std::pair<Tensor, Tensor>(mg::DType)> make;
};

std::vector<Layout> layouts() {
  auto r = [](mg::Shape s, mg::DType t) { return mg::randn(s).to(t); };
  return {
      {"contiguous",
       [=](auto t) {
         return std::pair{r({5, 7}, t), r({7, 3}, t)};
       }},
      {"a transposed",
       [=](auto t) {
         return std::pair{r({7, 5}, t).t(), r({7, 3}, t)};
       }},
      {"b transposed",
       [=](auto t) {
         return std::pair{r({5, 7}, t), r({3, 7}, t).t()};
       }},
      {"both transposed",
       [=](auto t) {
         return std::pair{r({7, 5}, t).t(), r({3, 7}, t).t()};
       }},
      {"batched, b transposed",
       [=](auto t) {
         return std::pair{r({4, 5, 7}, t), r({4, 3, 7}, t).transpose(1, 2)};
       }},
      {"every other column (copied)",
       [=](auto t) {
         return std::pair{r({5, 14}, t).slice(1, 0, 14, 2), r({7, 3}, t)};
       }},
      {"rows of stride 0 (no BLAS layout)",
       [=](auto t) {
         return std::pair{r({1, 7}, t).expand({5, 7}), r({7, 3}, t)};
       }},
      {"columns of stride 0",
       [=](auto t) {
         return std::pair{r({5, 7}, t), r({7, 1}, t).expand({7, 3})};
       }},
      {"padded rows",
       [=](auto t) {
         return std::pair{r({5, 9}, t).narrow(1, 1, 7), r({7, 12}, t).narrow(1, 2, 3)};
       }},
      {"one row",
       [=](auto t) {
         return std::pair{r({1, 7}, t), r({7, 3}, t)};
       }},
      {"one column",
       [=](auto t) {
         return std::pair{r({5, 7}, t), r({7, 1}, t)};
       }},
      {"inner size 1",
       [=](auto t) {
         return std::pair{r({5, 1}, t), r({1, 3}, t)};
       }},
      {"one row of a transposed",
       [=](auto t) {
         return std::pair{r({7, 1}, t).t(), r({3, 7}, t).t()};
       }},
      {"parallel by rows",
       [=](auto t) {
         return std::pair{r({96, 130}, t), r({70, 130}, t).t()};
       }},
      {"parallel by columns",
       [=](auto t) {
         return std::pair{r({130, 20}, t).t(), r({130, 300}, t)};
       }},
      {"batch split by rows",
       [=](auto t) {
         return std::pair{r({2, 150, 64}, t), r({2, 64, 40}, t)};
       }},
  };
}

}  // namespace

TEST_CASE("kernel variants: the cpu registry") {
  const std::vector<std::string> variants = mg::kernel_variants(DeviceType::CPU, "matmul");
  REQUIRE(!variants.empty());
  CHECK(variants.back() == "eigen");
  CHECK(mg::kernel_variant(DeviceType::CPU, "matmul") == variants.front());
  const std::vector<std::string> ops = mg::kernel_ops(DeviceType::CPU);
  CHECK(std::count(ops.begin(), ops.end(), "matmul") == 1);
  CHECK(mg::kernel_variants(DeviceType::CUDA, "matmul").empty());  // per device type
  mg::set_kernel_variant(DeviceType::CPU, "matmul", "eigen");
  CHECK(mg::kernel_variant(DeviceType::CPU, "matmul") == "eigen");
  CHECK_THROWS_AS(mg::set_kernel_variant(DeviceType::CPU, "matmul", "fastest"), mg::ValueError);
  CHECK_THROWS_AS(mg::set_kernel_variant(DeviceType::CPU, "no_such_kernel", "eigen"), mg::ValueError);
  mg::set_kernel_variant(DeviceType::CPU, "matmul", variants.front());
  CHECK(mg::kernel_variant(DeviceType::CPU, "matmul") == variants.front());
}

TEST_CASE("kernel variants: a kernel's typed handle reads the selection by name") {
  enum class Probe { A, B, C };
  // Offered in another order than the enum's, and without B: the handle maps names, not indices.
  const mg::KernelVariant<Probe> probe(DeviceType::CPU, "typed_probe", {{Probe::C, "c"}, {Probe::A, "a"}});
  CHECK(mg::kernel_variants(DeviceType::CPU, "typed_probe") == std::vector<std::string>{"c", "a"});
  CHECK(probe == Probe::C);  // the first listed is the default
  mg::set_kernel_variant(DeviceType::CPU, "typed_probe", "a");
  CHECK(probe.get() == Probe::A);
  CHECK(probe != Probe::C);
  CHECK_THROWS_AS(mg::set_kernel_variant(DeviceType::CPU, "typed_probe", "b"), mg::ValueError);
  CHECK(probe == Probe::A);
}

TEST_CASE("kernel variants: MG_KERNEL_VARIANTS picks the variant a kernel registers with") {
  // Backends register while the library loads; a kernel registered now reads the variable the same way.
  enum class Probe { A, B, C };
  auto on = [](DeviceType d, std::initializer_list<std::pair<Probe, const char*>> variants) {
    return mg::KernelVariant<Probe>(d, "env_probe", variants).get();
  };
  const std::initializer_list<std::pair<Probe, const char*>> abc = {{Probe::A, "a"}, {Probe::B, "b"}, {Probe::C, "c"}};
  setenv("MG_KERNEL_VARIANTS", "cuda:env_probe=b,cpu:other=c,cpu:env_probe=c", 1);
  CHECK(on(DeviceType::CPU, abc) == Probe::C);
  CHECK(mg::kernel_variant(DeviceType::CPU, "env_probe") == "c");
  CHECK(on(DeviceType::CUDA, {{Probe::A, "a"}, {Probe::B, "b"}}) == Probe::B);
  CHECK(mg::kernel_variant(DeviceType::CUDA, "env_probe") == "b");
  setenv("MG_KERNEL_VARIANTS", "cpu:env_probe=fastest", 1);  // not a variant: said on stderr, default kept
  CHECK(on(DeviceType::CPU, abc) == Probe::A);
  unsetenv("MG_KERNEL_VARIANTS");
  CHECK(on(DeviceType::CPU, abc) == Probe::A);
}

TEST_CASE("kernel variants: every cpu matmul variant on every layout, with the same ledger") {
  mg::GeneratorStateGuard restore;
  mg::NoGradGuard no_grad;
  const std::vector<std::string> variants = mg::kernel_variants(DeviceType::CPU, "matmul");
  for (mg::DType t : {mg::kFloat32, mg::kFloat64, mg::kBFloat16, mg::kInt64})
    for (const Layout& l : layouts()) {
      auto [a, b] = l.make(t == mg::kInt64 ? mg::kFloat32 : t);
      if (t == mg::kInt64) a = (a * 4.0).to(t), b = (b * 4.0).to(t);
      const std::vector<double> want = reference(a, b);
      std::vector<int64_t> peaks, allocs;
      for (const std::string& v : variants) {
        INFO(l.name, ", ", t, ", variant ", v);
        mg::set_kernel_variant(DeviceType::CPU, "matmul", v);
        mg::reset_peak(mg::kCPU);
        const mg::MemoryStats before = mg::memory_stats(mg::kCPU);
        std::vector<double> got = mg::matmul(a, b).to_vector<double>();
        const mg::MemoryStats after = mg::memory_stats(mg::kCPU);
        peaks.push_back(after.peak_requested - before.requested);
        allocs.push_back(after.num_allocs - before.num_allocs);
        REQUIRE(got.size() == want.size());
        const double tol = t == mg::kFloat64 ? 1e-12 : t == mg::kBFloat16 ? 3e-2 : t == mg::kInt64 ? 0 : 1e-5;
        for (size_t i = 0; i < got.size(); ++i)
          REQUIRE_MESSAGE(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])), "element ", i, ": ", got[i],
                          " vs ", want[i]);
      }
      INFO(l.name, ", ", t);
      CHECK(std::count(peaks.begin(), peaks.end(), peaks.front()) == int64_t(peaks.size()));
      CHECK(std::count(allocs.begin(), allocs.end(), allocs.front()) == int64_t(allocs.size()));
    }
  mg::set_kernel_variant(DeviceType::CPU, "matmul", variants.front());
}

// What matmul's "auto" runs on (kernels/cpu/gemm.h): decided from what each library reports, the CPU's
// vendor, the product's class and a committed table, so a test checks the choice, never a timing. The
// ctest entries gemm_fallback_* run this case with a library forced below the CPU
// (OPENBLAS_CORETYPE=Prescott: OpenBLAS's generic SSE3 kernels, as on a CPU newer than its tables;
// ONEDNN_MAX_CPU_ISA=SSE41) and name it in MG_TEST_GEMM_BELOW; gemm_cpu_isa_avx2* lower the CPU's
// level, so that an AVX-512 machine checks the choices of an AVX2 one.
TEST_CASE("gemm: auto never picks a library that runs below another") {
  using mg::cpu::Gemm;
  using mg::cpu::GemmClass;
  // Set by the gemm_* ctest entries (no OPENBLAS_CORETYPE of the environment's own then): the
  // libraries forced below the CPU, or "none".
  const char* env = std::getenv("MG_TEST_GEMM_BELOW");
  const std::string below = env ? env : "";
  const std::vector<mg::cpu::GemmLibrary>& libs = mg::cpu::gemm_libraries();
  REQUIRE(libs.back().library == Gemm::Eigen);
  for (const mg::cpu::GemmLibrary& l : libs) {
    INFO(std::string(l.name), ": ", l.detail, "; cpu ", mg::to_string(mg::cpu_isa()));
    CHECK(mg::kernel_variant_detail(DeviceType::CPU, "matmul", l.name) == l.detail);
    CHECK((l.level < mg::cpu_isa()) == (l.detail.find("below this CPU") != std::string::npos));
    if (!env || l.library == Gemm::Eigen) continue;
    if (below.find(l.name) != std::string::npos) {
      if (mg::cpu_isa() > mg::CpuIsa::Baseline) CHECK(l.level < mg::cpu_isa());  // the fallback took effect
    } else {
      // Unforced, each library runs the CPU's level: OpenBLAS's core was chosen for the ISA before it
      // loaded (core/openblas_defaults.cpp), whatever its tables say of this CPU's family and model.
      CHECK(l.level == mg::cpu_isa());
    }
  }
  if (libs.size() == 1) return;  // built with neither oneDNN nor OpenBLAS: Eigen is matmul's only variant
  mg::set_kernel_variant(DeviceType::CPU, "matmul", "auto");
  auto library = [&](Gemm g) {
    for (const mg::cpu::GemmLibrary& l : libs)
      if (l.library == g) return l;
    FAIL("no library ", int(g));
    return libs.back();
  };
  const mg::cpu::GemmLibrary& eigen = libs.back();
  // One product of each class, as a GPT step's (transposed left operand, m, n, k).
  struct Product {
    GemmClass cls;
    bool trans_a;
    int64_t m, n, k;
  };
  const Product products[] = {{GemmClass::Small, false, 128, 128, 64},             // attention, one head
                              {GemmClass::Small, true, 288, 64, 64},               // a fused attention tile's dK
                              {GemmClass::WeightGradient, true, 2048, 256, 1024},  // lm head dW, half
                              {GemmClass::FewRows, false, 256, 1536, 768},         // 256 tokens' fc2 dx, half
                              {GemmClass::FewRows, true, 10, 1024, 256},           // the MLP head's dW
                              {GemmClass::Large, true, 1536, 768, 256},            // 256 tokens' dW, half
                              {GemmClass::Large, false, 512, 768, 256}};           // 1024 tokens' fwd, half
  for (mg::DType t : {mg::kFloat32, mg::kFloat64}) {
    int64_t best = 0;  // the highest level a library offers for t
    for (const mg::cpu::GemmLibrary& l : libs)
      if (l.library != Gemm::OneDNN || t == mg::kFloat32) best = std::max(best, int64_t(l.level));
    for (const Product& p : products) {
      REQUIRE(mg::cpu::gemm_class(p.trans_a, p.m, p.n, p.k) == p.cls);
      const mg::cpu::GemmLibrary pick = library(mg::cpu::gemm_library(t, p.trans_a, p.m, p.n, p.k));
      INFO(t, ", ", std::string(mg::cpu::to_string(p.cls)), ": auto runs ", std::string(pick.name), " (", pick.detail,
           ")");
      CHECK(int64_t(pick.level) == best);  // never a library below another
      // The table's library where it runs at that level, else the first of oneDNN, OpenBLAS, Eigen there.
      const Gemm preferred = t == mg::kFloat32 ? mg::cpu::gemm_preferred(p.cls) : Gemm::Auto;
      Gemm first = Gemm::Auto;
      for (const mg::cpu::GemmLibrary& l : libs)
        if (first == Gemm::Auto && int64_t(l.level) == best && (l.library != Gemm::OneDNN || t == mg::kFloat32))
          first = l.library;
      const bool table = preferred != Gemm::Auto && int64_t(library(preferred).level) == best;
      CHECK(pick.library == (table ? preferred : first));
      // Tiny inner sizes: Eigen, where it runs at that level too; else a library of that level.
      const mg::cpu::GemmLibrary tiny = library(mg::cpu::gemm_library(t, p.trans_a, p.m, p.n, 8));
      CHECK((tiny.library == Gemm::Eigen) == (int64_t(eigen.level) >= best));
      CHECK(int64_t(tiny.level) == best);
    }
  }
  // The table's rows: an AMD CPU whose best float32 library runs AVX2 (MG_CPU_ISA=avx2 on an AVX-512
  // one) prefers OpenBLAS for weight gradients and products of few rows (bench/RESULTS.md, issue 46);
  // elsewhere the table has no row yet.
  int64_t best32 = 0;
  for (const mg::cpu::GemmLibrary& l : libs) best32 = std::max(best32, int64_t(l.level));
  const bool amd_avx2 = __builtin_cpu_is("amd") && best32 == int64_t(mg::CpuIsa::AVX2);
  for (GemmClass c : {GemmClass::Small, GemmClass::WeightGradient, GemmClass::FewRows, GemmClass::Large}) {
    const bool openblas = amd_avx2 && (c == GemmClass::WeightGradient || c == GemmClass::FewRows);
    INFO(std::string(mg::cpu::to_string(c)));
    CHECK(mg::cpu::gemm_preferred(c) == (openblas ? Gemm::OpenBLAS : Gemm::Auto));
  }
  const std::string detail = mg::kernel_variant_detail(DeviceType::CPU, "matmul", "auto");
  CHECK(detail.rfind(library(mg::cpu::gemm_library(mg::kFloat32, false, 512, 768, 256)).name, 0) == 0);
  // Products of the classes that may run on another library than the large ones, checked in value.
  for (const Product& p :
       {Product{GemmClass::WeightGradient, true, 512, 64, 600}, Product{GemmClass::FewRows, false, 200, 700, 600},
        Product{GemmClass::FewRows, true, 10, 1024, 300}}) {
    INFO(std::string(mg::cpu::to_string(p.cls)), " ", p.m, " x ", p.n, " x ", p.k);
    REQUIRE(mg::cpu::gemm_class(p.trans_a, p.m, p.n, p.k) == p.cls);
    const Tensor a = p.trans_a ? mg::randn({p.k, p.m}).t() : mg::randn({p.m, p.k}), b = mg::randn({p.k, p.n});
    const std::vector<double> want = reference(a, b);
    const std::vector<float> got = mg::matmul(a, b).to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i)
      REQUIRE_MESSAGE(std::abs(got[i] - want[i]) <= 1e-4 * (1 + std::abs(want[i])), "element ", i);
  }
  mg::set_kernel_variant(DeviceType::CPU, "matmul", mg::kernel_variants(DeviceType::CPU, "matmul").front());
}

namespace {

// Nanoseconds each thread of this process has run, by thread id (/proc/self/task/*/schedstat); empty
// where the kernel keeps no schedstat.
std::map<long, long long> thread_run_ns() {
  std::map<long, long long> r;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return r;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + e->d_name + "/schedstat");
    long long ns = 0;
    if (in >> ns) r[std::atol(e->d_name)] = ns;
  }
  closedir(dir);
  return r;
}

}  // namespace

// matmul splits each product over OpenMP's team and runs one thread's GEMM in each part (gemm_serial):
// no library may hand the work to threads of its own beside the team (issue 46: Debian's pthreads
// OpenBLAS, which update-alternatives puts in place of the OpenMP one we link, ran its own pool inside
// our split, a third thread spinning on two cores). The ctest entry gemm_threads runs it on two threads,
// and gemm_threads_openblas_pthreads with that build of OpenBLAS where it is installed.
TEST_CASE("gemm: no thread outside matmul's team runs a product") {
  mg::NoGradGuard no_grad;
  if (thread_run_ns().empty()) {
    MESSAGE("no /proc/self/task/*/schedstat here: nothing to count");
    return;
  }
  const std::string before = mg::kernel_variant(DeviceType::CPU, "matmul");
  const Tensor a = mg::randn({512, 512}), b = mg::randn({512, 512});
  for (const mg::cpu::GemmLibrary& l : mg::cpu::gemm_libraries()) {
    INFO(std::string(l.name), ": ", l.detail);
    if (l.library == mg::cpu::Gemm::OpenBLAS && std::getenv("MG_TEST_OPENBLAS_PTHREADS"))
      REQUIRE(l.detail.find("pthreads build") != std::string::npos);  // the entry runs the build it names
    mg::set_kernel_variant(DeviceType::CPU, "matmul", l.name);
    mg::matmul(a, b);  // the team started, the library's buffers made
    // A pthreads OpenBLAS's idle threads spin about 0.1 s (2^28 cycles) after they start, then sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::map<long, long long> t0 = thread_run_ns();
    for (int i = 0; i < 8; ++i) mg::matmul(a, b);
    const std::map<long, long long> t1 = thread_run_ns();
    int ran = 0;
    for (const auto& [tid, ns] : t1) {
      auto it = t0.find(tid);
      ran += it == t0.end() || ns > it->second;
    }
    CHECK(ran <= omp_get_max_threads());
  }
  mg::set_kernel_variant(DeviceType::CPU, "matmul", before);
}

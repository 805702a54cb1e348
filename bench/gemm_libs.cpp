// bench_gemm_libs: every GEMM library this build found, called directly (not through memgrad) on the
// compare workloads' float32 products (bench/gemm_shapes.txt), at OMP_NUM_THREADS threads, two ways:
//   split  memgrad's way (kernels/cpu/matmul.cpp): the batch, or else the rows (M >= N) or columns of
//          one product, cut into one part per thread, each a single-threaded call inside a parallel
//          region; with one thread, the whole product on one thread;
//   lib    the library's own threading: each product called outside a parallel region (batched
//          products one after another), the library splitting it over its threads (more than one
//          thread only; libxsmm has no threading of its own and runs split only).
// Libraries: onednn (dnnl_sgemm), openblas (cblas_sgemm), blis (bli_sgemm), libxsmm (a JIT kernel per
// shape; shapes it has no kernel for are "-"), eigen-avx2 / eigen-avx512 (Eigen 3.4 compiled for that
// level, OpenMP). Each library runs the code it chose for this CPU, which the first lines print; to
// run a lower level's code set the libraries' own variables before the program starts
// (ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell LIBXSMM_TARGET=hsw: bench/run_gemm_libs.sh --avx2).
//
//   bench_gemm_libs [--filter REGEX] [--libs a,b] [--modes split,lib] [--reps 7] [--min-ms 20]
//                   [--clock wall|cpu] [--share-of N] [--json FILE]
// --share-of N times, instead of each product, one thread's share of it when N threads split it as
// memgrad does (every thread's share has the same shape up to rounding): run at OMP_NUM_THREADS=1 with
// --clock cpu, the rate each of N threads would reach, measured without the other threads' load.
// Each (shape, library, mode) is timed in --reps blocks of at least --min-ms; the blocks of one shape
// rotate over libraries and modes so that a change of load hits all alike. Prints per shape the
// median GFLOP/s (2 * batch * M * N * K a second: of wall time, or of the process's CPU time divided
// by the threads, --clock cpu, steadier on a loaded machine) and the spread (min-max of the blocks).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#ifdef MG_BENCH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef MG_BENCH_OPENBLAS
#include <cblas.h>
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);
#endif
#ifdef MG_BENCH_XSMM
#include <libxsmm.h>
#endif

#include "gemm_shapes.h"

std::string blis_describe();
void blis_gemm(bool, bool, long, long, long, const float*, long, const float*, long, float*, long, int);
void eigen_gemm_avx2(bool, bool, long, long, long, const float*, long, const float*, long, float*, long);
void eigen_gemm_avx512(bool, bool, long, long, long, const float*, long, const float*, long, float*, long);

namespace {

using mg::bench::GemmShape;

// C = op(A) op(B), row-major: op(A) m x k (A stored k x m when ta), op(B) k x n.
struct Call {
  bool ta, tb;
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int threads;  // the threads the library may use for this call
};

struct Library {
  std::string name, detail;
  std::function<bool(const Call&)> run;  // false: no kernel for this shape
  bool threads_itself;
};

#ifdef MG_BENCH_XSMM
// libxsmm is column-major: C^T (n x m) = op(B)^T op(A)^T, so B is its left operand. One kernel per shape.
bool xsmm(const Call& c) {
  const libxsmm_blasint m = c.n, n = c.m, k = c.k, lda = c.ldb, ldb = c.lda, ldc = c.ldc;
  const float alpha = 1, beta = 0;
  const int flags = (c.tb ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (c.ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
  const libxsmm_smmfunction f = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
  if (!f) return false;
  f(c.b, c.a, c.c);
  return true;
}
#endif

std::vector<Library> libraries() {
  std::vector<Library> libs;
#ifdef MG_BENCH_ONEDNN
  {
    const dnnl_version_t* v = dnnl_version();
    libs.push_back({"onednn",
                    "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                        std::to_string(v->patch) + ", effective ISA mask " +
                        std::to_string(dnnl_get_effective_cpu_isa()),
                    [](const Call& c) {
                      return dnnl_sgemm(c.ta ? 'T' : 'N', c.tb ? 'T' : 'N', c.m, c.n, c.k, 1.f, c.a, c.lda, c.b, c.ldb,
                                        0.f, c.c, c.ldc) == dnnl_success;
                    },
                    true});
  }
#endif
#ifdef MG_BENCH_OPENBLAS
  libs.push_back({"openblas", std::string(openblas_get_config()) + ", core " + openblas_get_corename(),
                  [](const Call& c) {
                    cblas_sgemm(CblasRowMajor, c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans,
                                int(c.m), int(c.n), int(c.k), 1.f, c.a, int(c.lda), c.b, int(c.ldb), 0.f, c.c,
                                int(c.ldc));
                    return true;
                  },
                  true});
#endif
#ifdef MG_BENCH_BLIS
  libs.push_back({"blis", blis_describe(),
                  [](const Call& c) {
                    blis_gemm(c.ta, c.tb, c.m, c.n, c.k, c.a, c.lda, c.b, c.ldb, c.c, c.ldc, c.threads);
                    return true;
                  },
                  true});
#endif
#ifdef MG_BENCH_XSMM
  libxsmm_init();
  libs.push_back(
      {"libxsmm", std::string("libxsmm ") + LIBXSMM_VERSION + ", target " + libxsmm_get_target_arch(), xsmm, false});
#endif
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    libs.push_back({"eigen-avx2", "Eigen 3.4, -mavx2 -mfma",
                    [](const Call& c) {
                      eigen_gemm_avx2(c.ta, c.tb, c.m, c.n, c.k, c.a, c.lda, c.b, c.ldb, c.c, c.ldc);
                      return true;
                    },
                    true});
  const char* isa = std::getenv("MG_CPU_ISA");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && !(isa && std::strcmp(isa, "avx512") != 0))
    libs.push_back({"eigen-avx512", "Eigen 3.4, -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma",
                    [](const Call& c) {
                      eigen_gemm_avx512(c.ta, c.tb, c.m, c.n, c.k, c.a, c.lda, c.b, c.ldb, c.c, c.ldc);
                      return true;
                    },
                    true});
  return libs;
}

struct Operands {
  std::vector<float> a, b, c;
};
Operands operands(const GemmShape& s) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  Operands o{std::vector<float>(size_t(s.batch * s.m * s.k)), std::vector<float>(size_t(s.batch * s.k * s.n)),
             std::vector<float>(size_t(s.batch * s.m * s.n))};
  for (float& x : o.a) x = u(rng);
  for (float& x : o.b) x = u(rng);
  return o;
}

// One product of the shape, all of it or the part [lo, hi) of its rows (by_rows) or columns.
Call part(const GemmShape& s, Operands& o, int64_t b, bool by_rows, int64_t lo, int64_t hi, int threads) {
  const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  const float *a = o.a.data() + b * s.m * s.k, *bb = o.b.data() + b * s.k * s.n;
  float* c = o.c.data() + b * s.m * s.n;
  if (by_rows)
    return {s.ta, s.tb, hi - lo, s.n, s.k, a + lo * (s.ta ? 1 : lda), lda, bb, ldb, c + lo * s.n, s.n, threads};
  return {s.ta, s.tb, s.m, hi - lo, s.k, a, lda, bb + lo * (s.tb ? ldb : 1), ldb, c + lo, s.n, threads};
}

// One thread's share of s when `threads` threads split it as run_once does (the same rule).
GemmShape share(GemmShape s, int threads) {
  if (threads <= 1) return s;
  if (s.batch >= threads) {
    s.batch = (s.batch + threads - 1) / threads;
    return s;
  }
  const int64_t side = s.m >= s.n ? s.m : s.n;
  const int64_t parts = std::min<int64_t>((threads + s.batch - 1) / s.batch, std::max<int64_t>(side / 16, 1));
  (s.m >= s.n ? s.m : s.n) = side / parts;
  return s;
}

// All the shape's products once, in `mode`; false where the library has no kernel for it.
bool run_once(const Library& l, const GemmShape& s, Operands& o, bool split) {
  const int threads = omp_get_max_threads();
  if (!split) {
    bool ok = true;
    for (int64_t b = 0; b < s.batch; ++b) ok = ok && l.run(part(s, o, b, true, 0, s.m, threads));
    return ok;
  }
  // kernels/cpu/matmul.cpp's gemm_batched: the batch over the threads, each product split only when
  // the batch alone cannot keep every thread busy.
  const bool by_rows = s.m >= s.n;
  const int64_t side = by_rows ? s.m : s.n;
  const int64_t parts = threads == 1 || s.batch >= threads
                            ? 1
                            : std::min<int64_t>((threads + s.batch - 1) / s.batch, std::max<int64_t>(side / 16, 1));
  int failed = 0;
#pragma omp parallel for schedule(static) reduction(+ : failed) if (threads > 1)
  for (int64_t t = 0; t < s.batch * parts; ++t) {
    const int64_t b = t / parts, p = t % parts;
    failed += !l.run(part(s, o, b, by_rows, side * p / parts, side * (p + 1) / parts, 1));
  }
  return failed == 0;
}

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Args {
  std::string filter = ".*", libs, modes = "split,lib", clock = "wall", json;
  int reps = 7, share_of = 1;
  double min_ms = 20;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--filter")
      a.filter = v;
    else if (k == "--libs")
      a.libs = v;
    else if (k == "--modes")
      a.modes = v;
    else if (k == "--reps")
      a.reps = std::stoi(v);
    else if (k == "--min-ms")
      a.min_ms = std::stod(v);
    else if (k == "--clock")
      a.clock = v;
    else if (k == "--json")
      a.json = v;
    else if (k == "--share-of")
      a.share_of = std::stoi(v);
    else {
      std::fprintf(stderr, "bench_gemm_libs: unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

bool listed(const std::string& list, const std::string& name) {
  return list.empty() || ("," + list + ",").find("," + name + ",") != std::string::npos;
}

// A column: one library in one mode, its rates per block.
struct Column {
  const Library* lib;
  bool split;
  int calls = 0;  // products per block, so that a block lasts at least min_ms
  std::vector<double> rates;
  std::string label() const { return lib->name + (split ? "" : " (lib)"); }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Times one shape over every column; blocks rotate over the columns.
void time_shape(const GemmShape& s, std::vector<Column>& cols, const Args& a) {
  Operands o = operands(s);
  const int threads = omp_get_max_threads();
  const double divide = a.clock == "cpu" ? threads : 1;
  for (Column& c : cols) {  // warm-up, and the calls a block needs
    c.rates.clear();
    c.calls = 0;
    if (!run_once(*c.lib, s, o, c.split)) continue;
    const auto t0 = std::chrono::steady_clock::now();
    run_once(*c.lib, s, o, c.split);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    c.calls = std::max(1, int(a.min_ms / std::max(ms, 1e-3)));
  }
  for (int r = 0; r < a.reps; ++r)
    for (size_t i = 0; i < cols.size(); ++i) {
      Column& c = cols[(i + size_t(r)) % cols.size()];
      if (c.calls == 0) continue;
      const double c0 = cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      for (int j = 0; j < c.calls; ++j) run_once(*c.lib, s, o, c.split);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double secs = a.clock == "cpu" ? (cpu_seconds() - c0) / divide : wall;
      c.rates.push_back(s.gflop() * c.calls / secs);
    }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const int threads = omp_get_max_threads();
  std::vector<Library> libs;
  for (Library& l : libraries())
    if (listed(a.libs, l.name)) libs.push_back(std::move(l));
  std::vector<Column> cols;
  for (const Library& l : libs)
    for (bool split : {true, false})
      if (listed(a.modes, split ? "split" : "lib") && (split || (threads > 1 && l.threads_itself)))
        cols.push_back({&l, split, 0, {}});
  std::printf("threads %d, clock %s, %d blocks of >= %.0f ms; GFLOP/s median (min-max)\n", threads, a.clock.c_str(),
              a.reps, a.min_ms);
  for (const Library& l : libs) std::printf("  %s: %s\n", l.name.c_str(), l.detail.c_str());
  std::printf("\n| shape | batch x M x K x N |");
  for (const Column& c : cols) std::printf(" %s |", c.label().c_str());
  std::printf("\n|---|---|");
  for (size_t i = 0; i < cols.size(); ++i) std::printf("---:|");
  std::printf("\n");
  std::FILE* json = a.json.empty() ? nullptr : std::fopen(a.json.c_str(), "w");
  if (json)
    std::fprintf(json, "{\"threads\": %d, \"clock\": \"%s\", \"share_of\": %d, \"rates\": {", threads, a.clock.c_str(),
                 a.share_of);
  std::string steps;  // name: [GFLOP of the whole product, times a step runs it]
  const std::regex filter(a.filter);
  bool first = true;
  for (const GemmShape& whole : mg::bench::gemm_shapes()) {
    if (!std::regex_search(whole.name, filter)) continue;
    const GemmShape s = share(whole, a.share_of);
    time_shape(s, cols, a);
    steps += (steps.empty() ? "\"" : ", \"") + s.name + "\": [" + std::to_string(whole.gflop()) + ", " +
             std::to_string(whole.count) + "]";
    std::printf("| %s | %lld x %lld x %lld x %lld%s%s |", s.name.c_str(), (long long)s.batch, (long long)s.m,
                (long long)s.k, (long long)s.n, s.ta ? " (A^T)" : "", s.tb ? " (B^T)" : "");
    for (const Column& c : cols) {
      if (c.rates.empty()) {
        std::printf(" - |");
        continue;
      }
      const auto [lo, hi] = std::minmax_element(c.rates.begin(), c.rates.end());
      std::printf(" %.1f (%.0f-%.0f) |", median(c.rates), *lo, *hi);
      if (json)
        std::fprintf(json, "%s\"%s|%s\": [%.2f, %.2f, %.2f]", first ? "" : ", ", s.name.c_str(), c.label().c_str(),
                     median(c.rates), *lo, *hi);
      first = false;
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (json) std::fprintf(json, "}, \"shapes\": {%s}}\n", steps.c_str()), std::fclose(json);
}

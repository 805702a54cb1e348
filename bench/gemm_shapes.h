// bench/gemm_shapes.txt read into shapes (bench_gemm, bench_gemm_libs): the compare workloads'
// float32 GEMM products. MG_GEMM_SHAPES names another file; MG_GEMM_SHAPES_FILE is the source tree's.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mg::bench {

struct GemmShape {
  std::string name;
  int64_t batch, m, k, n;
  bool ta, tb;    // the left / right operand is a transposed view
  int64_t count;  // times a training step of its workload runs it
  double gflop() const { return 2.0 * double(batch * m * k * n) * 1e-9; }
};

inline std::vector<GemmShape> gemm_shapes() {
  const char* env = std::getenv("MG_GEMM_SHAPES");
  const std::string path = env && *env ? env : MG_GEMM_SHAPES_FILE;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<GemmShape> shapes;
  for (std::string line; std::getline(in, line);) {
    std::istringstream s(line);
    std::string kind, workload, layer;
    if (!(s >> kind) || kind[0] == '#') continue;
    s >> workload >> layer;
    const std::string tag = workload + " " + layer;
    char x = 0;
    int64_t count = 0;
    if (kind == "linear") {
      int64_t rows = 0, i = 0, o = 0;
      std::string nodx;
      s >> rows >> i >> o >> x >> count;
      const bool dx = !(s >> nodx);
      s.clear();
      const std::string name = tag + " " + std::to_string(i) + "->" + std::to_string(o);
      shapes.push_back({name + " fwd", 1, rows, i, o, false, true, count});
      shapes.push_back({name + " dx", 1, rows, o, i, false, false, dx ? count : 0});
      shapes.push_back({name + " dW", 1, o, rows, i, true, false, count});
    } else if (kind == "batched") {
      GemmShape g{tag, 0, 0, 0, 0, false, false, 0};
      int ta = 0, tb = 0;
      s >> g.batch >> g.m >> g.k >> g.n >> ta >> tb >> x >> g.count;
      g.ta = ta, g.tb = tb;
      shapes.push_back(g);
    }
    if (!s || x != 'x') throw std::runtime_error(path + ": bad line: " + line);
  }
  return shapes;
}

}  // namespace mg::bench

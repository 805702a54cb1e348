// The emulated suite's main: doctest, then the coverage line `emulated kernels: N of M`, where M
// counts the __global__ definitions in the sources of kernels/cuda (MG_CUDA_KERNELS_DIR) and N those
// the tests launched. Run without arguments (as ctest runs it), the suite fails when N < M.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "emulated_device.h"

namespace {

// The text with its comments blanked out.
std::string code_of(const std::string& text) {
  std::string out = text;
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    if (out[i] == '/' && out[i + 1] == '/') {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out[i] == '/' && out[i + 1] == '*') {
      while (i + 1 < out.size() && !(out[i] == '*' && out[i + 1] == '/')) out[i++] = ' ';
      if (i + 1 < out.size()) out[i] = out[i + 1] = ' ';
    }
  }
  return out;
}

// The name each `__global__` definition declares (the identifier before the first '(' that does not
// open __launch_bounds__) and its file; `duplicates` counts names defined twice.
std::map<std::string, std::string> kernels_in(const std::filesystem::path& dir, int* duplicates) {
  std::map<std::string, std::string> found;  // name -> file
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string ext = entry.path().extension();
    if (ext != ".cu" && ext != ".cuh") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string code = code_of(text.str());
    for (size_t at = code.find("__global__"); at != std::string::npos; at = code.find("__global__", at + 1)) {
      size_t paren = code.find('(', at);
      while (paren != std::string::npos && paren >= 17 && code.compare(paren - 17, 17, "__launch_bounds__") == 0)
        paren = code.find('(', code.find(')', paren));
      size_t end = paren;
      while (end > at && std::isspace(static_cast<unsigned char>(code[end - 1]))) --end;
      size_t begin = end;
      while (begin > at && (std::isalnum(static_cast<unsigned char>(code[begin - 1])) || code[begin - 1] == '_'))
        --begin;
      const std::string name = code.substr(begin, end - begin);
      if (found.count(name) && ++*duplicates)
        std::fprintf(stderr, "emulated kernels: %s is defined in %s and %s: names must be unique\n", name.c_str(),
                     found[name].c_str(), entry.path().filename().c_str());
      found[name] = entry.path().filename();
    }
  }
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int status = context.run();
  if (context.shouldExit()) return status;
  int duplicates = 0;
  const std::map<std::string, std::string> all = kernels_in(MG_CUDA_KERNELS_DIR, &duplicates);
  const std::set<std::string>& ran = emu::executed_kernels();
  size_t n = 0;
  std::string missing;
  for (const auto& [name, file] : all) {
    if (ran.count(name))
      ++n;
    else
      missing += "\n  " + name + " (" + file + ")";
  }
  std::printf("emulated kernels: %zu of %zu\n", n, all.size());
  if (n < all.size()) std::printf("not run:%s\n", missing.c_str());
  if (argc == 1 && (n < all.size() || duplicates)) status = 1;  // a filtered run need not cover them all
  return status;
}

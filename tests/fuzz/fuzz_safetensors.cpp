// libFuzzer target: load_safetensors on arbitrary bytes. Every outcome must be a tensor dict or an
// mg::Error (never a crash, another exception, a sanitizer report or a hang), and nothing may stay
// allocated in the ledger afterwards. Built with -DMG_FUZZ=ON (clang); tests/fuzz/README.md.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <memgrad/memgrad.h>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = mg_fuzz::scratch_path("safetensors");
  mg_fuzz::write_file(path, data, size);
  const int64_t before = mg::memory_stats(mg::kCPU).allocated;
  try {
    mg::nn::Metadata meta;
    mg::nn::StateDict dict = mg::nn::load_safetensors(path, &meta);
    // What loads must be usable: every tensor's values readable, and saved back loadable.
    for (auto& [name, t] : dict) (void)t.to_vector<double>();
    mg::nn::save_safetensors(dict, path, meta);
    mg_fuzz::require(mg::nn::load_safetensors(path).size() == dict.size(), "a loaded dict did not round-trip");
  } catch (const mg::Error&) {
  }
  mg_fuzz::require(mg::memory_stats(mg::kCPU).allocated == before, "the ledger grew across a load");
  return 0;
}

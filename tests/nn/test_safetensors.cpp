// safetensors: round trips for every dtype, files PyTorch reads, and bad files that raise clear
// errors and leave the model unchanged.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "fixtures.h"

using namespace mg;

namespace {
std::string tmp_path(const std::string& name) { return "/tmp/mg_nn_test_" + std::to_string(::getpid()) + "_" + name; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// The tensors make_nn_fixtures.py --check expects.
nn::StateDict all_dtypes() {
  return {{"f32", arange(6, TensorOptions(kFloat32)).view({2, 3}) / 4.0},
          {"f64", arange(3, TensorOptions(kFloat64)) - 1.5},
          {"f16", tensor(std::vector<float>{0.5f, -2.0f, 65504.0f}, {3}, kFloat16)},
          {"bf16", tensor(std::vector<float>{1.0f, -3.0f}, {2}, kBFloat16)},
          {"i32", tensor(std::vector<int32_t>{7, -8}, {1, 2})},
          {"i64", tensor(std::vector<int64_t>{int64_t(1) << 40, -5}, {2})},
          {"bool", tensor(std::vector<bool>{true, false, true}, {3})},
          {"empty", zeros({0, 4})}};
}

}  // namespace

TEST_CASE("safetensors: every dtype round-trips exactly, with metadata") {
  std::string path = tmp_path("dtypes.safetensors");
  nn::save_safetensors(all_dtypes(), path, {{"format", "pt"}, {"written_by", "memgrad"}});
  nn::Metadata meta;
  auto back = nn::load_safetensors(path, &meta);
  CHECK(meta.at("written_by") == "memgrad");
  auto want = all_dtypes();
  REQUIRE(back.size() == want.size());
  for (auto& [k, v] : want) {
    INFO(k);
    CHECK(back.at(k).dtype() == v.dtype());
    CHECK(equal(back.at(k), v));
  }
  // The header is 8-byte aligned and little-endian.
  std::string bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  CHECK(n % 8 == 0);
  CHECK(bytes[8] == '{');
  // PyTorch reads the file (when python3 with torch is installed).
  std::string cmd = "/usr/bin/python3 -c 'import torch' 2>/dev/null";
  if (std::system(cmd.c_str()) == 0) {
    std::string check = "/usr/bin/python3 " + std::string(MG_FIXTURES_DIR) + "/../make_nn_fixtures.py --check " + path;
    CHECK(std::system(check.c_str()) == 0);
  } else {
    MESSAGE("python3 with torch not found: skipped reading the file in PyTorch");
  }
  std::remove(path.c_str());
}

TEST_CASE("safetensors: saving is atomic and leaves no temporary file") {
  std::string path = tmp_path("atomic.safetensors");
  nn::save_safetensors({{"a", ones({3})}}, path);
  nn::save_safetensors({{"b", zeros({2})}}, path);  // replaces the old file whole
  auto back = nn::load_safetensors(path);
  CHECK(back.size() == 1);
  CHECK(back.count("b") == 1);
  std::ifstream tmp(path + ".tmp." + std::to_string(::getpid()));
  CHECK_FALSE(tmp.good());
  CHECK_THROWS_AS(nn::save_safetensors({{"a", ones({3})}}, "/nonexistent-dir/x.safetensors"), IOError);
  CHECK_THROWS_AS(nn::save_safetensors({{"m", empty({2}, TensorOptions(kMeta))}}, path), MetaTensorError);
  std::remove(path.c_str());
}

TEST_CASE("safetensors: bad files raise IOError and leave the model unchanged") {
  manual_seed(5);
  nn::Linear model(4, 3);
  auto original = model.state_dict();
  std::vector<float> w0 = model.weight.to_vector<float>();
  std::string good = tmp_path("good.safetensors"), bad = tmp_path("bad.safetensors");
  nn::Linear other(4, 3);
  nn::save(other, good);
  std::string bytes = read_file(good);

  auto expect_failure = [&](const std::string& content, const char* needle) {
    write_file(bad, content);
    try {
      nn::load(model, bad);
      FAIL("expected an error containing '" << needle << "'");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
    CHECK(model.weight.to_vector<float>() == w0);
  };
  SUBCASE("truncated data") { expect_failure(bytes.substr(0, bytes.size() - 5), "data bytes"); }
  SUBCASE("truncated header") { expect_failure(bytes.substr(0, 20), "truncated"); }
  SUBCASE("too short") { expect_failure("abc", "truncated"); }
  SUBCASE("corrupted JSON") {
    std::string b = bytes;
    b[9] = '#';
    expect_failure(b, "not JSON");
  }
  SUBCASE("extra bytes") { expect_failure(bytes + "xx", "cover"); }
  SUBCASE("wrong shape") {
    nn::save_safetensors({{"weight", zeros({3, 5})}, {"bias", zeros({3})}}, bad);
    expect_failure(read_file(bad), "expected shape [3, 4], got [3, 5]");
  }
  SUBCASE("wrong dtype") {
    nn::save_safetensors({{"weight", zeros({3, 4}, kFloat64)}, {"bias", zeros({3})}}, bad);
    expect_failure(read_file(bad), "expected dtype float32, got float64");
  }
  SUBCASE("missing and unexpected names") {
    nn::save_safetensors({{"weight", zeros({3, 4})}}, bad);
    expect_failure(read_file(bad), "missing 'bias'");
    nn::save_safetensors({{"weight", zeros({3, 4})}, {"bias", zeros({3})}, {"extra", zeros({1})}}, bad);
    expect_failure(read_file(bad), "unexpected key 'extra'");
  }
  SUBCASE("unsupported dtype") {
    std::string header = R"({"weight":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})";
    std::string len(8, '\0');
    len[0] = char(header.size());
    expect_failure(len + header + "xy", "unsupported dtype");
  }
  SUBCASE("offsets that do not match the shape") {
    std::string header = R"({"weight":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})";
    std::string len(8, '\0');
    len[0] = char(header.size());
    expect_failure(len + header + "abcd", "expected 8 bytes");
  }
  SUBCASE("a good file loads") {
    nn::load(model, good);
    CHECK(model.weight.to_vector<float>() == other.weight.to_vector<float>());
  }
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

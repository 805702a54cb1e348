// Files for the data suite: a fresh folder per test, text files and llm.c token shards written
// byte by byte (little-endian, as llm.c's Python writes them).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace data_test {

// A temporary folder, removed with everything in it when the object goes.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "memgrad-data-XXXXXX").string();
    path = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// A shard: header[0..2] = magic, version, count (the rest zero), then the ids at `width` bytes each.
inline std::string shard_bytes(const std::vector<int64_t>& ids, int32_t magic = 20240520, int32_t version = 1,
                               int width = 2, int64_t count = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic, header[1] = version, header[2] = int32_t(count < 0 ? int64_t(ids.size()) : count);
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  for (int64_t id : ids) bytes.append(reinterpret_cast<const char*>(&id), size_t(width));
  return bytes;
}

}  // namespace data_test

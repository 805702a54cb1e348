// safetensors against files that lie and saves that crash: directories, FIFOs and devices, files
// that shrink while read, repeated JSON keys, shapes whose sizes overflow; and a save that syncs
// the file before the rename and the folder after it, and removes temporary files of dead savers.
//
// This file interposes fsync, rename and pread for the whole test_nn binary (an executable's
// definitions win over libc's, for libmemgrad too); they forward to libc and only record or
// shrink a file while a test asks them to.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "temp_dir.h"

using namespace mg;

namespace {

std::vector<std::string> g_calls;  // fsync and rename calls while g_trace is set
bool g_trace = false;
off_t g_shrink_to = -1;  // >= 0: the next pread first truncates its file to this size

std::string fd_path(int fd) {
  char buf[4096];
  const ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf, sizeof buf - 1);
  return n < 0 ? "?" : std::string(buf, size_t(n));
}

template <class F>
F real(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

ssize_t shrinking_pread(const char* name, int fd, void* buf, size_t n, off_t offset) {
  if (g_shrink_to >= 0) {
    REQUIRE(::truncate(fd_path(fd).c_str(), g_shrink_to) == 0);
    g_shrink_to = -1;
  }
  return real<ssize_t (*)(int, void*, size_t, off_t)>(name)(fd, buf, n, offset);
}

}  // namespace

extern "C" int fsync(int fd) {
  if (g_trace) g_calls.push_back("fsync " + fd_path(fd));
  return real<int (*)(int)>("fsync")(fd);
}
extern "C" int rename(const char* from, const char* to) {
  if (g_trace) g_calls.push_back(std::string("rename ") + from + " " + to);
  return real<int (*)(const char*, const char*)>("rename")(from, to);
}
extern "C" ssize_t pread(int fd, void* buf, size_t n, off_t offset) {
  return shrinking_pread("pread", fd, buf, n, offset);
}
extern "C" ssize_t pread64(int fd, void* buf, size_t n, off_t offset) {
  return shrinking_pread("pread64", fd, buf, n, offset);
}

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A file of the given header and data, with the 8-byte little-endian length before it.
std::string file_with(const std::string& header, const std::string& data = "") {
  std::string len(8, '\0');
  for (size_t i = 0; i < 8; ++i) len[i] = char((header.size() >> (8 * i)) & 0xff);
  return len + header + data;
}

}  // namespace

TEST_CASE("safetensors hostile: only regular files are read; the error names the file") {
  TempDir dir;
  // A directory: the header length came from a failed stream (bad_alloc, length_error or "not JSON").
  expect_error<IOError>([&] { nn::load_safetensors(dir.path); }, {dir.path, "is a folder; expected a regular file"});
  // A FIFO with no writer: opening it must not block, nor reading wait for data.
  const std::string fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  expect_error<IOError>([&] { nn::load_safetensors(fifo); }, {fifo, "is a FIFO"});
  expect_error<IOError>([] { nn::load_safetensors("/dev/zero"); }, {"'/dev/zero'", "is a character device"});
  expect_error<IOError>([&] { nn::load_safetensors(dir / "absent"); }, {"absent", "no such file"});
}

TEST_CASE("safetensors hostile: a file that shrinks while it is read gives the offset of the short read") {
  TempDir dir;
  const std::string path = dir / "x.safetensors";
  nn::save_safetensors({{"a", arange(64, TensorOptions(kFloat32))}}, path);
  const size_t size = size_t(std::ifstream(path, std::ios::binary | std::ios::ate).tellg());
  g_shrink_to = off_t(size - 100);  // the first read (the header length) shrinks the file
  expect_error<IOError>([&] { nn::load_safetensors(path); },
                        {path, "entry 'a'", "ends at offset " + std::to_string(size - 100), "bytes short"});
  g_shrink_to = 4;
  expect_error<IOError>([&] { nn::load_safetensors(path); }, {path, "ends at offset 4", "4 bytes short"});
  CHECK(g_shrink_to == -1);
}

TEST_CASE("safetensors hostile: a key repeated in one JSON object is an error") {
  TempDir dir;
  const std::string path = dir / "dup.safetensors";
  const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"a":)" + entry + R"(,"a":)" + entry + "}", "'a'"},  // used to load the second silently
      {R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", "'dtype'"},
      {R"({"__metadata__":{"k":"1","k":"2"},"a":)" + entry + "}", "'k'"},
      {R"({"__metadata__":{},"__metadata__":{},"a":)" + entry + "}", "'__metadata__'"},
  };
  for (auto& [header, key] : cases) {
    CAPTURE(header);
    write_file(path, file_with(header, "abcd"));
    expect_error<IOError>([&] { nn::load_safetensors(path); }, {path, "the key " + key + " appears twice"});
  }
  // The same key in different objects is fine.
  write_file(path, file_with(R"({"__metadata__":{"a":"x"},"a":)" + entry + "}", "abcd"));
  CHECK(nn::load_safetensors(path).count("a") == 1);
}

TEST_CASE("safetensors hostile: shapes whose sizes overflow are IOErrors naming the file") {
  TempDir dir;
  const std::string path = dir / "shape.safetensors";
  auto header = [](const std::string& shape, const std::string& offsets) {
    return R"({"t":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      // A size above 2^63 - 1 used to become -1 and raise a ShapeError without the file's name.
      {header("[0, 18446744073709551615]", "[0,0]"), "[0,18446744073709551615]"},
      {header("[9223372036854775807, 2]", "[0,0]"), "[9223372036854775807, 2]"},
      {header("[4611686018427387904]", "[0,0]"), "2^64 bytes"},
      {header("[1099511627776, 1099511627776, 1099511627776, 0]", "[0,0]"), "stride"},
      {header("[-1]", "[0,0]"), "[0, 2^63 - 1]"},
      {header("[1.5]", "[0,4]"), "[0, 2^63 - 1]"},
      {header("[1]", "[0,18446744073709551616]"), "data_offsets [begin, end]"},
      {R"({"t":[[[[[[[[[[1]]]]]]]]]})", "nested deeper"},
  };
  for (auto& [h, needle] : cases) {
    CAPTURE(h);
    write_file(path, file_with(h));
    expect_error<IOError>([&] { nn::load_safetensors(path); }, {path, needle});
  }
  // A zero-size tensor with a large (representable) size loads.
  write_file(path, file_with(header("[0, 4611686018427387904]", "[0,0]")));
  CHECK(nn::load_safetensors(path).at("t").shape() == Shape{0, int64_t(1) << 62});
  // A header larger than the format allows is refused before it is read (the file is sparse).
  std::string len(8, '\0');
  const uint64_t claimed = 150'000'000;
  for (size_t i = 0; i < 8; ++i) len[i] = char((claimed >> (8 * i)) & 0xff);
  write_file(path, len);
  REQUIRE(::truncate(path.c_str(), off_t(claimed + 8)) == 0);
  expect_error<IOError>([&] { nn::load_safetensors(path); }, {path, "150000000 bytes", "limit of 100000000"});
}

TEST_CASE("safetensors hostile: a save syncs the file, renames it, then syncs the folder") {
  TempDir dir;
  const std::string path = dir / "state.safetensors", tmp = path + ".tmp." + std::to_string(::getpid());
  g_calls.clear();
  g_trace = true;
  nn::save_safetensors({{"a", ones({3})}}, path);
  g_trace = false;
  CHECK(g_calls == std::vector<std::string>{"fsync " + tmp, "rename " + tmp + " " + path, "fsync " + dir.path});
  CHECK(nn::load_safetensors(path).at("a").to_vector<float>() == std::vector<float>{1, 1, 1});
}

TEST_CASE("safetensors hostile: temporary files of savers that died are removed by the next save") {
  TempDir dir;
  const std::string path = dir / "state.safetensors";
  // A pid that no longer runs: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const std::string dead = path + ".tmp." + std::to_string(child);
  const std::string alive = path + ".tmp." + std::to_string(::getppid());  // a running process
  const std::string other = dir / ("other.safetensors.tmp." + std::to_string(child));
  const std::string not_a_pid = path + ".tmp.backup";
  for (auto& f : {dead, alive, other, not_a_pid}) write_file(f, "partial");
  nn::save_safetensors({{"a", ones({2})}}, path);
  CHECK_FALSE(exists(dead));
  CHECK(exists(alive));      // its owner may still be writing it
  CHECK(exists(other));      // another file's temporary
  CHECK(exists(not_a_pid));  // not named by a save
  CHECK_FALSE(exists(path + ".tmp." + std::to_string(::getpid())));
  // A failed save removes its own temporary file and leaves the old file whole.
  expect_error<IOError>([&] { nn::save_safetensors({{"b", ones({2})}}, dir.path); }, {dir.path});
  CHECK_FALSE(exists(dir.path + ".tmp." + std::to_string(::getpid())));
  CHECK(nn::load_safetensors(path).count("a") == 1);
}

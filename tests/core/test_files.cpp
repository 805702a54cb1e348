// core/files.h: paths written through links and never over special files, and files read without
// blocking on a FIFO.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "temp_dir.h"

using namespace mg;

namespace {

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }
bool is_link(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}
bool is_fifo(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}
// The names in `dir` (to see that no temporary file was left).
int entries(const std::string& dir) {
  int n = 0;
  std::unique_ptr<FILE, int (*)(FILE*)> ls(::popen(("ls -A '" + dir + "'").c_str(), "r"), ::pclose);
  for (char line[4096]; std::fgets(line, sizeof line, ls.get());) ++n;
  return n;
}

}  // namespace

TEST_CASE("files: a write follows a symbolic link, replaces its target whole and keeps the link") {
  TempDir dir, other;
  write(other / "state", "old");
  REQUIRE(::symlink((other / "state").c_str(), (dir / "link").c_str()) == 0);
  REQUIRE(::symlink("link", (dir / "chain").c_str()) == 0);  // relative, and a link to a link
  CHECK(output_file(dir / "chain", "test") == other / "state");
  write_file_atomically(dir / "chain", "new", "test");
  CHECK(is_link(dir / "link"));
  CHECK(is_link(dir / "chain"));
  CHECK(read(other / "state") == "new");
  CHECK(entries(other.path) == 1);  // the temporary file lived beside the target, and is gone
  CHECK(entries(dir.path) == 2);
  // A dangling link: its target is created, in the target's folder.
  REQUIRE(::symlink((other / "new").c_str(), (dir / "dangling").c_str()) == 0);
  write_file_atomically(dir / "dangling", "made", "test");
  CHECK(is_link(dir / "dangling"));
  CHECK(read(other / "new") == "made");
  // The target's permission bits are kept.
  REQUIRE(::chmod((other / "state").c_str(), 0640) == 0);
  write_file_atomically(dir / "link", "again", "test");
  struct stat st;
  REQUIRE(::stat((other / "state").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
}

TEST_CASE("files: folders, FIFOs, devices, loops and empty paths are refused before anything is written") {
  TempDir dir;
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  REQUIRE(::symlink("fifo", (dir / "to_fifo").c_str()) == 0);
  REQUIRE(::symlink("loop_b", (dir / "loop_a").c_str()) == 0);
  REQUIRE(::symlink("loop_a", (dir / "loop_b").c_str()) == 0);
  REQUIRE(::mkdir((dir / "folder").c_str(), 0700) == 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir / "fifo", "is a FIFO"},
      {dir / "to_fifo", "where it leads, is a FIFO"},
      {"/dev/null", "is a character device"},
      {dir / "folder", "is a folder"},
      {dir / "folder/", "names a folder"},
      {dir / "loop_a", "a loop of symbolic links"},
      {dir / "missing/x", "does not exist"},
      {"", "an empty path"},
  };
  for (const auto& c : cases) {
    const std::string &path = c.first, &message = c.second;  // (a lambda cannot capture a binding)
    CAPTURE(path);
    expect_error<IOError>([&] { output_file(path, "--save"); }, {"--save", message});
    expect_error<IOError>([&] { write_file_atomically(path, "x", "--save"); }, {message});
    expect_error<IOError>([&] { std::fclose(open_output_stream(path, "--log")); }, {"--log", message});
  }
  CHECK(is_fifo(dir / "fifo"));  // still a FIFO: nothing replaced it
  CHECK(entries(dir.path) == 5);
  // A save of the safetensors kind goes the same way.
  expect_error<IOError>([&] { nn::save_safetensors({{"a", ones({2})}}, dir / "to_fifo"); }, {"is a FIFO"});
  CHECK(is_fifo(dir / "fifo"));
}

TEST_CASE("files: only regular files are read, and a FIFO does not block the reader") {
  TempDir dir;
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);  // no writer: opening it to read would wait
  write(dir / "text", "hello");
  REQUIRE(::symlink("text", (dir / "link").c_str()) == 0);
  CHECK(InputFile(dir / "link", "test").read_all() == "hello");
  CHECK(InputFile(dir / "text", "test").size() == 5);
  expect_error<IOError>([&] { InputFile(dir / "fifo", "--data"); }, {"--data", "is a FIFO", "expected a regular file"});
  expect_error<IOError>([&] { InputFile(dir.path, "x"); }, {"is a folder"});
  expect_error<IOError>([&] { InputFile("/dev/zero", "x"); }, {"is a character device"});
  expect_error<IOError>([&] { InputFile(dir / "absent", ""); }, {dir / "absent: no such file"});
  // The readers built on it: tokens (a FIFO inside a folder too) and snapshots.
  expect_error<IOError>([&] { data::Tokens::open(dir / "fifo"); }, {"is a FIFO"});
  expect_error<IOError>([&] { data::Tokens::open(dir.path); }, {dir / "fifo", "is a FIFO"});
  expect_error<IOError>([&] { memory::write_snapshot_timeline(dir / "page.html", {dir / "fifo"}, ""); }, {"is a FIFO"});
  ::unlink((dir / "fifo").c_str());
  REQUIRE(::symlink("loop", (dir / "loop").c_str()) == 0);
  expect_error<IOError>([&] { data::Tokens::open(dir.path); }, {dir / "loop", "a loop of symbolic links"});
}

// Token streams: text files, folders and glob patterns as bytes; llm.c shards (GPT-2 uint16, LLaMA-3
// uint32) with their headers checked; every malformed input a typed error naming the file and what
// was wrong; files mapped, not copied.
#include <doctest/doctest.h>

#include <unistd.h>

#include <fstream>

#include "expect_error.h"
#include "files.h"

using namespace mg;
using data::FormatError;
using data::Tokens;
using data_test::shard_bytes;
using data_test::TempDir;
using data_test::write_file;

namespace {
std::vector<int64_t> read_all(const Tokens& t) {
  std::vector<int64_t> out(size_t(t.size()));
  t.read(0, t.size(), out.data());
  return out;
}
std::vector<int64_t> bytes_of(const std::string& s) { return std::vector<int64_t>(s.begin(), s.end()); }
// Anonymous memory of this process (heap, copies), from /proc: what a file read whole would grow.
int64_t anonymous_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kib = 0;
  while (status >> key)
    if (key == "RssAnon:") return (status >> kib, kib * 1024);
  return -1;
}
}  // namespace

TEST_CASE("data: a text file is its bytes, vocabulary 256") {
  TempDir dir;
  write_file(dir / "a.txt", "hello\n\xff");
  auto t = Tokens::open(dir / "a.txt");
  CHECK(t->size() == 7);
  CHECK(t->vocab() == 256);
  CHECK(t->kind() == "bytes of text");
  CHECK(read_all(*t) == std::vector<int64_t>{'h', 'e', 'l', 'l', 'o', '\n', 255});
  int64_t two[2];
  t->read(4, 2, two);
  CHECK(two[0] == 'o');
  CHECK(two[1] == '\n');
  expect_error<IndexError>([&] { t->read(6, 2, two); }, {"tokens [6, 8)", "which holds 7"});
}

TEST_CASE("data: a folder is its files in name order, recursively, hidden ones and empty ones skipped") {
  TempDir dir;
  write_file(dir / "corpus/b.txt", "BB");
  write_file(dir / "corpus/a.txt", "A");
  write_file(dir / "corpus/c/d.txt", "DDD");
  write_file(dir / "corpus/empty.txt", "");
  write_file(dir / "corpus/.hidden", "xx");
  write_file(dir / "corpus/.git/config", "yy");
  auto t = Tokens::open(dir / "corpus");
  CHECK(t->files() == 4);
  CHECK(read_all(*t) == bytes_of("ABBDDD"));
  int64_t across[3];  // a read that spans files
  t->read(0, 3, across);
  CHECK(std::vector<int64_t>(across, across + 3) == bytes_of("ABB"));
  CHECK(t->str().find("(4 files): 6 bytes of text, vocabulary 256") != std::string::npos);
  // A glob pattern: its matches, sorted.
  auto g = Tokens::open(dir / "corpus/[ab].txt");
  CHECK(read_all(*g) == bytes_of("ABB"));
}

TEST_CASE("data: llm.c shards, GPT-2 (uint16) and LLaMA-3 (uint32), read as one stream") {
  TempDir dir;
  const std::vector<int64_t> a = {0, 1, 50256, 12345}, b = {7, 65};
  write_file(dir / "shards/train_000.bin", shard_bytes(a));
  write_file(dir / "shards/train_001.bin", shard_bytes(b));
  write_file(dir / "shards/val_000.bin", shard_bytes({3}));
  auto t = Tokens::open(dir / "shards/train_*.bin");
  CHECK(t->vocab() == 50257);
  CHECK(t->kind() == "llm.c GPT-2 tokens");
  CHECK(read_all(*t) == std::vector<int64_t>{0, 1, 50256, 12345, 7, 65});
  CHECK(Tokens::open(dir / "shards")->size() == 7);

  write_file(dir / "llama.bin", shard_bytes({128255, 70000, 5}, 20240801, 7, 4));
  auto l = Tokens::open(dir / "llama.bin");
  CHECK(l->vocab() == 128256);
  CHECK(read_all(*l) == std::vector<int64_t>{128255, 70000, 5});
}

TEST_CASE("data: bad input is a typed error naming the file and what was wrong") {
  TempDir dir;
  expect_error<IOError>([&] { Tokens::open(dir / "missing.txt"); }, {"missing.txt: no such file or folder"});
  expect_error<IOError>([&] { Tokens::open(dir / "none_*.bin"); }, {"no file matches the pattern"});
  write_file(dir / "empty.txt", "");
  expect_error<FormatError>([&] { Tokens::open(dir / "empty.txt"); }, {"empty.txt: empty, no tokens"});
  std::filesystem::create_directories(dir / "nothing");
  expect_error<FormatError>([&] { Tokens::open(dir / "nothing"); }, {"the folder holds no files"});

  auto shard_error = [&](const std::string& bytes, const std::vector<std::string>& parts) {
    write_file(dir / "x.bin", bytes);
    expect_error<FormatError>([&] { Tokens::open(dir / "x.bin"); }, parts);
  };
  shard_error("", {"x.bin: 0 bytes, shorter than the 1024-byte header"});
  shard_error(shard_bytes({1, 2}).substr(0, 1000), {"1000 bytes, shorter than the 1024-byte header"});
  shard_error(shard_bytes({1, 2}, 12345), {"bad magic number 12345",
                                           "expected 20240520 (llm.c GPT-2 tokens) or "
                                           "20240801 (llm.c LLaMA-3 tokens)"});
  shard_error(shard_bytes({1, 2}, 20240520, 2),
              {"llm.c GPT-2 tokens (magic 20240520) of version 2, expected version 1"});
  shard_error(shard_bytes({1, 2, 3}, 20240520, 1, 2, 5), {"its header says 5 tokens (10 bytes", "holds 6 (truncated)"});
  shard_error(shard_bytes({1, 2, 3}, 20240520, 1, 2, 2), {"its header says 2 tokens", "holds 6 (longer than it says)"});
  shard_error(shard_bytes({}, 20240520, 1, 2, 0), {"its header says 0 tokens: no data"});
  shard_error(shard_bytes({5, 50256, 50257, 65535}), {"x.bin: token 2 is 50257, not below the vocabulary of 50257"});
  shard_error(shard_bytes({5, 128256}, 20240801, 7, 4), {"token 1 is 128256, not below the vocabulary of 128256"});

  write_file(dir / "mixed/a.bin", shard_bytes({1}));
  write_file(dir / "mixed/b.txt", "text");
  expect_error<FormatError>([&] { Tokens::open(dir / "mixed"); },
                            {"mixes llm.c token shards", "a.bin", "and text", "b.txt"});
  write_file(dir / "kinds/a.bin", shard_bytes({1}));
  write_file(dir / "kinds/b.bin", shard_bytes({1}, 20240801, 7, 4));
  expect_error<FormatError>([&] { Tokens::open(dir / "kinds"); },
                            {"mixes llm.c GPT-2 tokens", "and llm.c LLaMA-3 tokens", "b.bin"});
  expect_error<ValueError>([] { Tokens::from_ids({1, 9}, 9, "ids"); }, {"id 1 is 9, expected one in [0, 9)"});
}

TEST_CASE("data: files are mapped, not copied: a 256 MiB shard is checked without growing the heap") {
  TempDir dir;
  const int64_t count = int64_t(128) << 20;  // uint16 ids, all zero: a sparse file of 256 MiB after its header
  write_file(dir / "big.bin", shard_bytes({}, 20240520, 1, 2, count));
  REQUIRE(truncate((dir / "big.bin").c_str(), data::kShardHeaderBytes + 2 * count) == 0);
  const int64_t before = anonymous_bytes();
  auto t = Tokens::open(dir / "big.bin");  // reads every id once (the vocabulary check)
  int64_t last = -1;
  t->read(count - 1, 1, &last);
  CHECK(t->size() == count);
  CHECK(last == 0);
  INFO("anonymous memory grew by " << anonymous_bytes() - before << " B");
  CHECK(anonymous_bytes() - before < (int64_t(16) << 20));
}

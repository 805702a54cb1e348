#include <memgrad/data/tokens.h>

#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <memgrad/core/files.h>

namespace mg::data {

const std::vector<ShardKind>& shard_kinds() {
  static const std::vector<ShardKind> kinds = {{"llm.c GPT-2 tokens", 20240520, 1, 2, 50257},
                                               {"llm.c LLaMA-3 tokens", 20240801, 7, 4, 128256}};
  return kinds;
}

namespace {

namespace fs = std::filesystem;

// A file mapped read-only for as long as any Span points into it.
struct Mapping {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, bytes);
  }
};

std::shared_ptr<const Mapping> map_file(const std::string& path) {
  const InputFile f(path, "");  // a regular file, checked before it is opened: a FIFO would block
  auto m = std::make_shared<Mapping>();
  m->bytes = size_t(f.size());
  if (m->bytes) m->base = mmap(nullptr, m->bytes, PROT_READ, MAP_PRIVATE, f.fd(), 0);
  if (m->bytes && m->base == MAP_FAILED) throw IOError(path + ": cannot map it (" + std::strerror(errno) + ")");
  return m;
}

template <class T>
int64_t first_at_or_above(const unsigned char* bytes, int64_t count, int64_t limit) {
  const T* ids = reinterpret_cast<const T*>(bytes);
  T top = 0;  // one vectorizable pass; the position is looked for only when an id is too large
  for (int64_t i = 0; i < count; ++i) top = std::max(top, ids[i]);
  if (int64_t(top) < limit) return -1;
  for (int64_t i = 0; i < count; ++i)
    if (int64_t(ids[i]) >= limit) return i;
  return -1;
}

// A shard's tokens after its header was checked: magic, version, count against the file's size,
// every id below the vocabulary.
Tokens::Span shard_span(const std::string& path, const ShardKind** kind_out) {
  auto m = map_file(path);
  const auto* bytes = static_cast<const unsigned char*>(m->base);
  if (m->bytes < size_t(kShardHeaderBytes))
    throw FormatError(path + ": " + std::to_string(m->bytes) + " bytes, shorter than the " +
                      std::to_string(kShardHeaderBytes) + "-byte header of an llm.c token shard");
  int32_t header[3];
  std::memcpy(header, bytes, sizeof header);
  const auto& kinds = shard_kinds();
  auto kind = std::find_if(kinds.begin(), kinds.end(), [&](const ShardKind& k) { return k.magic == header[0]; });
  if (kind == kinds.end()) {
    std::string expected;
    for (const ShardKind& k : kinds)
      expected += (expected.empty() ? "" : " or ") + std::to_string(k.magic) + " (" + k.name + ")";
    throw FormatError(path + ": bad magic number " + std::to_string(header[0]) + " in the shard's header, expected " +
                      expected);
  }
  if (header[1] != kind->version)
    throw FormatError(path + ": " + kind->name + " (magic " + std::to_string(kind->magic) + ") of version " +
                      std::to_string(header[1]) + ", expected version " + std::to_string(kind->version));
  const int64_t count = header[2], after = int64_t(m->bytes) - kShardHeaderBytes;
  if (count <= 0) throw FormatError(path + ": its header says " + std::to_string(count) + " tokens: no data");
  if (after != count * kind->width)
    throw FormatError(path + ": its header says " + std::to_string(count) + " tokens (" +
                      std::to_string(count * kind->width) + " bytes after the " + std::to_string(kShardHeaderBytes) +
                      "-byte header), the file holds " + std::to_string(after) +
                      (after < count * kind->width ? " (truncated)" : " (longer than it says)"));
  const unsigned char* ids = bytes + kShardHeaderBytes;
  madvise(const_cast<unsigned char*>(bytes), m->bytes, MADV_SEQUENTIAL);
  const int64_t bad = kind->width == 2 ? first_at_or_above<uint16_t>(ids, count, kind->vocab)
                                       : first_at_or_above<uint32_t>(ids, count, kind->vocab);
  madvise(const_cast<unsigned char*>(bytes), m->bytes, MADV_RANDOM);  // training reads windows here and there
  if (bad >= 0) {
    int64_t id = 0;
    std::memcpy(&id, ids + bad * kind->width, size_t(kind->width));  // little-endian, as llm.c writes
    throw FormatError(path + ": token " + std::to_string(bad) + " is " + std::to_string(id) +
                      ", not below the vocabulary of " + std::to_string(kind->vocab) + " (" + kind->name + ")");
  }
  *kind_out = &*kind;
  return Tokens::Span{ids, 0, count, kind->width, m};
}

Tokens::Span text_span(const std::string& path) {
  auto m = map_file(path);
  if (m->bytes) madvise(m->base, m->bytes, MADV_RANDOM);
  return Tokens::Span{static_cast<const unsigned char*>(m->base), 0, int64_t(m->bytes), 1, m};
}

bool is_shard(const std::string& path) { return fs::path(path).extension() == ".bin"; }

// What a --data path or one of its folder's entries is, with symbolic links followed: a regular
// file (true), a folder (false, where `folders` allows one), or an IOError naming it (missing, a loop
// of links, a FIFO, a device, a socket).
bool is_file(const std::string& path, bool folders) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT) throw IOError(path + ": no such file or folder");
    if (e == ELOOP) throw IOError(path + ": a loop of symbolic links");
    throw IOError(path + ": cannot be examined (" + std::strerror(e) + ")");
  }
  if (S_ISREG(st.st_mode)) return true;
  if (folders && S_ISDIR(st.st_mode)) return false;
  throw IOError(path + ": is " + file_kind(st.st_mode) +
                (folders ? "; expected a regular file or a folder of them" : "; expected a regular file"));
}

// The files `path` names, in order: itself, a folder's files (recursively, hidden ones skipped), or
// a glob pattern's matches. Each is a regular file (or a link to one), checked before any is opened:
// anything else under a folder or matched by a pattern (a FIFO, a device, a loop of links) is refused.
std::vector<std::string> list_files(const std::string& path) {
  std::vector<std::string> files;
  if (path.empty()) throw IOError("expected a file, a folder or a pattern, got an empty path");
  if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = glob(path.c_str(), GLOB_ERR, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    if (files.empty()) throw IOError(path + ": no file matches the pattern");
    for (const std::string& f : files) is_file(f, false);
    return files;  // glob sorts them
  }
  if (is_file(path, true)) return {path};
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string entry = it->path().string();
    if (it->path().filename().string()[0] == '.') {
      if (it->symlink_status(ec).type() == fs::file_type::directory) it.disable_recursion_pending();
      continue;
    }
    const fs::file_type own = it->symlink_status(ec).type();
    if (ec) break;
    if (own == fs::file_type::directory) continue;     // its files come next
    if (is_file(entry, true)) files.push_back(entry);  // (a link to a folder is not followed)
  }
  if (ec) throw IOError(path + ": cannot list the folder (" + ec.message() + ")");
  if (files.empty()) throw FormatError(path + ": the folder holds no files");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

Tokens::Tokens(std::vector<Span> spans, int64_t vocab, std::string kind, std::string name)
    : spans_(std::move(spans)),
      files_(int64_t(spans_.size())),
      vocab_(vocab),
      kind_(std::move(kind)),
      name_(std::move(name)) {
  spans_.erase(std::remove_if(spans_.begin(), spans_.end(), [](const Span& s) { return s.count == 0; }), spans_.end());
  for (Span& s : spans_) s.first = size_, size_ += s.count;
  if (!size_) throw FormatError(name_ + ": empty, no tokens to train on");
}

std::vector<std::string> Tokens::files_of(const std::string& path) { return list_files(path); }

std::shared_ptr<const Tokens> Tokens::open(const std::string& path) {
  const std::vector<std::string> files = list_files(path);
  const auto shard = std::find_if(files.begin(), files.end(), is_shard);
  const auto text = std::find_if_not(files.begin(), files.end(), is_shard);
  if (shard != files.end() && text != files.end())
    throw FormatError(path + ": mixes llm.c token shards (" + *shard + ") and text (" + *text +
                      "), which have different vocabularies");
  std::vector<Span> spans;
  const ShardKind* kind = nullptr;
  for (const std::string& file : files) {
    if (shard == files.end()) {
      spans.push_back(text_span(file));
      continue;
    }
    const ShardKind* k = nullptr;
    spans.push_back(shard_span(file, &k));
    if (kind && k != kind)
      throw FormatError(path + ": mixes " + kind->name + " (" + files.front() + ") and " + k->name + " (" + file + ")");
    kind = k;
  }
  if (kind) return std::shared_ptr<const Tokens>(new Tokens(std::move(spans), kind->vocab, kind->name, path));
  return std::shared_ptr<const Tokens>(new Tokens(std::move(spans), 256, "bytes of text", path));
}

std::shared_ptr<const Tokens> Tokens::from_text(std::string text, const std::string& name) {
  auto owned = std::make_shared<const std::string>(std::move(text));
  Span s{reinterpret_cast<const unsigned char*>(owned->data()), 0, int64_t(owned->size()), 1, owned};
  return std::shared_ptr<const Tokens>(new Tokens({s}, 256, "bytes of text", name));
}

std::shared_ptr<const Tokens> Tokens::from_ids(const std::vector<int64_t>& ids, int64_t vocab,
                                               const std::string& name) {
  MG_CHECK(vocab >= 1 && vocab <= (int64_t(1) << 32), ValueError,
           "Tokens::from_ids: expected a vocabulary in [1, 2^32], got ", vocab);
  auto owned = std::make_shared<std::vector<uint32_t>>(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    MG_CHECK(ids[i] >= 0 && ids[i] < vocab, ValueError, "Tokens::from_ids: id ", i, " is ", ids[i],
             ", expected one in [0, ", vocab, ")");
    (*owned)[i] = uint32_t(ids[i]);
  }
  Span s{reinterpret_cast<const unsigned char*>(owned->data()), 0, int64_t(owned->size()), 4, owned};
  return std::shared_ptr<const Tokens>(new Tokens({s}, vocab, "token ids", name));
}

std::string Tokens::str() const {
  const std::string files = files_ > 1 ? " (" + std::to_string(files_) + " files)" : "";
  const std::string what = kind_ == "bytes of text" ? " bytes of text" : " " + kind_;
  return name_ + files + ": " + std::to_string(size_) + what + ", vocabulary " + std::to_string(vocab_);
}

void Tokens::read(int64_t begin, int64_t count, int64_t* out) const {
  MG_CHECK(begin >= 0 && count >= 0 && count <= size_ - begin, IndexError, "Tokens::read: tokens [", begin, ", ",
           begin + count, ") of ", name_, ", which holds ", size_);
  auto span =
      std::upper_bound(spans_.begin(), spans_.end(), begin, [](int64_t pos, const Span& s) { return pos < s.first; }) -
      1;
  for (; count > 0; ++span) {
    const int64_t from = begin - span->first, n = std::min(count, span->count - from);
    const unsigned char* p = span->bytes + from * span->width;
    if (span->width == 1)
      for (int64_t i = 0; i < n; ++i) out[i] = p[i];
    else if (span->width == 2)
      for (int64_t i = 0; i < n; ++i) out[i] = reinterpret_cast<const uint16_t*>(p)[i];
    else
      for (int64_t i = 0; i < n; ++i) out[i] = reinterpret_cast<const uint32_t*>(p)[i];
    out += n, begin += n, count -= n;
  }
}

}  // namespace mg::data

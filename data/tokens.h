// Token streams to train on, read from files without loading them: text as bytes (vocabulary 256),
// and llm.c's token shards (.bin: a header of 256 int32, whose first three are a magic number, a
// version and the token count, then the token ids; GPT-2's uint16 ids, vocabulary 50257, or
// LLaMA-3's uint32 ids, vocabulary 128256). Files are mapped (mmap): one larger than memory is paged
// in as it is read and never copied whole.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <memgrad/core/error.h>

namespace mg::data {

// A file whose content is not what its kind needs: empty, a shard with a bad magic number or
// version, a token count that disagrees with the file's size, a token id not below the vocabulary.
// A file that is missing or cannot be read is an IOError.
class FormatError : public IOError {
  using IOError::IOError;
};

// llm.c's shard kinds: header[0] magic, header[1] version, header[2] token count.
struct ShardKind {
  const char* name;  // "llm.c GPT-2 tokens"
  int32_t magic, version;
  int width;      // bytes per token id
  int64_t vocab;  // token ids are below it
};
const std::vector<ShardKind>& shard_kinds();
inline constexpr int64_t kShardHeaderBytes = 256 * 4;

// An immutable sequence of token ids, possibly spread over several files (read as one stream, in
// order). Safe to read from several threads at once.
class Tokens {
 public:
  // `path` is a file, a folder (its files, recursively, in name order; hidden ones skipped) or a glob
  // pattern such as "shards/train_*.bin". Files named *.bin are llm.c token shards, every other file
  // is text (bytes). All files must be of one kind. Each shard's header is checked, and every token
  // id it holds is checked against its vocabulary once here (one pass over the file).
  static std::shared_ptr<const Tokens> open(const std::string& path);
  // The files open(path) reads, in order, each checked to be a regular file (IOError naming one that
  // is missing, a FIFO, a device, a loop of links), none opened.
  static std::vector<std::string> files_of(const std::string& path);
  // Bytes of text held in memory (vocabulary 256); `name` says where they came from.
  static std::shared_ptr<const Tokens> from_text(std::string text, const std::string& name);
  // Token ids held in memory, each in [0, vocab): ValueError otherwise.
  static std::shared_ptr<const Tokens> from_ids(const std::vector<int64_t>& ids, int64_t vocab,
                                                const std::string& name);

  int64_t size() const { return size_; }
  int64_t vocab() const { return vocab_; }
  const std::string& kind() const { return kind_; }  // "bytes of text", "llm.c GPT-2 tokens", ...
  const std::string& name() const { return name_; }  // the path or pattern it was opened from
  int64_t files() const { return files_; }           // files read (one for tokens held in memory)
  // "corpus/ (3 files): 81,234 bytes of text, vocabulary 256"
  std::string str() const;
  // Token ids [begin, begin + count) as int64 into `out`. IndexError outside [0, size()).
  void read(int64_t begin, int64_t count, int64_t* out) const;

  struct Span {  // a run of ids of one width, mapped from a file or held in memory
    const unsigned char* bytes = nullptr;
    int64_t first = 0, count = 0;  // its ids are stream positions [first, first + count)
    int width = 1;
    std::shared_ptr<const void> owner;  // keeps the mapping or buffer alive
  };

 private:
  Tokens(std::vector<Span> spans, int64_t vocab, std::string kind, std::string name);
  std::vector<Span> spans_;  // the non-empty ones
  int64_t files_ = 0, size_ = 0, vocab_ = 0;
  std::string kind_, name_;
};

}  // namespace mg::data

// The files memgrad writes and reads, checked by what they are before they are opened, so that no
// path can replace a link or a special file, or hang on a FIFO.
//
// Writing: a path names a regular file, a symbolic link to one (followed through any chain of links:
// the file at its end is replaced and the links kept), or nothing yet in an existing, writable
// folder. Anything else (an empty path, a folder, a FIFO, a device, a socket, a loop of links) is
// refused with an IOError that names the path and what it is. A file is written whole or not at all:
// into a temporary file beside the final one (in the same folder, so the rename is atomic), synced,
// and renamed over it.
//
// Reading: a path names a regular file (or a symbolic link to one); it is opened non-blocking and
// checked again by fstat, so a FIFO swapped in after the check cannot block the reader either.
//
//   mg::output_file("run.safetensors", "--save");     // checked before any work; the file it writes
//   mg::AtomicFile f("page.html", "write_timeline");  // ... f.write(bytes); f.commit();
//   mg::InputFile in("data.bin", "--data");            // in.fd(), in.size()
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mg {

// The file a write to `path` replaces or creates: `path`, or the end of its chain of symbolic links
// (a relative link resolved from its own folder). IOError "<who> '<path>': ..." unless that is a
// regular file or does not exist yet, and its folder exists and can be written.
std::string output_file(const std::string& path, const std::string& who);

// "a FIFO", "a folder", "a character device", ...: what a stat mode names (for messages).
std::string file_kind(unsigned mode);

// A file written whole or not at all: the bytes go to "<target>.tmp.<pid>" in the target's folder,
// which commit() syncs and renames over the target (output_file(path)), keeping its permission bits
// and any symbolic link that led to it, then syncs the folder. An AtomicFile destroyed before its
// commit removes its temporary file; temporary files of writers that died (their process gone) are
// removed when the next one starts.
class AtomicFile {
 public:
  AtomicFile(const std::string& path, const std::string& who);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t n);
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  void commit();
  const std::string& target() const { return target_; }

 private:
  std::string path_, who_, target_, tmp_;
  int fd_ = -1;
  unsigned mode_ = 0;  // the replaced file's permission bits (0: a new file)
};

// Writes `bytes` to `path` with an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& bytes, const std::string& who);

// A file written as a stream (a log a run appends to as it goes): output_file(path) opened without
// blocking, checked by fstat, then emptied. IOError as output_file's; the caller fcloses it.
std::FILE* open_output_stream(const std::string& path, const std::string& who);

// An existing regular file opened for reading (IOError "<who> '<path>': ..." for a missing file, a
// folder, a FIFO, a device or a socket; "<path>: ..." with no `who`), closed when this goes.
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& who);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  int fd() const { return fd_; }
  int64_t size() const { return size_; }
  std::string read_all() const;  // the whole file (IOError on a read error)

 private:
  std::string where_;
  int fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace mg

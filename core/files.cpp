#include <memgrad/core/files.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include <memgrad/core/error.h>

namespace mg {

namespace {

std::string errno_text() { return std::strerror(errno); }

// The folder of `path` and its last name ("" for a path that ends with '/').
std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// Removes "<name>.tmp.<pid>" files in `dir` left by writers whose process no longer exists (killed
// mid-write). Best effort: a file that cannot be removed stays.
void remove_stale_temporaries(const std::string& dir, const std::string& name) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string prefix = name + ".tmp.";
  while (const dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    if (entry.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = entry.substr(prefix.size());
    pid_t pid = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) continue;
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) ::unlink((dir + "/" + entry).c_str());
  }
  ::closedir(d);
}

void write_all(int fd, const void* data, size_t n, const std::string& where) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0 && errno == EINTR) continue;
    MG_CHECK(w > 0, IOError, where, ": writing failed: ", errno_text());
    p += w, n -= size_t(w);
  }
}

// Blocking again once a descriptor opened with O_NONBLOCK is known to be a regular file.
void set_blocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

}  // namespace

std::string file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a folder";
    case S_IFIFO:
      return "a FIFO (named pipe)";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
  }
  return "not a regular file";
}

std::string output_file(const std::string& path, const std::string& who) {
  const std::string where = who + " '" + path + "'";
  MG_CHECK(!path.empty(), IOError, who, ": expected a file name, got an empty path");
  std::string file = path;
  for (int links = 0;; ++links) {
    MG_CHECK(links < 40, IOError, where, ": a loop of symbolic links (or more than 40 of them)");
    const auto [dir, name] = split_path(file);
    MG_CHECK(!name.empty() && name != "." && name != "..", IOError, where, ": names a folder; expected a file name");
    struct stat st;
    if (::lstat(file.c_str(), &st) != 0) {
      MG_CHECK(errno == ENOENT, IOError, where, ": cannot be examined: ", errno_text());
      struct stat d;
      MG_CHECK(::stat(dir.c_str(), &d) == 0 && S_ISDIR(d.st_mode), IOError, where, ": the folder '", dir,
               "' does not exist");
      break;  // a new file
    }
    if (S_ISLNK(st.st_mode)) {
      std::string target(size_t(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
      const ssize_t n = ::readlink(file.c_str(), target.data(), target.size());
      MG_CHECK(n > 0 && size_t(n) < target.size(), IOError, where, ": the symbolic link '", file,
               "' cannot be read: ", n < 0 ? errno_text() : std::string("it changed while being read"));
      target.resize(size_t(n));
      file = target[0] == '/' || dir == "." ? target : dir + "/" + target;
      continue;
    }
    MG_CHECK(S_ISREG(st.st_mode), IOError, where, ": ", file == path ? "" : "'" + file + "', where it leads, ", "is ",
             file_kind(st.st_mode), "; expected a regular file, a symbolic link to one, or a new file name");
    break;
  }
  const auto [dir, name] = split_path(file);
  MG_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, IOError, where, ": the folder '", dir, "' is not writable");
  // Room for the temporary file's name beside it ("<name>.tmp.<pid>"), so a write cannot fail at the end.
  const long most = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  MG_CHECK(name.size() + 16 <= size_t(most > 0 ? most : 255), IOError, where, ": a name of ", name.size(),
           " characters leaves no room for its temporary file's (at most ", (most > 0 ? most : 255) - 16, ")");
  return file;
}

AtomicFile::AtomicFile(const std::string& path, const std::string& who)
    : path_(path), who_(who), target_(output_file(path, who)) {
  const auto [dir, name] = split_path(target_);
  remove_stale_temporaries(dir, name);
  struct stat st;
  if (::stat(target_.c_str(), &st) == 0) mode_ = unsigned(st.st_mode & 07777);
  tmp_ = target_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
  MG_CHECK(fd_ >= 0, IOError, who_, " '", path_, "': cannot open '", tmp_, "' for writing: ", errno_text());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  MG_CHECK(fd_ >= 0, IOError, who_, " '", path_, "': written after its commit");
  write_all(fd_, data, n, who_ + " '" + tmp_ + "'");
}

void AtomicFile::commit() {
  const std::string where = who_ + " '" + tmp_ + "'";
  MG_CHECK(fd_ >= 0, IOError, who_, " '", path_, "': committed twice");
  if (mode_) ::fchmod(fd_, mode_);
  MG_CHECK(::fsync(fd_) == 0, IOError, where, ": fsync failed: ", errno_text());
  const int fd = fd_;
  fd_ = -1;
  MG_CHECK(::close(fd) == 0, IOError, where, ": close failed: ", errno_text());
  // What the path leads to now: a FIFO or a folder put there since is refused, not replaced.
  MG_CHECK(output_file(path_, who_) == target_, IOError, who_, " '", path_, "': it changed while being written");
  MG_CHECK(std::rename(tmp_.c_str(), target_.c_str()) == 0, IOError, who_, ": cannot rename '", tmp_, "' to '", target_,
           "': ", errno_text());
  tmp_.clear();
  const std::string dir = split_path(target_).first;
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // Some file systems cannot sync a folder (EINVAL); the file itself is on disk by now.
  const bool synced = d >= 0 && (::fsync(d) == 0 || errno == EINVAL);
  const std::string why = errno_text();
  if (d >= 0) ::close(d);
  MG_CHECK(synced, IOError, who_, ": wrote '", target_, "' but could not sync its folder '", dir, "': ", why);
}

void write_file_atomically(const std::string& path, const std::string& bytes, const std::string& who) {
  AtomicFile f(path, who);
  f.write(bytes);
  f.commit();
}

std::FILE* open_output_stream(const std::string& path, const std::string& who) {
  const std::string file = output_file(path, who), where = who + " '" + path + "'";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
  MG_CHECK(fd >= 0, IOError, where, ": cannot open it for writing: ", errno_text());
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || ::ftruncate(fd, 0) != 0) {
    const std::string what = ::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) ? "is " + file_kind(st.st_mode)
                                                                           : "cannot be emptied: " + errno_text();
    ::close(fd);
    throw IOError(where + ": " + what);
  }
  set_blocking(fd);
  std::FILE* f = ::fdopen(fd, "w");
  if (!f) ::close(fd);
  MG_CHECK(f, IOError, where, ": cannot open it for writing: ", errno_text());
  return f;
}

InputFile::InputFile(const std::string& path, const std::string& who)
    : where_(who.empty() ? path : who + " '" + path + "'") {
  MG_CHECK(!path.empty(), IOError, who.empty() ? "" : who + ": ", "expected a file name, got an empty path");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    MG_CHECK(e != ENOENT, IOError, where_, ": no such file");
    MG_CHECK(e != ELOOP, IOError, where_, ": a loop of symbolic links");
    throw IOError(where_ + ": cannot be examined: " + std::strerror(e));
  }
  // A FIFO, a device or a socket is refused before it is opened (opening one may block or act);
  // the descriptor is checked again, for a file swapped in between.
  MG_CHECK(S_ISREG(st.st_mode), IOError, where_, ": is ", file_kind(st.st_mode), "; expected a regular file");
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  MG_CHECK(fd_ >= 0, IOError, where_, ": cannot be opened: ", errno_text());
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string what = ::fstat(fd_, &st) == 0 ? "is " + file_kind(st.st_mode) : errno_text();
    ::close(fd_);
    fd_ = -1;
    throw IOError(where_ + ": " + what + "; expected a regular file");
  }
  set_blocking(fd_);
  size_ = int64_t(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string InputFile::read_all() const {
  std::string text;
  char buf[1 << 16];
  for (int64_t offset = 0;;) {
    const ssize_t r = ::pread(fd_, buf, sizeof buf, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    MG_CHECK(r >= 0, IOError, where_, ": reading at offset ", offset, " failed: ", errno_text());
    if (r == 0) return text;
    text.append(buf, size_t(r));
    offset += r;
  }
}

}  // namespace mg

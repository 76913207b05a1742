#include "io/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tensor/error.h"

namespace dl::io {

namespace {

[[noreturn]] void fail_sys(const char* op, const std::string& path, const char* what, int err) {
  fail(ErrorKind::Value, op, ": ", path, ": ", what, ": ", std::strerror(err));
}

std::string base_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// fsync of a directory makes a rename in it durable; some file systems refuse to
// fsync directories (EINVAL), which only means they need no such step.
void sync_dir(const std::string& dir, const char* op) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_sys(op, dir, "cannot open the directory to sync it", errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) fail_sys(op, dir, "fsync of the directory failed", err);
}

// Note [Stray temporary files]
// A process killed while it writes leaves its ".<name>.tmp-<pid>-..." file behind, as
// big as what it was writing (a training run preempted mid-checkpoint, many times over
// a long run). Each new AtomicFile for the same target removes those whose writer is
// gone: the pid no longer exists on this machine, and the file has not changed for
// kStaleSeconds (a margin for a pid that the file's creator shares with nothing here,
// such as a writer on another machine of a network file system, which is then still
// given that long). Best effort: a failure here never fails the write.
constexpr time_t kStaleSeconds = 60;

void remove_stale_temporaries(const std::string& dir, const std::string& base) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string start = "." + base + ".tmp-";
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, start.size(), start) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(name.c_str() + start.size(), &end, 10);
    if (pid <= 0 || !end || *end != '-') continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::string path = dir + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (now.tv_sec - st.st_mtime < kStaleSeconds) continue;
    ::unlink(path.c_str());
  }
  ::closedir(d);
}

}  // namespace

std::string dir_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void write_all(int fd, const void* data, size_t n, const std::string& path, const char* op) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // Linux writes at most ~2 GiB per call; larger requests come back short anyway.
    size_t chunk = n < (size_t(1) << 30) ? n : (size_t(1) << 30);
    ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail_sys(op, path, "write failed", errno);
    }
    p += w;
    n -= size_t(w);
  }
}

void read_exact(int fd, void* data, size_t n, uint64_t offset, const std::string& path,
                const char* op) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    size_t chunk = n < (size_t(1) << 30) ? n : (size_t(1) << 30);
    ssize_t r = ::pread(fd, p, chunk, off_t(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail_sys(op, path, "read failed", errno);
    }
    if (r == 0) fail(ErrorKind::Value, op, ": ", path, ": truncated file (it shrank while being read)");
    p += r;
    n -= size_t(r);
    offset += uint64_t(r);
  }
}

AtomicFile::AtomicFile(std::string path, const char* op) : path_(std::move(path)), op_(op) {
  DL_CHECK(!path_.empty(), op_, ": empty file name");
  DL_CHECK(path_.back() != '/', op_, ": ", path_, ": is a directory name, expected a file name");
  static std::atomic<uint64_t> counter{0};
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  std::string dir = dir_name(path_);
  std::string prefix = dir == "/" ? "/" : dir + "/";
  if (path_.find('/') == std::string::npos) prefix.clear();
  remove_stale_temporaries(dir, base_name(path_));
  // Unique among threads (counter) and processes (pid, time); O_EXCL makes sure.
  for (int attempt = 0;; ++attempt) {
    tmp_ = prefix + "." + base_name(path_) + ".tmp-" + std::to_string(::getpid()) + "-" +
           std::to_string(counter.fetch_add(1)) + "-" + std::to_string(ts.tv_nsec + attempt);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    if (errno != EEXIST || attempt > 100) {
      int err = errno;
      tmp_.clear();
      fail_sys(op_, path_, "cannot create a temporary file beside it", err);
    }
  }
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
}

void AtomicFile::fail_errno(const char* what) {
  int err = errno;
  discard();
  fail_sys(op_, path_, what, err);
}

void AtomicFile::write(const void* data, size_t n) {
  DL_CHECK(fd_ >= 0, op_, ": ", path_, ": write after the file was committed or abandoned");
  try {
    write_all(fd_, data, n, path_, op_);
  } catch (...) {
    discard();
    throw;
  }
}

void AtomicFile::commit() {
  DL_CHECK(fd_ >= 0, op_, ": ", path_, ": the file was already committed or abandoned");
  if (::fsync(fd_) != 0) fail_errno("fsync failed");
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail_errno("close failed");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail_errno("cannot rename the temporary file over it");
  tmp_.clear();
  sync_dir(dir_name(path_), op_);
}

void write_file_atomic(const std::string& path, std::string_view data, const char* op) {
  AtomicFile f(path, op);
  f.write(data.data(), data.size());
  f.commit();
}

void make_dirs(const std::string& path, const char* op) {
  DL_CHECK(!path.empty(), op, ": empty directory name");
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t slash = path.find('/', i);
    if (slash == std::string::npos) slash = path.size();
    cur = path.substr(0, slash);
    i = slash + 1;
    if (cur.empty() || cur == "." || cur == "..") continue;
    if (::mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST)
      fail_sys(op, path, ("cannot create directory " + cur).c_str(), errno);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail_sys(op, path, "cannot create the directory", errno);
  DL_CHECK(S_ISDIR(st.st_mode), op, ": ", path, ": exists and is not a directory");
}

bool is_terminal(int fd) noexcept { return ::isatty(fd) == 1; }

int terminal_columns(int fd) noexcept {
  struct winsize ws;
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

double monotonic_seconds() noexcept {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double wall_seconds() noexcept {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

}  // namespace dl::io

// Files written so that a crash never leaves a torn one, and small POSIX and byte helpers.
//
//   dl::io::AtomicFile f("ckpt/model-3.safetensors", "save");
//   f.write(header.data(), header.size());
//   f.write(tensor_bytes, n);
//   f.commit();      // the target now holds exactly these bytes; before, the old ones
//
// Note [Atomic replacement]
// AtomicFile writes a temporary file in the target's directory (same file system, so
// rename() can replace the target atomically), fsyncs it, renames it over the target,
// then fsyncs the directory so that the rename itself is durable. Whenever the process
// dies, the target holds either its old bytes or all the new ones. A crash between the
// first write and the rename leaves only a stray ".<name>.tmp-*" file beside it, which
// the next AtomicFile for that target removes once its writer is gone (Note [Stray
// temporary files] in file.cpp); an AtomicFile destroyed without commit() removes its
// temporary file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dl::io {

class AtomicFile {
 public:
  // Creates the temporary file; `op` prefixes error messages ("save: <path>: ...").
  AtomicFile(std::string path, const char* op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void commit();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail_errno(const char* what);
  void discard() noexcept;

  std::string path_;
  std::string tmp_;
  const char* op_;
  int fd_ = -1;
};

// The whole of `data` into `path`, atomically (Note [Atomic replacement]).
void write_file_atomic(const std::string& path, std::string_view data, const char* op);

// mkdir -p: creates `path` and its missing parents (mode 0777 less the umask).
void make_dirs(const std::string& path, const char* op);

// Writes all of `n` bytes (retrying after EINTR and short writes), reads exactly `n`
// bytes at `offset`; both throw dl::Error "op: path: ..." on failure. read_exact
// reports a short read as a truncated file.
void write_all(int fd, const void* data, size_t n, const std::string& path, const char* op);
void read_exact(int fd, void* data, size_t n, uint64_t offset, const std::string& path,
                const char* op);

// "dir/x.bin" -> "dir", "x.bin" -> ".", "/x" -> "/".
std::string dir_name(const std::string& path);

bool is_terminal(int fd) noexcept;
int terminal_columns(int fd) noexcept;   // 0 when unknown
double monotonic_seconds() noexcept;
double wall_seconds() noexcept;           // since the Unix epoch

// The big-endian 32-bit number at p (IDX headers and elements, PNG chunk lengths).
inline uint32_t be32(const unsigned char* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

}  // namespace dl::io

// Fuzz target: the IDX reader (io/idx.h, the MNIST format), plain and gzip.
//
// load_idx reads a path, so each input is written to a file first. The first byte picks
// how: 0 the rest as it is (a plain file), 1 the rest gzip-compressed (so mutations
// explore the IDX structure inside a valid gzip stream), 2 the rest as it is but after a
// gzip magic number (corrupt and truncated deflate data). Oracles, besides ASan/UBSan:
// only dl::Error may come out, never an internal one, and an accepted file's tensor
// holds exactly the elements its header announces (a plain file: exactly the bytes
// after the header).
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "io/idx.h"
#include "tensor/error.h"

namespace {

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "fuzz_idx: %s\n", what.c_str());
  std::abort();
}

std::string g_path;

void write_plain(const uint8_t* data, size_t size, const uint8_t* prefix, size_t nprefix) {
  FILE* fp = std::fopen(g_path.c_str(), "wb");
  if (!fp) fatal("cannot write " + g_path);
  bool ok = (nprefix == 0 || std::fwrite(prefix, 1, nprefix, fp) == nprefix) &&
            (size == 0 || std::fwrite(data, 1, size, fp) == size);
  if (std::fclose(fp) != 0 || !ok) fatal("cannot write " + g_path);
}

void write_gzip(const uint8_t* data, size_t size) {
  gzFile gz = gzopen(g_path.c_str(), "wb");
  if (!gz) fatal("cannot write " + g_path);
  if (size && gzwrite(gz, data, unsigned(size)) != int(size)) fatal("gzwrite failed");
  if (gzclose(gz) != Z_OK) fatal("gzclose failed");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  g_path = std::string(tmp && *tmp ? tmp : "/tmp") + "/dlua-fuzz-idx-" + std::to_string(::getpid());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (1 << 20)) return 0;
  int mode = data[0] % 3;
  const uint8_t* body = data + 1;
  size_t n = size - 1;
  static const uint8_t kGzipMagic[] = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0, 0x03};
  if (mode == 0) write_plain(body, n, nullptr, 0);
  else if (mode == 1) write_gzip(body, n);
  else write_plain(body, n, kGzipMagic, sizeof kGzipMagic);

  try {
    dl::Tensor t = dl::io::load_idx(g_path);
    // The header the reader accepted: 4 bytes of magic, then 4 bytes per dim.
    // (A plain write of gzip bytes is read as gzip: its header is inside the stream.)
    bool gz_body = n >= 2 && body[0] == 0x1f && body[1] == 0x8b;
    const uint8_t* h = mode == 2 || (mode == 0 && gz_body) ? nullptr : body;
    if (h && n >= 4) {
      int ndim = h[3];
      if (t.dim() != ndim) fatal("the tensor has another number of dims than the header");
      if (mode == 0) {
        size_t header = 4 + 4 * size_t(ndim);
        size_t width = h[2] == 0x0E ? 8 : h[2] == 0x0C || h[2] == 0x0D ? 4 : h[2] == 0x0B ? 2 : 1;
        if (uint64_t(t.numel()) * width != n - header) fatal("the data size does not match the file");
      }
    }
  } catch (const dl::Error& e) {
    if (e.kind() == dl::ErrorKind::Internal) fatal(std::string("internal error: ") + e.what());
  }
  std::remove(g_path.c_str());
  return 0;
}

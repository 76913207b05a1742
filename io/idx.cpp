#include "io/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "io/file.h"

namespace dl::io {

namespace {

struct IdxType {
  unsigned char code;
  int bytes;
  DType dtype;
  const char* name;
};

constexpr IdxType kTypes[] = {
    {0x08, 1, DType::UInt8, "ubyte"},  {0x09, 1, DType::Int32, "sbyte"},
    {0x0B, 2, DType::Int32, "int16"},  {0x0C, 4, DType::Int32, "int32"},
    {0x0D, 4, DType::Float32, "float32"}, {0x0E, 8, DType::Float64, "float64"},
};

// deflate expands at most about 1032:1; a header asking for more than this from a file
// of this size is lying, and is refused before the allocation it asks for.
constexpr uint64_t kMaxInflate = 1032;

struct Gz {
  gzFile f = nullptr;
  ~Gz() { if (f) gzclose(f); }
};

// Reads up to n bytes; returns how many (short only at the end of the data).
size_t gz_read(gzFile f, void* dst, size_t n, const std::string& where) {
  char* p = static_cast<char*>(dst);
  size_t got = 0;
  while (got < n) {
    unsigned chunk = unsigned(std::min<size_t>(n - got, size_t(1) << 30));
    int r = gzread(f, p + got, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      fail(ErrorKind::Value, where, ": ", err == Z_ERRNO ? std::strerror(errno) : msg,
           " (corrupt or truncated gzip data)");
    }
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

}  // namespace

namespace {

Tensor read_idx(const std::string& path, const char* op, float ubyte_divisor) {
  const std::string where = std::string(op) + ": " + path;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail(ErrorKind::Value, where, ": cannot open: ", std::strerror(errno));
  DL_CHECK(S_ISREG(st.st_mode), where, ": not a regular file");
  Gz gz;
  gz.f = gzopen(path.c_str(), "rb");
  if (!gz.f) fail(ErrorKind::Value, where, ": cannot open: ", std::strerror(errno));
  gzbuffer(gz.f, 1 << 17);

  unsigned char magic[4];
  size_t got = gz_read(gz.f, magic, 4, where);
  DL_CHECK(got == 4, where, ": truncated file: ", got, " bytes, too short for the IDX magic number");
  DL_CHECK(magic[0] == 0 && magic[1] == 0, where, ": not an IDX file (the magic number must start with "
           "two zero bytes, got 0x", std::hex, int(magic[0]), " 0x", int(magic[1]), ")");
  const IdxType* type = nullptr;
  for (const IdxType& t : kTypes) if (t.code == magic[2]) type = &t;
  DL_CHECK(type, where, ": unknown IDX element type 0x", std::hex, int(magic[2]),
           " (expected 0x08, 0x09, 0x0b, 0x0c, 0x0d or 0x0e)");
  int ndim = magic[3];
  DL_CHECK(ndim <= kMaxDims, where, ": ", ndim, " dimensions; dlua supports at most ", kMaxDims);

  unsigned char dimbuf[4 * kMaxDims];
  got = gz_read(gz.f, dimbuf, size_t(4 * ndim), where);
  DL_CHECK(got == size_t(4 * ndim), where, ": truncated file: the header announces ", ndim,
           " dimensions, but the file ends inside them");
  Shape shape;
  uint64_t numel = 1;
  for (int i = 0; i < ndim; ++i) {
    uint32_t d = be32(dimbuf + 4 * i);
    shape.push_back(int64_t(d));
    DL_CHECK(!__builtin_mul_overflow(numel, uint64_t(d), &numel), where, ": the shape ", shape,
             "... has too many elements");
  }
  uint64_t nbytes = 0;
  DL_CHECK(numel <= uint64_t(INT64_MAX) && !__builtin_mul_overflow(numel, uint64_t(type->bytes), &nbytes),
           where, ": the shape ", shape, " has too many elements");
  uint64_t header = 4 + 4 * uint64_t(ndim);
  uint64_t file_size = uint64_t(st.st_size);
  if (gzdirect(gz.f)) {
    uint64_t have = file_size - header;
    DL_CHECK(have >= nbytes, where, ": truncated file: header says ", nbytes, " data bytes (shape ",
             shape, " of ", type->name, "), file has ", have);
    DL_CHECK(have == nbytes, where, ": ", have - nbytes, " bytes after the data: header says ", nbytes,
             " data bytes (shape ", shape, " of ", type->name, "), file has ", have);
  } else {
    DL_CHECK(nbytes / kMaxInflate <= file_size, where, ": truncated file: header says ", nbytes,
             " data bytes (shape ", shape, " of ", type->name, "), more than a ", file_size,
             "-byte gzip file can hold");
  }

  const bool to_float = ubyte_divisor > 0;
  DL_CHECK(!to_float || type->code == 0x08, where, ": expected ubyte (0x08) data, got ", type->name);
  Tensor t = empty(shape, to_float ? DType::Float32 : type->dtype, Device{}, op);
  auto* raw = static_cast<unsigned char*>(t.raw_data());
  got = nbytes ? gz_read(gz.f, raw, size_t(nbytes), where) : 0;
  DL_CHECK(got == nbytes, where, ": truncated file: header says ", nbytes, " data bytes (shape ", shape,
           " of ", type->name, "), file has ", got);
  unsigned char extra;
  DL_CHECK(gz_read(gz.f, &extra, 1, where) == 0, where,
           ": data continues after the ", nbytes, " bytes the header announces (shape ", shape, ")");

  // Big-endian in the file; widen from the last element down so it works in place.
  int64_t n = int64_t(numel);
  switch (type->code) {
    case 0x08: {
      if (!to_float) break;
      auto* dst = t.data<float>();
      for (int64_t i = n - 1; i >= 0; --i) dst[i] = float(raw[i]) / ubyte_divisor;
      break;
    }
    case 0x09: {
      auto* dst = t.data<int32_t>();
      for (int64_t i = n - 1; i >= 0; --i) dst[i] = int32_t(int8_t(raw[i]));
      break;
    }
    case 0x0B: {
      auto* dst = t.data<int32_t>();
      for (int64_t i = n - 1; i >= 0; --i) dst[i] = int32_t(int16_t(uint16_t(raw[2 * i] << 8 | raw[2 * i + 1])));
      break;
    }
    case 0x0C: case 0x0D: {
      auto* dst = t.data<uint32_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = be32(raw + 4 * i);
      break;
    }
    case 0x0E: {
      auto* dst = t.data<uint64_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = uint64_t(be32(raw + 8 * i)) << 32 | be32(raw + 8 * i + 4);
      break;
    }
    default: break;
  }
  return t;
}

}  // namespace

Tensor load_idx(const std::string& path, const char* op) { return read_idx(path, op, 0); }

Tensor load_idx_ubyte_as_float(const std::string& path, float divisor, const char* op) {
  DL_CHECK(divisor > 0, op, ": the divisor must be positive, got ", divisor);
  return read_idx(path, op, divisor);
}

}  // namespace dl::io

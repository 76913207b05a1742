#include "io/image.h"

#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "io/file.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace dl::io {

namespace {

// Note [Images from short files]
// stb's PNM and uncompressed TGA loaders read their pixels with one copy of the size the
// header announces and ignore a short read, and stb copies nothing when the bytes in
// memory are short: the image came back as uninitialised heap memory (an 18-byte PNM
// announcing 3253 x 32255 pixels gave 105 MB of it, the first bytes a heap pointer),
// which a sandboxed script could read (tests/fuzz/fuzz_image.cpp found it). So stb reads
// through callbacks here (`Reader`) that fill whatever lies past the end of the file with
// zeros, as stb's own byte reader already does: a short file decodes to its pixels and
// zeros, the same every time, never to memory's old contents. And a file too short for
// the pixels its header announces, where the format says how short that is, is refused
// (`least_bytes`) before anything is allocated for it: a few bytes made hundreds of
// megabytes of zeros.
struct Reader {
  const uint8_t* data;
  size_t n, at = 0;
};
int read_bytes(void* user, char* out, int size) {
  auto* r = static_cast<Reader*>(user);
  const size_t want = size_t(std::max(size, 0)), k = std::min(want, r->n - r->at);
  std::memcpy(out, r->data + r->at, k);
  std::memset(out + k, 0, want - k);
  r->at += k;
  return int(k);
}
void skip_bytes(void* user, int n) {
  auto* r = static_cast<Reader*>(user);
  r->at = n < 0 ? r->at - std::min(r->at, size_t(-int64_t(n))) : std::min(r->n, r->at + size_t(n));
}
int at_end(void* user) {
  const auto* r = static_cast<const Reader*>(user);
  return r->at >= r->n;
}
constexpr stbi_io_callbacks kReader = {read_bytes, skip_bytes, at_end};

// The fewest bytes a file can hold w x h pixels in, for the formats whose size follows
// from the header: a PNM (P5, P6) and an uncompressed TGA (types 2, 3) or BMP (BI_RGB,
// BI_BITFIELDS) hold every pixel's bytes; a run-length TGA (types 10, 11) at least a
// packet (a byte and a pixel) per 128 pixels; a JPEG at least a bit per 8 x 8 block
// of its first component (the Huffman code of a block's DC difference, in sequential and
// progressive files alike: a 24-byte file of a frame header and nothing after it,
// announcing 16133 x 12032 pixels, decoded to 1.1 GB; fuzz_image found it). 0 for
// PNG (Note [PNG data that inflates past its image] checks its stream) and GIF, whose
// compressed data can hold more. (A 29-byte RLE TGA announcing 13578 x 13107 pixels
// decoded, from zeros, to 712 MB. The times: docs/performance.md, "Measurements behind
// the code".)
int64_t least_bytes(const uint8_t* data, size_t n, int64_t w, int64_t h, int64_t c) {
  auto le = [&](size_t at, int k) {
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; --i) v = v << 8 | (at + size_t(i) < n ? data[at + size_t(i)] : 0);
    return int64_t(v);
  };
  if (n >= 2 && data[0] == 'P' && (data[1] == '5' || data[1] == '6')) {
    const int bytes = stbi_is_16_bit_from_memory(data, int(n)) ? 2 : 1;
    return w * h * c * bytes;
  }
  if (n >= 2 && data[0] == 'B' && data[1] == 'M') {
    const int64_t header = le(14, 4), bits = header == 12 ? le(24, 2) : le(28, 2);
    // (stb reads the compression as an int and takes anything but 1, 2 and 4 up as
    // uncompressed: a negative one too)
    const int32_t compression = header == 12 ? 0 : int32_t(uint32_t(le(30, 4)));
    if (compression == 1 || compression == 2 || compression >= 4) return 0;
    return le(10, 4) + (w * bits + 31) / 32 * 4 * h;
  }
  if (n >= 2 && data[0] == 0xFF && data[1] == 0xD8) return ((w + 7) / 8) * ((h + 7) / 8) / 8;   // JPEG
  if (n >= 3 && data[1] == 0) {   // (a header cut short counts: stb reads zeros past the end)
    const int64_t pixel = (le(16, 1) + 7) / 8, start = 18 + data[0];
    if (data[2] == 2 || data[2] == 3) return start + w * h * pixel;
    if (data[2] == 10 || data[2] == 11) return start + (w * h + 127) / 128 * (1 + pixel);
  }
  return 0;
}

// Note [PNG data that inflates past its image]
// A PNG's pixels are one zlib stream split across its IDAT chunks. stb first collects
// the chunks into a buffer of the sizes their headers announce (a 77-byte file whose one
// chunk announced 2 GB took 2 GB, filled with the zeros read past the end of the file;
// tests/fuzz/fuzz_image.cpp found it), then inflates the stream into a buffer it grows
// for as long as the stream gives bytes, and decodes on through data that zlib refuses
// (a distance before the start). That memory is stb's own, outside the tensor memory
// limit. So a chunk of image data longer than the rest of the file is refused, and a PNG's
// stream is inflated here first (zlib, raw deflate after the two-byte header, as stb
// reads it: no checksum), into a scratch buffer, counting: a stream that gives more than
// its image's filtered rows (a filter byte and the packed pixels of each row, for every
// pass of an interlaced image) and a quarter more, that ends before its end, or that is
// not valid deflate data is refused. stb then inflates it once more, which adds little
// to a PNG's decoding (docs/performance.md, "Measurements behind the code").

// The bytes of a PNG's filtered rows: for each pass (7 with Adam7 interlacing), rows of
// a filter byte and the pass's pixels at `bits` bits each.
int64_t png_raw_bytes(int64_t w, int64_t h, int64_t bits, bool interlaced) {
  auto pass = [&](int64_t pw, int64_t ph) { return pw > 0 && ph > 0 ? ph * (1 + (pw * bits + 7) / 8) : 0; };
  if (!interlaced) return pass(w, h);
  static constexpr int kAdam7[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                       {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
  int64_t total = 0;
  for (const auto& p : kAdam7) total += pass((w - p[0] + p[2] - 1) / p[2], (h - p[1] + p[3] - 1) / p[3]);
  return total;
}

// Refuses a PNG of w x h pixels (as stb read its header) whose image data inflates past
// its image, is not deflate data, or stops before its stream's end (Note [PNG data that
// inflates past its image]). A file whose chunks it cannot follow to an image header is
// left to stb, which says what is wrong.
void check_png_stream(const uint8_t* data, size_t n, int64_t w, int64_t h, const char* op, const std::string& name) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n < 8 || std::memcmp(data, kSignature, 8) != 0) return;
  int64_t bound = -1;
  bool raw_stream = false;   // Apple's CgBI PNGs hold raw deflate data, with no zlib header
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return;
  std::unique_ptr<z_stream, int (*)(z_stream*)> done(&z, inflateEnd);
  std::vector<uint8_t> scratch(size_t(1) << 16);
  int64_t out = 0;
  size_t header_left = 2;   // the zlib header's bytes still to skip
  int rc = Z_OK;
  bool any_data = false;
  for (size_t at = 8; at + 8 <= n && rc != Z_STREAM_END;) {
    const size_t len = be32(data + at);
    const uint8_t* type = data + at + 4;
    const size_t body = at + 8, avail = std::min<size_t>(len, n - body);
    // An image data chunk whose CRC does not match is a corrupt file: libpng (as PIL and
    // browsers use it) refuses it, where stb decodes the damaged pixels on. (Other chunks'
    // CRCs are left to stb, as before.)
    if (std::memcmp(type, "IDAT", 4) == 0 && len < (size_t(1) << 31) && len <= n - body && n - body - len >= 4) {
      const uLong crc = crc32(crc32(0L, Z_NULL, 0), type, uInt(4 + len));
      DL_CHECK(crc == be32(data + body + len), op, ": ", name, ": the PNG's ",
               std::string(reinterpret_cast<const char*>(type), 4), " chunk fails its CRC (a corrupt file)");
    }
    if (std::memcmp(type, "CgBI", 4) == 0) raw_stream = true;
    if (std::memcmp(type, "IHDR", 4) == 0 && avail >= 13) {
      static constexpr int kChannels[7] = {1, 0, 3, 1, 2, 0, 4};   // by colour type
      const int depth = data[body + 8], colour = data[body + 9];
      // (a second header, or a colour type stb refuses: left to it)
      if (bound >= 0 || colour > 6 || kChannels[colour] == 0) return;
      bound = png_raw_bytes(w, h, int64_t(depth) * kChannels[colour], data[body + 12] != 0);
      bound += bound / 4;
    } else if (std::memcmp(type, "IDAT", 4) == 0) {
      if (bound < 0) return;   // no header first: stb refuses it
      DL_CHECK(len <= n - body, op, ": ", name, ": the file is truncated (an image data chunk announces ", len,
               " bytes, and ", n - body, " follow)");
      const uint8_t* in = data + body;
      size_t left = avail;
      if (!raw_stream) {
        const size_t skip = std::min(header_left, left);
        in += skip;
        left -= skip;
        header_left -= skip;
      }
      any_data = any_data || left > 0;
      z.next_in = const_cast<uint8_t*>(in);
      z.avail_in = uInt(left);
      while (z.avail_in > 0 && rc != Z_STREAM_END) {
        z.next_out = scratch.data();
        z.avail_out = uInt(scratch.size());
        const uInt before = z.avail_in;
        rc = inflate(&z, Z_NO_FLUSH);
        out += int64_t(scratch.size() - z.avail_out);
        // (stb's inflate takes some streams zlib refuses, a distance past the start for
        // one, and decodes on; libpng, as browsers and PIL use it, refuses them too)
        DL_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, op, ": ", name,
                 ": the PNG's image data is not a valid deflate stream (zlib: ", z.msg ? z.msg : "error",
                 ")");
        if (rc == Z_BUF_ERROR && z.avail_in == before && z.avail_out == scratch.size()) break;   // no progress
        DL_CHECK(out <= bound, op, ": ", name, ": the PNG's image data inflates to more than its ", bound,
                 " bytes of rows (and a quarter)");
      }
    } else if (std::memcmp(type, "IEND", 4) == 0) {
      break;
    }
    if (len > n) break;
    at = body + len + 4;
  }
  if (bound < 0 || !any_data) return;
  DL_CHECK(rc == Z_STREAM_END, op, ": ", name, ": the PNG's image data is cut short (its compressed stream "
           "ends after ", out, " bytes of rows, before its end)");
}

// The formats stb reads that dlua does not decode (io/image.h lists those it does): a
// Photoshop file, a Softimage PIC, a Radiance HDR. Their loaders are more code reached
// by a file's bytes, for formats no data set here uses. The name, or null.
const char* refused_format(const uint8_t* data, size_t n) {
  auto starts = [&](const char* magic, size_t k) { return n >= k && std::memcmp(data, magic, k) == 0; };
  if (starts("8BPS", 4)) return "Photoshop (PSD)";
  if (starts("\x53\x80\xF6\x34", 4)) return "Softimage PIC";
  if (starts("#?RADIANCE", 10) || starts("#?RGBE", 6)) return "Radiance HDR";
  return nullptr;
}

}  // namespace

Tensor decode_image(const uint8_t* data, size_t n, int channels, const std::string& name) {
  const char* op = "image.load";
  DL_CHECK(channels >= 0 && channels <= 4, op, ": channels must be 1 to 4 (or 0, as stored), got ", channels);
  DL_CHECK(n > 0 && n <= size_t(INT_MAX), op, ": ", name, ": ", n == 0 ? "an empty file" : "a file over 2 GiB");
  if (const char* format = refused_format(data, n))
    fail(ErrorKind::Value, op, ": ", name, ": a ", format, " file, which dlua does not decode (PNG, JPEG, BMP, GIF, "
         "TGA and PNM only)");
  int w = 0, h = 0, c = 0;
  if (!stbi_info_from_memory(data, int(n), &w, &h, &c))
    fail(ErrorKind::Value, op, ": ", name, ": not an image stb can read (", stbi_failure_reason(), ")");
  DL_CHECK(w > 0 && h > 0 && w <= kMaxImageSide && h <= kMaxImageSide && int64_t(w) * h <= kMaxImagePixels, op, ": ",
           name, ": a ", w, " x ", h, " image is larger than dlua decodes (", kMaxImageSide, " a side, ",
           kMaxImagePixels, " pixels)");
  const int64_t least = least_bytes(data, n, w, h, c);
  DL_CHECK(int64_t(n) >= least, op, ": ", name, ": the file is truncated (its header announces ", w, " x ", h,
           " pixels, which take at least ", least, " bytes, and the file has ", n, ")");
  check_png_stream(data, n, w, h, op, name);
  const int want = channels ? channels : c;
  // The result first: a tensor memory limit refuses the image before stb allocates its own copy.
  Tensor out = empty(Shape{want, h, w}, DType::UInt8, Device{}, op);
  Reader reader{data, n};
  int gw = 0, gh = 0, gc = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> px(stbi_load_from_callbacks(&kReader, &reader, &gw, &gh, &gc, want),
                                               stbi_image_free);
  if (!px) fail(ErrorKind::Value, op, ": ", name, ": cannot decode (", stbi_failure_reason(), ")");
  DL_CHECK(gw == w && gh == h, op, ": ", name, ": the image's size changed while decoding");
  // stb gives (H, W, C), interleaved; the result is planar (C, H, W), as torchvision's.
  uint8_t* o = out.data<uint8_t>();
  const int64_t plane = int64_t(h) * w;
  for (int64_t p = 0; p < plane; ++p)
    for (int k = 0; k < want; ++k) o[k * plane + p] = px.get()[p * want + k];
  return out;
}

namespace {
void append(void* ctx, void* data, int size) {
  static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), size_t(size));
}
}  // namespace

std::string encode_image(const Tensor& chw, const std::string& format, int quality, const std::string& name) {
  const char* op = "image.save";
  DL_CHECK(chw.device().is_cpu(), op, ": expected a tensor on the cpu, got ", chw.device());
  DL_CHECK(chw.dtype() == DType::UInt8 && chw.dim() == 3 && chw.size(0) >= 1 && chw.size(0) <= 4, op,
           ": expected a uint8 (C, H, W) tensor with 1 to 4 channels, got ", dtype_name(chw.dtype()), " ", chw.shape());
  DL_CHECK(chw.size(1) > 0 && chw.size(2) > 0 && chw.size(1) <= kMaxImageSide && chw.size(2) <= kMaxImageSide, op,
           ": ", name, ": cannot write a ", chw.size(2), " x ", chw.size(1), " image");
  const int c = int(chw.size(0)), h = int(chw.size(1)), w = int(chw.size(2));
  Tensor hwc = contiguous(permute(chw, {1, 2, 0}));
  std::string bytes;
  int ok = 0;
  if (format == "png") {
    ok = stbi_write_png_to_func(append, &bytes, w, h, c, hwc.data<uint8_t>(), w * c);
  } else if (format == "jpeg" || format == "jpg") {
    DL_CHECK(quality >= 0 && quality <= 100, op, ": JPEG quality must be 1 to 100, got ", quality);
    DL_CHECK(c != 2 && c != 4, op, ": JPEG has no alpha channel (", c, " channels given)");
    ok = stbi_write_jpg_to_func(append, &bytes, w, h, c, hwc.data<uint8_t>(), quality ? quality : 95);
  } else {
    fail(ErrorKind::Value, op, ": ", name, ": unknown image format '", format, "' (png or jpeg)");
  }
  DL_CHECK(ok != 0 && !bytes.empty(), op, ": ", name, ": the encoder failed");
  return bytes;
}

}  // namespace dl::io

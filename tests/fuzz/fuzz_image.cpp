// Fuzz target: the image decoder (io/image.h: PNG, JPEG, BMP, GIF, TGA and PNM through
// Debian's stb), which must treat a file's bytes as hostile (a sandboxed script may
// decode any bytes it is given). The first byte picks the channels asked for (0: as
// stored, 1 to 4: converted, 5: an invalid count that must be refused); the rest is the
// file. Oracles, besides ASan/UBSan on dlua's side of the call (Debian's libstb itself is
// not instrumented: a bad read inside it shows up only when it crashes):
//   - only dl::Error comes out, never an internal one;
//   - an accepted image is uint8 (C, H, W) with C the channels asked for (1 to 4 when
//     stored), each side within kMaxImageSide and the pixels within kMaxImagePixels;
//   - encoded as PNG and decoded again, it gives back the same pixels (PNG is lossless),
//     and as JPEG (without alpha) it is accepted again with the same size.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io/image.h"
#include "tensor/error.h"

namespace {

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "fuzz_image: %s\n", what.c_str());
  std::abort();
}

void round_trip(const dl::Tensor& img) {
  const std::string png = dl::io::encode_image(img, "png", 0, "fuzz.png");
  const auto* p = reinterpret_cast<const uint8_t*>(png.data());
  const dl::Tensor back = dl::io::decode_image(p, png.size(), int(img.size(0)), "fuzz.png");
  if (back.shape() != img.shape()) fatal("a PNG round trip changed the image's shape");
  if (std::memcmp(back.raw_data(), img.raw_data(), size_t(img.numel())) != 0)
    fatal("a PNG round trip changed the pixels");
  if (img.size(0) == 1 || img.size(0) == 3) {
    const std::string jpg = dl::io::encode_image(img, "jpeg", 90, "fuzz.jpg");
    const dl::Tensor j = dl::io::decode_image(reinterpret_cast<const uint8_t*>(jpg.data()), jpg.size(), 0,
                                              "fuzz.jpg");
    if (j.size(1) != img.size(1) || j.size(2) != img.size(2)) fatal("a JPEG round trip changed the size");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (1 << 20)) return 0;
  const int channels = data[0] % 6;
  try {
    const dl::Tensor img = dl::io::decode_image(data + 1, size - 1, channels, "fuzz.img");
    if (channels == 5) fatal("a channel count of 5 was accepted");
    if (img.dtype() != dl::DType::UInt8 || img.dim() != 3 || !img.is_contiguous())
      fatal("a decoded image is not a contiguous uint8 (C, H, W) tensor");
    if (channels != 0 ? img.size(0) != channels : img.size(0) < 1 || img.size(0) > 4)
      fatal("a decoded image has another channel count than asked for");
    if (img.size(1) < 1 || img.size(2) < 1 || img.size(1) > dl::io::kMaxImageSide ||
        img.size(2) > dl::io::kMaxImageSide || img.size(1) * img.size(2) > dl::io::kMaxImagePixels)
      fatal("a decoded image is larger than the decoder's limits");
    // (Large images would make the round trip slow, not find more.)
    if (img.numel() <= (1 << 16)) round_trip(img);
  } catch (const dl::Error& e) {
    if (e.kind() == dl::ErrorKind::Internal) fatal(std::string("internal error: ") + e.what());
  }
  return 0;
}

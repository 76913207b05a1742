// Images: PNG, JPEG, BMP, GIF (first frame), TGA and PNM decoded, PNG and JPEG encoded,
// through Debian's stb (libstb-dev; its compiled libstb). Bytes in, bytes out: the Lua
// side reads and writes the files (dlua.io: the sandbox's file rule, atomic writes).
//
//   dl::Tensor img = dl::io::decode_image(bytes.data(), bytes.size(), 0, "cat.png");
//   // uint8 (C, H, W): C = 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA (as stored, or `channels`)
//   std::string png = dl::io::encode_image(img, "png", 0, "out.png");
//
// The decoder treats the bytes as hostile: the size the header announces is checked
// (each side at most kMaxImageSide, the pixels at most kMaxImagePixels) before stb
// allocates anything, a file shorter than its format's raw pixels is refused, what stb
// reads past a file's end is zeros (Note [Images from short files] in image.cpp), the
// other formats stb knows (PSD, PIC, HDR) are refused, and any decoding failure is a
// dl::Error naming the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace dl::io {

constexpr int64_t kMaxImageSide = 1 << 15, kMaxImagePixels = int64_t(1) << 28;

// channels 0: as the file stores them; 1 to 4: converted (grey, grey+alpha, RGB, RGBA).
Tensor decode_image(const uint8_t* data, size_t n, int channels, const std::string& name);
// A uint8 (C, H, W) tensor (C 1 to 4) as a "png" or "jpeg" file's bytes (quality 1 to
// 100 for JPEG; 0: 95).
std::string encode_image(const Tensor& chw, const std::string& format, int quality, const std::string& name);

}  // namespace dl::io

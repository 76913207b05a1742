// IDX files (the MNIST format), plain or gzip-compressed.
//
//   dl::Tensor images = dl::io::load_idx("/usr/share/datasets/fashion-mnist/"
//                                        "train-images-idx3-ubyte.gz");   // uint8 (60000, 28, 28)
//
// Layout: two zero bytes, a type byte, a dim count, the dims as big-endian uint32, then
// the values row-major, big-endian. Types: 0x08 ubyte (-> uint8), 0x09 sbyte and 0x0B
// int16 (-> int32, dlua's narrowest signed type), 0x0C int32, 0x0D float32, 0x0E float64.
// The size the header announces is checked against the file before anything is
// allocated (for gzip, against the most that deflate can expand the file to), and the
// data must end exactly where the header says. zlib's gzread reads plain files as well.
#pragma once
#include <string>

#include "tensor/tensor.h"

namespace dl::io {

Tensor load_idx(const std::string& path, const char* op = "load_idx");

// A ubyte file as float32 values divided by `divisor` (Fashion-MNIST's pixels in [0, 1]
// with 255), converted in place in the one float32 buffer: no uint8 copy of the data
// set is ever alive beside it. Other element types are refused.
Tensor load_idx_ubyte_as_float(const std::string& path, float divisor, const char* op);

}  // namespace dl::io

// Reading a fuzzer's bytes as a stream of small decisions (shared by the fuzz targets).
//
//   FuzzInput in(data, size);
//   int op = in.pick(12);              // 0..11
//   int64_t d = in.one_of(kDims);      // an element of a table
//
// Past the end every read returns 0 (the first choice), so any input is a complete,
// finite program, and libFuzzer's mutations of a byte change one decision.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dlfuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  bool done() const { return p_ >= end_; }
  size_t left() const { return size_t(end_ - p_); }

  uint8_t byte() { return p_ < end_ ? *p_++ : 0; }
  uint16_t u16() { return uint16_t(byte() | byte() << 8); }
  uint32_t u32() { return uint32_t(u16()) | uint32_t(u16()) << 16; }
  uint64_t u64() { return uint64_t(u32()) | uint64_t(u32()) << 32; }
  bool flag() { return byte() & 1; }
  // 0 .. n-1 (n <= 256 keeps one byte per decision, which mutates well).
  int pick(int n) { return n <= 1 ? 0 : int(byte() % unsigned(n)); }
  template <typename T, size_t N>
  T one_of(const T (&table)[N]) { return table[pick(int(N))]; }
  double f64() {
    uint64_t bits = u64();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace dlfuzz

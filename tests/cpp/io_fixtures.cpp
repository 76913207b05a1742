// Safetensors files for the interop check with PyTorch (tests/ref/check_safetensors.py).
//
//   dlua_io_fixtures write <dir>    writes <dir>/dlua.safetensors
//   dlua_io_fixtures check <file>   loads a file written by Python and checks its values
//
// A tensor's name says what it holds: "<kind>_<dims>" (dims joined by 'x', "scalar"
// for 0-dim), element i (row-major) being value(kind, i) below; the Python script
// computes the same recipe with numpy. Exit status 0 when all is well.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "tensor/half.h"

using namespace dl;

namespace {

const char* kKinds[] = {"bool", "uint8", "int32", "int64", "float32", "float64", "f16", "bf16"};
const Shape kShapes[] = {Shape{}, Shape{0}, Shape{5}, Shape{2, 3}, Shape{2, 0, 4},
                         Shape{1, 2, 3, 1, 2, 1, 2, 1}};
const float kSpecial[] = {INFINITY, -INFINITY, NAN, -0.0f, 1e-45f, 3.4e38f, 1.0f / 3.0f};

DType dtype_of_kind(const std::string& k) {
  if (k == "bool") return DType::Bool;
  if (k == "uint8") return DType::UInt8;
  if (k == "int32") return DType::Int32;
  if (k == "int64") return DType::Int64;
  if (k == "float64") return DType::Float64;
  if (k == "f16") return DType::Float16;     // F16 and BF16 load as themselves
  if (k == "bf16") return DType::BFloat16;
  return DType::Float32;   // float32, special
}

// Element i of `kind`, stored into p (of the kind's dtype).
void value(const std::string& kind, int64_t i, void* p) {
  double third = double((i * 37) % 101 - 50) / 3.0;
  double eighth = double((i * 37) % 101 - 50) / 8.0;
  if (kind == "bool") *static_cast<bool*>(p) = i % 3 == 0;
  else if (kind == "uint8") *static_cast<uint8_t*>(p) = uint8_t((i * 7) % 256);
  else if (kind == "int32") *static_cast<int32_t*>(p) = int32_t(i * 7919 - 50000);
  else if (kind == "int64") *static_cast<int64_t*>(p) = i * 3000000007LL - (int64_t(1) << 40);
  else if (kind == "float64") *static_cast<double*>(p) = third;
  else if (kind == "float32") *static_cast<float*>(p) = float(third);
  else if (kind == "special") *static_cast<float*>(p) = kSpecial[i % 7];
  else if (kind == "f16") *static_cast<Half*>(p) = Half(float(eighth));   // exact in both
  else *static_cast<BFloat16*>(p) = BFloat16(float(eighth));
}

std::string name_of(const std::string& kind, const Shape& s) {
  if (s.size() == 0) return kind + "_scalar";
  std::string n = kind + "_";
  for (int d = 0; d < s.size(); ++d) {
    if (d) n += 'x';
    n += std::to_string(s[d]);
  }
  return n;
}

Tensor make(const std::string& kind, const Shape& s) {
  Tensor t = empty(s, dtype_of_kind(kind));
  auto* p = static_cast<char*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) value(kind, i, p + i * int64_t(t.itemsize()));
  return t;
}

bool parse_name(const std::string& name, std::string& kind, Shape& shape) {
  size_t u = name.rfind('_');
  if (u == std::string::npos) return false;
  kind = name.substr(0, u);
  std::string dims = name.substr(u + 1);
  shape = Shape{};
  if (dims == "scalar") return true;
  size_t at = 0;
  while (at <= dims.size()) {
    size_t x = dims.find('x', at);
    if (x == std::string::npos) x = dims.size();
    shape.push_back(std::stoll(dims.substr(at, x - at)));
    at = x + 1;
  }
  return true;
}

int write(const std::string& dir) {
  io::NamedTensors ts;
  for (const char* k : kKinds)
    for (const Shape& s : kShapes) ts.emplace_back(name_of(k, s), make(k, s));
  ts.emplace_back(name_of("special", Shape{7}), make("special", Shape{7}));
  io::save_safetensors(dir + "/dlua.safetensors", ts,
                       {{"format", "pt"}, {"unicode", "\xc3\xa9\xe2\x88\x91\xf0\x9f\x99\x82 \"q\" \\ \n"}});
  return 0;
}

int check(const std::string& path) {
  io::SafetensorsFile f = io::load_safetensors(path);
  int bad = 0;
  for (const auto& [name, t] : f.tensors) {
    std::string kind;
    Shape shape;
    if (!parse_name(name, kind, shape)) {
      std::fprintf(stderr, "%s: unexpected tensor name\n", name.c_str());
      ++bad;
      continue;
    }
    Tensor want = make(kind, shape);
    size_t n = size_t(want.numel()) * want.itemsize();
    if (t.dtype() != want.dtype() || t.shape() != want.shape() ||
        (n && std::memcmp(t.raw_data(), want.raw_data(), n) != 0)) {
      std::fprintf(stderr, "%s: values, dtype or shape differ from the recipe\n", name.c_str());
      ++bad;
    }
  }
  bool has_format = false;
  for (const auto& [k, v] : f.metadata) has_format |= k == "format" && v == "pt";
  if (!has_format) {
    std::fprintf(stderr, "metadata format=pt missing\n");
    ++bad;
  }
  std::printf("checked %zu tensors, %d bad\n", f.tensors.size(), bad);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s write <dir> | check <file>\n", argv[0]);
    return 2;
  }
  try {
    std::string mode = argv[1];
    if (mode == "write") return write(argv[2]);
    if (mode == "check") return check(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 2;
}

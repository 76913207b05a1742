// File formats (io/): safetensors round trips and a corpus of hostile files, IDX plain
// and gzip, TensorBoard event files read back by an independent reader, and the atomic
// writer under SIGKILL.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <chrono>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "io/events.h"
#include "io/file.h"
#include "io/idx.h"
#include "io/safetensors.h"
#include "tensor/ops.h"

using namespace dl;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dlua-io-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), std::streamsize(data.size()));
}

// A tensor of `shape` whose bytes are a pattern that depends on `seed` (valid values for
// every dtype: bools are 0 or 1).
Tensor patterned(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* p = static_cast<unsigned char*>(t.raw_data());
  size_t n = size_t(t.numel()) * t.itemsize();
  if (dtype == DType::Bool) {
    for (size_t i = 0; i < n; ++i) p[i] = rng() & 1;
  } else if (dtype == DType::Float32) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(int(rng() % 2001) - 1000) / 7.0f;
  } else if (dtype == DType::Float64) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = double(int(rng() % 2001) - 1000) / 7.0;
  } else {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rng());
  }
  return t;
}

bool same(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = contiguous(a), cb = contiguous(b);
  size_t n = size_t(a.numel()) * a.itemsize();
  return n == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), n) == 0;
}

// A safetensors file from its parts: the length prefix (unless given), header, data.
std::string st_file(const std::string& header, const std::string& data = "", int64_t hlen = -1) {
  std::string out(8, '\0');
  uint64_t n = hlen < 0 ? header.size() : uint64_t(hlen);
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string load_error(const std::string& bytes) {
  try {
    io::parse_safetensors(bytes.data(), bytes.size(), "bad.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string le_bytes(std::initializer_list<uint64_t> vals, int width) {
  std::string s;
  for (uint64_t v : vals)
    for (int i = 0; i < width; ++i) s += char((v >> (8 * i)) & 0xFF);
  return s;
}

}  // namespace

// ---- safetensors ---------------------------------------------------------------------------

TEST_CASE("safetensors round-trips every dtype and shape, with metadata", "[io]") {
  TempDir dir;
  const DType dtypes[] = {DType::Bool, DType::UInt8, DType::Int32, DType::Int64, DType::Float32, DType::Float64};
  const Shape shapes[] = {Shape{}, Shape{0}, Shape{5}, Shape{2, 3}, Shape{2, 0, 4}, Shape{1, 2, 3, 1, 2, 1, 2, 1}};
  io::NamedTensors ts;
  uint32_t seed = 1;
  for (DType d : dtypes)
    for (const Shape& s : shapes) {
      ts.emplace_back(std::string(dtype_name(d)) + "/" + std::to_string(seed), patterned(s, d, seed));
      ++seed;
    }
  // A view: written contiguous.
  ts.emplace_back("view", transpose(patterned({3, 4}, DType::Float32, 99), 0, 1));
  io::Metadata meta = {{"format", "pt"}, {"note", "quote \" backslash \\ newline \n tab \t \x01 é ∑ 🙂"},
                       {"", "empty key"}};
  std::string path = dir / "all.safetensors";
  io::save_safetensors(path, ts, meta);

  io::SafetensorsFile f = io::load_safetensors(path);
  REQUIRE(f.tensors.size() == ts.size());
  std::map<std::string, Tensor> got(f.tensors.begin(), f.tensors.end());
  for (const auto& [name, t] : ts) {
    INFO(name);
    REQUIRE(got.count(name));
    CHECK(same(got[name], t));
    // (Empty tensors are left out: tensor/ calls a fresh (2, 0, 4) tensor non-contiguous.)
    if (t.numel() > 0) CHECK(got[name].is_contiguous());
  }
  std::map<std::string, std::string> m(f.metadata.begin(), f.metadata.end());
  CHECK(m == std::map<std::string, std::string>(meta.begin(), meta.end()));

  // Deterministic bytes whatever the insertion order; header padded to 8; data aligned.
  io::NamedTensors rev(ts.rbegin(), ts.rend());
  std::string bytes = read_bytes(path);
  CHECK(io::serialize_safetensors(rev, meta) == bytes);
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  CHECK(hlen % 8 == 0);
  CHECK(bytes[8 + hlen - 1] != '\0');
}

TEST_CASE("safetensors writes the reference layout byte for byte", "[io]") {
  Tensor a = empty({2}, DType::Float32);
  a.data<float>()[0] = 1.0f;
  a.data<float>()[1] = -2.0f;
  Tensor b = empty({}, DType::Int64);
  b.data<int64_t>()[0] = 7;
  Tensor c = empty({1}, DType::UInt8);
  c.data<uint8_t>()[0] = 9;
  std::string bytes = io::serialize_safetensors({{"a", a}, {"c", c}, {"b", b}}, {{"k", "v"}});
  // Larger items first, then by name: b (I64), a (F32), c (U8).
  std::string header =
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("c":{"dtype":"U8","shape":[1],"data_offsets":[16,17]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string data = le_bytes({7}, 8) + le_bytes({std::bit_cast<uint32_t>(1.0f), std::bit_cast<uint32_t>(-2.0f)}, 4) + "\x09";
  CHECK(bytes == st_file(header, data));
}

TEST_CASE("safetensors refuses bad names and metadata when writing", "[io]") {
  Tensor t = empty({1}, DType::Float32);
  CHECK_THROWS_WITH(io::serialize_safetensors({{"x", t}, {"x", t}}), Contains("duplicate tensor name \"x\""));
  CHECK_THROWS_WITH(io::serialize_safetensors({{"__metadata__", t}}), Contains("reserved"));
  CHECK_THROWS_WITH(io::serialize_safetensors({{"\xff", t}}), Contains("not valid UTF-8"));
  CHECK_THROWS_WITH(io::serialize_safetensors({}, {{"k", "\xc3"}}), Contains("not valid UTF-8"));
  CHECK_THROWS_WITH(io::serialize_safetensors({}, {{"k", "1"}, {"k", "2"}}), Contains("duplicate metadata key"));
  TempDir dir;
  CHECK_THROWS_WITH(io::save_safetensors(dir / "no/such/dir/x.safetensors", {{"x", t}}),
                    StartsWith("save: ") && Contains("cannot create a temporary file"));
  // A failed save leaves nothing behind.
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("safetensors keeps F16 and BF16, widens small integer dtypes", "[io]") {
  std::string header =
      R"({"h":{"dtype":"F16","shape":[6],"data_offsets":[0,12]},)"
      R"("bf":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]},)"
      R"("i8":{"dtype":"I8","shape":[2],"data_offsets":[16,18]},)"
      R"("u16":{"dtype":"U16","shape":[1],"data_offsets":[18,20]},)"
      R"("i16":{"dtype":"I16","shape":[1],"data_offsets":[20,22]},)"
      R"("u32":{"dtype":"U32","shape":[1],"data_offsets":[22,26]}})";
  std::string data = le_bytes({0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x8000}, 2) +
                     le_bytes({0x3F80, 0xC0A0}, 2) + "\xff\x05" + le_bytes({65535}, 2) +
                     le_bytes({0x8000}, 2) + le_bytes({4294967295u}, 4);
  std::string bytes = st_file(header, data);
  io::SafetensorsFile f = io::parse_safetensors(bytes.data(), bytes.size(), "x");
  std::map<std::string, Tensor> m(f.tensors.begin(), f.tensors.end());
  // F16 and BF16 load as themselves (Note [Half-precision storage]), bits unchanged.
  REQUIRE(m["h"].dtype() == DType::Float16);
  REQUIRE(m["bf"].dtype() == DType::BFloat16);
  const uint16_t want_h[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x8000};
  for (int i = 0; i < 6; ++i) CHECK(m["h"].data<uint16_t>()[i] == want_h[i]);
  Tensor h32 = cast(m["h"], DType::Float32);
  const float* h = h32.data<float>();
  CHECK(h[0] == 1.0f);
  CHECK(h[1] == -2.0f);
  CHECK(h[2] == 65504.0f);
  CHECK(h[3] == std::ldexp(1.0f, -24));
  CHECK(std::isinf(h[4]));
  CHECK((h[5] == 0.0f && std::signbit(h[5])));
  Tensor bf = cast(m["bf"], DType::Float32);
  CHECK(bf.data<float>()[0] == 1.0f);
  CHECK(bf.data<float>()[1] == -5.0f);
  CHECK(m["i8"].dtype() == DType::Int32);
  CHECK(m["i8"].data<int32_t>()[0] == -1);
  CHECK(m["i8"].data<int32_t>()[1] == 5);
  CHECK(m["u16"].data<int32_t>()[0] == 65535);
  CHECK(m["i16"].data<int32_t>()[0] == -32768);
  CHECK(m["u32"].dtype() == DType::Int64);
  CHECK(m["u32"].data<int64_t>()[0] == 4294967295LL);
}

TEST_CASE("safetensors rejects every kind of corrupt or hostile file with a clear error", "[io]") {
  auto t = [](const std::string& name, const char* dtype, const std::string& shape, uint64_t b, uint64_t e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  std::string d24(24, '\0');
  struct Case {
    const char* what;
    std::string bytes;
    const char* message;
  };
  std::vector<Case> cases = {
      {"empty file", "", "too short for the 8-byte header length"},
      {"short file", "\x10\0\0", "too short"},
      {"huge header length", st_file("{}", "", int64_t(1) << 60), "exceeds the limit of 100000000 bytes"},
      {"header longer than the file", st_file("{}", "", 4096), "truncated file: header says 4096 header bytes, file has 2"},
      {"zero header length", st_file("", "", 0), "must start with '{'"},
      {"not JSON", st_file("hello world"), "must start with '{'"},
      {"truncated JSON", st_file("{\"a\":"), "unexpected end of the header"},
      {"bad JSON token", st_file("{\"a\" 1}"), "expected ':'"},
      {"garbage after the object", st_file("{} x"), "nothing but padding"},
      {"NUL padding", st_file(std::string("{}\0\0\0\0\0\0", 8)), "nothing but padding"},
      {"tensor not an object", st_file("{\"a\":[1]}"), "expected an object describing tensor \"a\""},
      {"deep nesting", st_file("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
       "expected an object describing tensor"},
      {"deep nesting in metadata", st_file("{\"__metadata__\":{\"k\":" + std::string(50000, '{') + "}}"),
       "expected a string value"},
      {"deep nesting in a shape", st_file("{" + t("a", "F32", std::string(5000, '[') , 0, 0) + "}"),
       "expected a size"},
      {"metadata value not a string", st_file("{\"__metadata__\":{\"k\":1}}"), "expected a string value"},
      {"duplicate metadata key", st_file("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"), "duplicate __metadata__ key \"k\""},
      {"two __metadata__", st_file("{\"__metadata__\":{},\"__metadata__\":{}}"), "duplicate key \"__metadata__\""},
      {"duplicate tensor names", st_file("{" + t("a", "U8", "[0]", 0, 0) + "," + t("a", "U8", "[0]", 0, 0) + "}"),
       "duplicate tensor name \"a\""},
      {"duplicate field", st_file("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\"}}"), "duplicate field \"dtype\""},
      {"unknown field", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1],\"x\":1}}", "\x01"),
       "unknown field \"x\""},
      {"missing field", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[]}}"), "missing field \"data_offsets\""},
      {"unknown dtype", st_file("{" + t("a", "F33", "[1]", 0, 4) + "}", "xxxx"), "unknown dtype \"F33\""},
      {"unsupported dtype", st_file("{" + t("a", "F8_E4M3", "[1]", 0, 1) + "}", "x"), "has dtype F8_E4M3, which dlua does not support"},
      {"negative size", st_file("{" + t("a", "F32", "[-1]", 0, 4) + "}", "xxxx"), "expected a size"},
      {"fractional size", st_file("{" + t("a", "F32", "[1.5]", 0, 4) + "}", "xxxx"), "must be a whole number"},
      {"exponent offset", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1e0]}}", "x"), "must be a whole number"},
      {"leading zero", st_file("{" + t("a", "U8", "[01]", 0, 1) + "}", "x"), "leading zero"},
      {"number too large", st_file("{" + t("a", "U8", "[99999999999999999999999]", 0, 1) + "}", "x"), "is too large"},
      {"size above int64", st_file("{" + t("a", "U8", "[9223372036854775808]", 0, 1) + "}", "x"), "size is too large"},
      {"too many dims", st_file("{" + t("a", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) + "}", "x"), "more than 8 dimensions"},
      {"numel overflow", st_file("{" + t("a", "U8", "[4294967296,4294967296,4294967296]", 0, 1) + "}", "x"), "number of elements overflows"},
      {"byte size overflow", st_file("{" + t("a", "F64", "[4294967296,1073741824]", 0, 1) + "}", "x"), "byte size overflows"},
      {"wrong byte count", st_file("{" + t("a", "F32", "[2,3]", 0, 20) + "}", std::string(20, '\0')),
       "data_offsets [0, 20] hold 20 bytes, but dtype F32 and shape (2, 3) need 24"},
      {"offsets end before begin", st_file("{" + t("a", "U8", "[0]", 5, 4) + "}"), "end before they begin"},
      {"overlapping offsets", st_file("{" + t("a", "F32", "[4]", 0, 16) + "," + t("b", "F32", "[2]", 8, 16) + "}", std::string(16, '\0')),
       "overlap"},
      {"gap between tensors", st_file("{" + t("a", "F32", "[2]", 0, 8) + "," + t("b", "F32", "[2]", 16, 24) + "}", d24),
       "no tensor covers data bytes [8, 16)"},
      {"data not starting at 0", st_file("{" + t("a", "F32", "[2]", 8, 16) + "}", std::string(16, '\0')), "no tensor covers data bytes [0, 8)"},
      {"offsets beyond the file", st_file("{" + t("a", "F32", "[1024]", 0, 4096) + "}", std::string(100, '\0')),
       "truncated file: header says 4096 data bytes, file has 100"},
      {"data after the last tensor", st_file("{" + t("a", "F32", "[2]", 0, 8) + "}", d24), "16 bytes after the last tensor"},
      {"bool out of range", st_file("{" + t("a", "BOOL", "[3]", 0, 3) + "}", std::string("\x01\x02\x00", 3)),
       "BOOL element 1 holds 2 (expected 0 or 1)"},
      {"invalid UTF-8 name", st_file("{\"\xc3\x28\":{}}"), "invalid UTF-8"},
      {"overlong UTF-8", st_file("{\"\xc0\xaf\":{}}"), "invalid UTF-8"},
      {"UTF-8 surrogate", st_file("{\"\xed\xa0\x80\":{}}"), "invalid UTF-8"},
      {"lone surrogate escape", st_file("{\"\\ud800\":{}}"), "unpaired surrogate"},
      {"bad escape", st_file("{\"\\x41\":{}}"), "invalid escape"},
      {"control character", st_file("{\"a\nb\":{}}"), "control character in a string"},
      {"unterminated string", st_file("{\"abc"), "unterminated string"},
      {"offsets list too long", st_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", "x"), "data_offsets has two entries"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::string msg = load_error(c.bytes);
    CHECK_THAT(msg, StartsWith("load: bad.safetensors: "));
    CHECK_THAT(msg, Contains(c.message));
  }

  // The same through a file: its name is in the message.
  TempDir dir;
  std::string path = dir / "model.safetensors";
  for (const Case& c : cases)
    if (std::string(c.what) == "offsets beyond the file") write_bytes(path, c.bytes);
  CHECK_THROWS_WITH(io::load_safetensors(path),
                    "load: " + path + ": truncated file: header says 4096 data bytes, file has 100");
  CHECK_THROWS_WITH(io::load_safetensors(dir / "missing.safetensors"), Contains("cannot open: No such file"));
  CHECK_THROWS_WITH(io::load_safetensors(dir.path.string()), Contains("not a regular file"));
}

TEST_CASE("safetensors accepts what the format allows", "[io]") {
  // Escapes in names, null metadata, whitespace, empty files, zero-size tensors anywhere.
  std::string header = " {\"__metadata__\": null, \"\\u00e9\\ud83d\\ude42\\/\" : { \"shape\" : [ 2 ] ,"
                       " \"data_offsets\" : [ 0 , 2 ], \"dtype\" : \"U8\" },"
                       "\"z\":{\"dtype\":\"F64\",\"shape\":[0,3],\"data_offsets\":[0,0]}}\n\t\r  ";
  header.erase(0, 1);
  std::string bytes = st_file(header, "\x07\x08");
  io::SafetensorsFile f = io::parse_safetensors(bytes.data(), bytes.size(), "x");
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].first == "z");
  CHECK(f.tensors[0].second.shape() == Shape{0, 3});
  CHECK(f.tensors[1].first == "\xc3\xa9\xf0\x9f\x99\x82/");
  CHECK(f.tensors[1].second.data<uint8_t>()[1] == 8);
  std::string empty_file = st_file("{}");
  CHECK(io::parse_safetensors(empty_file.data(), empty_file.size(), "x").tensors.empty());
}

TEST_CASE("safetensors survives random corruption of a valid file", "[io]") {
  io::NamedTensors ts = {{"w", patterned({3, 4}, DType::Float32, 1)},
                         {"b", patterned({4}, DType::Bool, 2)},
                         {"i", patterned({2, 2}, DType::Int64, 3)}};
  std::string good = io::serialize_safetensors(ts, {{"k", "v"}});
  std::mt19937 rng(1234);
  int loaded = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bad = good;
    int kind = iter % 3;
    if (kind == 0) {
      bad.resize(rng() % good.size());
    } else {
      int flips = 1 + int(rng() % 4);
      for (int k = 0; k < flips; ++k) {
        size_t at = kind == 1 ? rng() % std::min<size_t>(bad.size(), 200) : rng() % bad.size();
        bad[at] = char(rng());
      }
    }
    try {
      io::SafetensorsFile f = io::parse_safetensors(bad.data(), bad.size(), "fuzz");
      ++loaded;
      for (auto& [n, t] : f.tensors) CHECK(t.numel() <= int64_t(bad.size()));
    } catch (const Error& e) {
      ++refused;
      CHECK_THAT(std::string(e.what()), StartsWith("load: fuzz: "));
    }
  }
  CHECK(refused > 0);
  CHECK(loaded + refused == 3000);
}

// ---- atomic writes -------------------------------------------------------------------------

TEST_CASE("an atomic write killed at any moment leaves the old or the new file", "[io]") {
  TempDir dir;
  std::string target = dir / "big.bin";
  constexpr size_t kSize = 4 << 20;
  // Content of generation g: every byte is g, so a torn file shows mixed bytes or a
  // wrong length.
  auto content_ok = [&](const std::string& s, int g) {
    return s.size() == kSize && s.find_first_not_of(char(g)) == std::string::npos;
  };
  io::write_file_atomic(target, std::string(kSize, char(1)), "test");
  int committed = 1, kept_old = 0, got_new = 0;
  std::mt19937 rng(42);
  for (int gen = 2; gen < 42; ++gen) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      try {
        std::string chunk(64 << 10, char(gen));
        io::AtomicFile f(target, "child");
        for (size_t at = 0; at < kSize; at += chunk.size()) f.write(chunk.data(), chunk.size());
        f.commit();
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    ::usleep(useconds_t(rng() % 30000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::string s = read_bytes(target);
    bool finished = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (content_ok(s, gen)) {
      committed = gen;
      ++got_new;
    } else {
      INFO("generation " << gen << ": target holds neither the old nor the new content");
      REQUIRE(!finished);
      REQUIRE(content_ok(s, committed));
      ++kept_old;
    }
  }
  INFO("kept old " << kept_old << ", got new " << got_new);
  CHECK(kept_old + got_new == 40);
  // Killed writers leave only temporary files, never a second target.
  for (const auto& e : fs::directory_iterator(dir.path)) {
    std::string name = e.path().filename().string();
    CHECK((name == "big.bin" || name.rfind(".big.bin.tmp-", 0) == 0));
  }
}

TEST_CASE("atomic writes create, replace, and report errors", "[io]") {
  TempDir dir;
  std::string p = dir / "x.txt";
  io::write_file_atomic(p, "one", "write");
  CHECK(read_bytes(p) == "one");
  io::write_file_atomic(p, "", "write");
  CHECK(read_bytes(p).empty());
  {
    io::AtomicFile f(p, "write");
    f.write("abandoned", 9);
  }
  CHECK(read_bytes(p).empty());
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
  CHECK_THROWS_WITH(io::write_file_atomic(dir / "", "x", "write"), Contains("is a directory name"));
  io::make_dirs(dir / "a/b/c", "mkdir");
  CHECK(fs::is_directory(dir.path / "a/b/c"));
  io::make_dirs(dir / "a/b/c", "mkdir");
  CHECK_THROWS_WITH(io::make_dirs(p + "/sub", "mkdir"), StartsWith("mkdir: "));
  CHECK(io::dir_name("a/b.txt") == "a");
  CHECK(io::dir_name("b.txt") == ".");
  CHECK(io::dir_name("/b.txt") == "/");
}

TEST_CASE("stray temporaries of dead writers are removed by the next write", "[io]") {
  TempDir dir;
  std::string target = dir / "m.safetensors";
  // A pid that existed and is gone: a child that exited and was reaped.
  pid_t dead = ::fork();
  REQUIRE(dead >= 0);
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  auto make = [&](const std::string& name, int age_seconds) {
    std::string p = dir / name;
    std::ofstream(p) << "partial";
    auto when = fs::file_time_type::clock::now() - std::chrono::seconds(age_seconds);
    fs::last_write_time(p, when);
    return p;
  };
  const std::string pid = std::to_string(dead), me = std::to_string(::getpid());
  std::string old_dead = make(".m.safetensors.tmp-" + pid + "-0-1", 3600);
  std::string new_dead = make(".m.safetensors.tmp-" + pid + "-1-1", 0);      // may still be in flight elsewhere
  std::string old_alive = make(".m.safetensors.tmp-" + me + "-7-1", 3600);    // a live writer's
  std::string other = make(".n.safetensors.tmp-" + pid + "-0-1", 3600);       // another target's
  std::string odd = make(".m.safetensors.tmp-x", 3600);                       // not our pattern
  io::write_file_atomic(target, "new", "save");
  CHECK(read_bytes(target) == "new");
  CHECK(!fs::exists(old_dead));
  CHECK(fs::exists(new_dead));
  CHECK(fs::exists(old_alive));
  CHECK(fs::exists(other));
  CHECK(fs::exists(odd));
}

// ---- IDX -------------------------------------------------------------------------------------

namespace {

std::string idx_bytes(unsigned char type, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s = {'\0', '\0', char(type), char(dims.size())};
  for (uint32_t d : dims) {
    s += char(d >> 24);
    s += char((d >> 16) & 0xFF);
    s += char((d >> 8) & 0xFF);
    s += char(d & 0xFF);
  }
  return s + data;
}

void write_gz(const std::string& path, const std::string& data) {
  gzFile g = gzopen(path.c_str(), "wb");
  REQUIRE(g);
  REQUIRE(gzwrite(g, data.data(), unsigned(data.size())) == int(data.size()));
  REQUIRE(gzclose(g) == Z_OK);
}

std::string idx_error(const std::string& path) {
  try {
    io::load_idx(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("IDX files load plain and gzipped, in every element type", "[io]") {
  TempDir dir;
  std::string pixels;
  for (int i = 0; i < 5 * 4 * 3; ++i) pixels += char(i * 4);
  for (bool gz : {false, true}) {
    std::string p = dir / (gz ? "img.idx.gz" : "img.idx");
    std::string bytes = idx_bytes(0x08, {5, 4, 3}, pixels);
    if (gz) write_gz(p, bytes); else write_bytes(p, bytes);
    Tensor t = io::load_idx(p);
    CHECK(t.dtype() == DType::UInt8);
    CHECK(t.shape() == Shape{5, 4, 3});
    CHECK(std::memcmp(t.raw_data(), pixels.data(), pixels.size()) == 0);
  }
  // Big-endian values of the other types.
  write_bytes(dir / "s8", idx_bytes(0x09, {3}, "\xff\x7f\x80"));
  Tensor s8 = io::load_idx(dir / "s8");
  CHECK(s8.dtype() == DType::Int32);
  CHECK((s8.data<int32_t>()[0] == -1 && s8.data<int32_t>()[1] == 127 && s8.data<int32_t>()[2] == -128));
  write_bytes(dir / "i16", idx_bytes(0x0B, {2}, std::string("\xff\xfe\x01\x02", 4)));
  Tensor i16 = io::load_idx(dir / "i16");
  CHECK((i16.data<int32_t>()[0] == -2 && i16.data<int32_t>()[1] == 258));
  write_bytes(dir / "i32", idx_bytes(0x0C, {1, 1}, std::string("\x80\x00\x00\x01", 4)));
  CHECK(io::load_idx(dir / "i32").data<int32_t>()[0] == int32_t(0x80000001u));
  write_bytes(dir / "f32", idx_bytes(0x0D, {1}, std::string("\x3f\x80\x00\x00", 4)));
  CHECK(io::load_idx(dir / "f32").data<float>()[0] == 1.0f);
  write_bytes(dir / "f64", idx_bytes(0x0E, {1}, std::string("\xc0\x04\x00\x00\x00\x00\x00\x00", 8)));
  CHECK(io::load_idx(dir / "f64").data<double>()[0] == -2.5);
  write_bytes(dir / "empty", idx_bytes(0x08, {0, 28}, ""));
  CHECK(io::load_idx(dir / "empty").shape() == Shape{0, 28});
}

TEST_CASE("IDX refuses corrupt files with a clear error", "[io]") {
  TempDir dir;
  auto plain = [&](const std::string& name, const std::string& bytes) {
    write_bytes(dir / name, bytes);
    return idx_error(dir / name);
  };
  auto gz = [&](const std::string& name, const std::string& bytes) {
    write_gz(dir / name, bytes);
    return idx_error(dir / name);
  };
  std::string p = dir / "m";
  CHECK_THAT(plain("m", std::string(2, '\0')), Equals("load_idx: " + p + ": truncated file: 2 bytes, too short for the IDX magic number"));
  std::string not_idx = idx_bytes(0x08, {3}, "abc");
  not_idx[0] = 1;
  CHECK_THAT(plain("m", not_idx), Contains("not an IDX file"));
  CHECK_THAT(plain("m", idx_bytes(0x07, {3}, "abc")), Contains("unknown IDX element type 0x7"));
  CHECK_THAT(plain("m", idx_bytes(0x08, std::vector<uint32_t>(9, 1), "a")), Contains("9 dimensions"));
  CHECK_THAT(plain("m", idx_bytes(0x08, {3, 4}, "").substr(0, 9)), Contains("ends inside them"));
  CHECK_THAT(plain("m", idx_bytes(0x08, {2, 3}, "abcd")), Contains("truncated file: header says 6 data bytes (shape (2, 3) of ubyte), file has 4"));
  CHECK_THAT(plain("m", idx_bytes(0x08, {2}, "abcd")), Contains("2 bytes after the data"));
  CHECK_THAT(plain("m", idx_bytes(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, "")), Contains("too many elements"));
  CHECK_THAT(gz("g", idx_bytes(0x08, {60000, 28, 28}, "abcd")), Contains("more than a"));
  CHECK_THAT(gz("g", idx_bytes(0x08, {2, 3}, "abcd")), Contains("truncated file: header says 6 data bytes"));
  CHECK_THAT(gz("g", idx_bytes(0x08, {2}, "abcd")), Contains("data continues after the 2 bytes"));
  // A flipped byte inside the compressed stream, and a cut-off stream.
  write_gz(dir / "c", idx_bytes(0x08, {1000}, std::string(1000, 'x') + ""));
  std::string z = read_bytes(dir / "c");
  std::string cut = z.substr(0, z.size() - 12);
  write_bytes(dir / "cut", cut);
  CHECK_THAT(idx_error(dir / "cut"), StartsWith("load_idx: "));
  z[z.size() - 6] ^= 0x55;  // inside the CRC/length trailer
  write_bytes(dir / "crc", z);
  CHECK_THAT(idx_error(dir / "crc"), StartsWith("load_idx: "));
  CHECK_THAT(idx_error(dir / "nope"), Contains("cannot open"));
}

// ---- TensorBoard event files ------------------------------------------------------------------

namespace {

// Bit by bit, written independently of io/events.cpp's table.
uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t unmask(uint32_t m) {
  uint32_t r = m - 0xa282ead8u;
  return (r >> 17) | (r << 15);
}

// A decoded protobuf message: field number -> values (varints, fixed and bytes kept raw).
struct Field {
  int wire;
  uint64_t num;
  std::string bytes;
};
using Message = std::multimap<int, Field>;

Message decode(const std::string& s) {
  Message m;
  size_t i = 0;
  auto var = [&]() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(i < s.size());
      unsigned char b = static_cast<unsigned char>(s[i++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  while (i < s.size()) {
    uint64_t k = var();
    Field f{int(k & 7), 0, {}};
    if (f.wire == 0) {
      f.num = var();
    } else if (f.wire == 1 || f.wire == 5) {
      size_t n = f.wire == 1 ? 8 : 4;
      REQUIRE(i + n <= s.size());
      for (size_t b = 0; b < n; ++b) f.num |= uint64_t(static_cast<unsigned char>(s[i + b])) << (8 * b);
      i += n;
    } else {
      REQUIRE(f.wire == 2);
      uint64_t n = var();
      REQUIRE(i + n <= s.size());
      f.bytes = s.substr(i, n);
      i += n;
    }
    m.emplace(int(k >> 3), f);
  }
  return m;
}

std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < file.size()) {
    REQUIRE(i + 12 <= file.size());
    std::string len = file.substr(i, 8);
    uint64_t n = 0;
    for (int b = 0; b < 8; ++b) n |= uint64_t(static_cast<unsigned char>(len[size_t(b)])) << (8 * b);
    uint32_t len_crc = 0, data_crc = 0;
    std::memcpy(&len_crc, file.data() + i + 8, 4);
    CHECK(unmask(len_crc) == crc32c_bitwise(len));
    REQUIRE(i + 12 + n + 4 <= file.size());
    std::string data = file.substr(i + 12, n);
    std::memcpy(&data_crc, file.data() + i + 12 + n, 4);
    CHECK(unmask(data_crc) == crc32c_bitwise(data));
    out.push_back(data);
    i += 12 + n + 4;
  }
  return out;
}

double as_double(const Field& f) { return std::bit_cast<double>(f.num); }

}  // namespace

TEST_CASE("CRC32C matches the standard check value", "[io]") {
  CHECK(io::crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c_bitwise("123456789") == 0xE3069283u);
  std::string s(1000, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = char(i * 7);
  CHECK(io::crc32c(s.data(), s.size()) == crc32c_bitwise(s));
}

TEST_CASE("event files hold TFRecords of Events that an independent reader decodes", "[io]") {
  TempDir dir;
  std::string logdir = dir / "runs/exp";
  std::string path;
  Tensor values = empty({6}, DType::Float64);
  double v[] = {-1, 0, 0.5, 1, 2, 3};
  std::memcpy(values.raw_data(), v, sizeof v);
  {
    io::EventWriter w(logdir);
    path = w.path();
    w.scalar("loss", 0.25, 1);
    w.scalar("loss", 0.125, 2);
    w.scalar("acc/train", 1e-3, -5);
    w.histogram("weights", values, 7, 4);
    w.flush();
    CHECK(read_bytes(path).size() > 0);
    w.close();
    CHECK_THROWS_WITH(w.scalar("x", 1, 1), Contains("closed"));
  }
  std::string name = fs::path(path).filename().string();
  CHECK_THAT(name, StartsWith("events.out.tfevents."));
  CHECK(fs::path(path).parent_path() == fs::path(logdir));
  std::vector<std::string> recs = read_records(read_bytes(path));
  REQUIRE(recs.size() == 5);

  Message first = decode(recs[0]);
  CHECK(first.find(3)->second.bytes == "brain.Event:2");
  CHECK(as_double(first.find(1)->second) > 1.6e9);

  struct Want { const char* tag; float value; int64_t step; };
  Want want[] = {{"loss", 0.25f, 1}, {"loss", 0.125f, 2}, {"acc/train", 1e-3f, -5}};
  for (int i = 0; i < 3; ++i) {
    Message e = decode(recs[size_t(i + 1)]);
    CHECK(as_double(e.find(1)->second) > 1.6e9);
    CHECK(int64_t(e.find(2)->second.num) == want[i].step);
    Message summary = decode(e.find(5)->second.bytes);
    Message value = decode(summary.find(1)->second.bytes);
    CHECK(value.find(1)->second.bytes == want[i].tag);
    REQUIRE(value.find(2)->second.wire == 5);
    CHECK(std::bit_cast<float>(uint32_t(value.find(2)->second.num)) == want[i].value);
  }

  Message e = decode(recs[4]);
  CHECK(e.find(2)->second.num == 7);
  Message value = decode(decode(e.find(5)->second.bytes).find(1)->second.bytes);
  CHECK(value.find(1)->second.bytes == "weights");
  Message h = decode(value.find(5)->second.bytes);
  CHECK(as_double(h.find(1)->second) == -1);
  CHECK(as_double(h.find(2)->second) == 3);
  CHECK(as_double(h.find(3)->second) == 6);
  CHECK(as_double(h.find(4)->second) == 5.5);
  CHECK(as_double(h.find(5)->second) == 1 + 0 + 0.25 + 1 + 4 + 9);
  std::string limits = h.find(6)->second.bytes, counts = h.find(7)->second.bytes;
  REQUIRE(limits.size() == 32);
  REQUIRE(counts.size() == 32);
  double lim[4], cnt[4];
  std::memcpy(lim, limits.data(), 32);
  std::memcpy(cnt, counts.data(), 32);
  CHECK((lim[0] == 0 && lim[1] == 1 && lim[2] == 2 && lim[3] == 3));
  CHECK((cnt[0] == 1 && cnt[1] == 2 && cnt[2] == 1 && cnt[3] == 2));  // [-1,0) [0,1) [1,2) [2,3]
}

TEST_CASE("event writers refuse bad histograms and paths", "[io]") {
  TempDir dir;
  io::EventWriter w(dir / "run");
  CHECK_THROWS_WITH(w.histogram("h", empty({0}, DType::Float32), 1), Contains("the tensor is empty"));
  Tensor nan = empty({2}, DType::Float32);
  nan.data<float>()[0] = 1;
  nan.data<float>()[1] = std::nanf("");
  CHECK_THROWS_WITH(w.histogram("h", nan, 1), Contains("finite values"));
  Tensor one = empty({3}, DType::Int32);
  for (int i = 0; i < 3; ++i) one.data<int32_t>()[i] = 4;
  w.histogram("const", one, 1);  // one bucket
  // A range wider than DBL_MAX: every value still lands in a bucket.
  Tensor wide = empty({3}, DType::Float64);
  double wv[] = {-1.5e308, 0, 1.7e308};
  std::memcpy(wide.raw_data(), wv, sizeof wv);
  std::string ev = io::event_histogram("wide", wide, 1, 0.0, 10);
  Message h = decode(decode(decode(decode(ev).find(5)->second.bytes).find(1)->second.bytes).find(5)->second.bytes);
  std::string counts = h.find(7)->second.bytes, limits = h.find(6)->second.bytes;
  double total = 0;
  for (size_t i = 0; i < counts.size(); i += 8) {
    double c, l;
    std::memcpy(&c, counts.data() + i, 8);
    std::memcpy(&l, limits.data() + i, 8);
    total += c;
    CHECK(std::isfinite(l));
  }
  CHECK(total == 3);
  io::EventWriter w2(dir / "run");
  CHECK(w2.path() != w.path());
  write_bytes(dir / "file", "x");
  CHECK_THROWS_WITH(io::EventWriter(dir / "file"), Contains("not a directory"));
}

#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_set>

#include "io/file.h"
#include "tensor/ops.h"

namespace dl::io {

namespace {

constexpr bool kLittle = std::endian::native == std::endian::little;

// ---- dtypes ----------------------------------------------------------------------------

enum class Widen : uint8_t { None, I8, I16, U16, U32 };

struct StDType {
  const char* name;
  int bytes;       // in the file
  DType dtype;     // in dlua
  Widen widen;
  bool supported;
};

// Every dtype of the reference implementation, so that an unsupported one gets a
// different message from a misspelt one.
constexpr StDType kDTypes[] = {
    {"BOOL", 1, DType::Bool, Widen::None, true},
    {"U8", 1, DType::UInt8, Widen::None, true},
    {"I32", 4, DType::Int32, Widen::None, true},
    {"I64", 8, DType::Int64, Widen::None, true},
    {"F32", 4, DType::Float32, Widen::None, true},
    {"F64", 8, DType::Float64, Widen::None, true},
    {"F16", 2, DType::Float16, Widen::None, true},
    {"BF16", 2, DType::BFloat16, Widen::None, true},
    {"I8", 1, DType::Int32, Widen::I8, true},
    {"I16", 2, DType::Int32, Widen::I16, true},
    {"U16", 2, DType::Int32, Widen::U16, true},
    {"U32", 4, DType::Int64, Widen::U32, true},
    {"U64", 8, DType::Int64, Widen::None, false},
    {"C64", 8, DType::Float32, Widen::None, false},
    {"F8_E4M3", 1, DType::Float32, Widen::None, false},
    {"F8_E5M2", 1, DType::Float32, Widen::None, false},
    {"F8_E8M0", 1, DType::Float32, Widen::None, false},
    {"F6_E2M3", 1, DType::Float32, Widen::None, false},
    {"F6_E3M2", 1, DType::Float32, Widen::None, false},
    {"F4", 1, DType::Float32, Widen::None, false},
};

const char* st_name(DType t) {
  switch (t) {
    case DType::Bool: return "BOOL";
    case DType::UInt8: return "U8";
    case DType::Int32: return "I32";
    case DType::Int64: return "I64";
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Float16: return "F16";
    case DType::BFloat16: return "BF16";
  }
  return "?";
}

// ---- UTF-8 and JSON text -----------------------------------------------------------------

// Length of the valid UTF-8 sequence starting at s[i], or 0 (overlong forms, surrogates
// and code points above U+10FFFF are invalid).
size_t utf8_seq(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_seq(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

void json_string(std::string& out, std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// A printable excerpt of a name for error messages.
std::string quoted(std::string_view s) {
  std::string out;
  json_string(out, s.size() > 80 ? s.substr(0, 80) : s);
  if (s.size() > 80) out.insert(out.size() - 1, "...");
  return out;
}

// ---- the header parser ---------------------------------------------------------------------

// A pull parser for exactly the safetensors schema: it never recurses, never skips an
// unknown value, and keeps nothing but the entries it returns, so hostile nesting or
// size cannot exhaust the stack or the heap (Note [Reading hostile files]).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  [[noreturn]] void bad(const std::string& what) const {
    fail(ErrorKind::Value, where_, ": invalid header: ", what, " (at byte ", pos_ + 8, " of the file)");
  }
  [[noreturn]] void bad_json(const char* expected) const {
    if (pos_ >= s_.size()) bad(std::string("unexpected end of the header, expected ") + expected);
    std::string got;
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7F) got = std::string("'") + char(c) + "'";
    else got = "byte " + std::to_string(int(c));
    bad(std::string("bad JSON: expected ") + expected + ", got " + got);
  }

  void ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool peek(char c) {
    ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c, const char* what) {
    if (!peek(c)) bad_json(what);
    ++pos_;
  }
  bool at_end() {
    ws();
    return pos_ >= s_.size();
  }
  const std::string& where() const { return where_; }

  // Object members: call begin_object(), then more(first) before each member.
  void begin_object(const char* what) { expect('{', what); }
  bool more_members(bool first) {
    if (peek('}')) {
      ++pos_;
      return false;
    }
    if (!first) expect(',', "',' or '}'");
    return true;
  }
  std::string key() {
    std::string k = string_value("a member name (a string)");
    expect(':', "':'");
    return k;
  }

  std::string string_value(const char* what) {
    if (!peek('"')) bad_json(what);
    ++pos_;
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) bad("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) bad("control character in a string");
      if (c == '\\') {
        if (++pos_ >= s_.size()) bad("unterminated string");
        char e = s_[pos_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = hex4();
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (pos_ + 1 >= s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
                bad("unpaired surrogate in a \\u escape");
              pos_ += 2;
              uint32_t lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) bad("unpaired surrogate in a \\u escape");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              bad("unpaired surrogate in a \\u escape");
            }
            append_utf8(out, cp);
            break;
          }
          default: --pos_; bad("invalid escape in a string");
        }
        continue;
      }
      size_t n = utf8_seq(s_, pos_);
      if (!n) bad("invalid UTF-8 in a string");
      out.append(s_.data() + pos_, n);
      pos_ += n;
    }
  }

  // `noun` is "size" or "offset", for messages.
  uint64_t uint_value(const char* noun) {
    ws();
    size_t start = pos_;
    const std::string a = std::string(noun[0] == 'o' ? "an " : "a ") + noun;
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') bad_json((a + " (a non-negative integer)").c_str());
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      uint64_t d = uint64_t(s_[pos_] - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) {
        pos_ = start;
        bad(a + " is too large");
      }
      v = v * 10 + d;
      ++pos_;
    }
    if (s_[start] == '0' && pos_ - start > 1) {
      pos_ = start;
      bad("bad JSON: a number with a leading zero");
    }
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) {
      pos_ = start;
      bad(a + " must be a whole number");
    }
    return v;
  }

  bool null_value() {
    ws();
    if (s_.substr(pos_, 4) == "null") {
      pos_ += 4;
      return true;
    }
    return false;
  }

 private:
  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) bad("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else bad("invalid \\u escape");
    }
    return v;
  }

  std::string_view s_;
  const std::string& where_;
  size_t pos_ = 0;
};

struct Entry {
  std::string name;
  const StDType* dt = nullptr;
  Shape shape;
  uint64_t begin = 0, end = 0;
  uint64_t file_bytes = 0;   // numel * dt->bytes
};

struct Header {
  std::vector<Entry> entries;
  Metadata metadata;
};

const StDType& parse_dtype(HeaderParser& p, const std::string& tensor) {
  std::string name = p.string_value("a dtype string");
  for (const StDType& d : kDTypes) {
    if (name != d.name) continue;
    if (!d.supported) {
      fail(ErrorKind::Type, p.where(), ": tensor ", quoted(tensor), " has dtype ", d.name,
           ", which dlua does not support (supported: BOOL, U8, I8, I16, U16, I32, U32, I64, "
           "F16, BF16, F32, F64)");
    }
    return d;
  }
  p.bad("tensor " + quoted(tensor) + ": unknown dtype " + quoted(name));
}

Entry parse_tensor(HeaderParser& p, std::string name) {
  Entry e;
  e.name = std::move(name);
  const std::string tq = quoted(e.name);
  p.begin_object(("an object describing tensor " + tq).c_str());
  bool has_dtype = false, has_shape = false, has_offsets = false;
  for (bool first = true; p.more_members(first); first = false) {
    std::string field = p.key();
    if (field == "dtype") {
      if (has_dtype) p.bad("tensor " + tq + ": duplicate field \"dtype\"");
      has_dtype = true;
      e.dt = &parse_dtype(p, e.name);
    } else if (field == "shape") {
      if (has_shape) p.bad("tensor " + tq + ": duplicate field \"shape\"");
      has_shape = true;
      p.expect('[', "'[' (the shape, a list of sizes)");
      for (bool f = true; !p.peek(']'); f = false) {
        if (!f) p.expect(',', "',' or ']'");
        uint64_t d = p.uint_value("size");
        if (d > uint64_t(std::numeric_limits<int64_t>::max())) p.bad("tensor " + tq + ": size is too large");
        if (e.shape.size() == kMaxDims)
          p.bad("tensor " + tq + ": more than " + std::to_string(kMaxDims) +
                " dimensions (dlua supports at most " + std::to_string(kMaxDims) + ")");
        e.shape.push_back(int64_t(d));
      }
      p.expect(']', "']'");
    } else if (field == "data_offsets") {
      if (has_offsets) p.bad("tensor " + tq + ": duplicate field \"data_offsets\"");
      has_offsets = true;
      p.expect('[', "'[' (data_offsets, [begin, end])");
      e.begin = p.uint_value("offset");
      p.expect(',', "',' (data_offsets has two entries)");
      e.end = p.uint_value("offset");
      p.expect(']', "']' (data_offsets has two entries)");
    } else {
      p.bad("tensor " + tq + ": unknown field " + quoted(field) +
            " (expected dtype, shape and data_offsets)");
    }
  }
  if (!has_dtype || !has_shape || !has_offsets) {
    p.bad("tensor " + tq + ": missing field \"" +
          std::string(!has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets") + "\"");
  }
  uint64_t numel = 1;
  for (int64_t d : e.shape) {
    if (__builtin_mul_overflow(numel, uint64_t(d), &numel))
      p.bad("tensor " + tq + ": the number of elements overflows");
  }
  if (numel > uint64_t(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, uint64_t(e.dt->bytes), &e.file_bytes))
    p.bad("tensor " + tq + ": the byte size overflows");
  return e;
}

Header parse_header(std::string_view text, const std::string& where) {
  HeaderParser p(text, where);
  Header h;
  if (text.empty() || text[0] != '{') p.bad("it must start with '{' (is this a safetensors file?)");
  p.begin_object("'{'");
  std::unordered_set<std::string> seen;
  bool has_meta = false;
  for (bool first = true; p.more_members(first); first = false) {
    std::string key = p.key();
    if (key == "__metadata__") {
      if (has_meta) p.bad("duplicate key \"__metadata__\"");
      has_meta = true;
      if (p.null_value()) continue;
      p.begin_object("an object of strings (__metadata__)");
      std::unordered_set<std::string> meta_seen;
      for (bool f = true; p.more_members(f); f = false) {
        std::string k = p.key();
        std::string v = p.string_value("a string value (__metadata__ holds only strings)");
        if (!meta_seen.insert(k).second) p.bad("duplicate __metadata__ key " + quoted(k));
        h.metadata.emplace_back(std::move(k), std::move(v));
      }
      continue;
    }
    if (!seen.insert(key).second) p.bad("duplicate tensor name " + quoted(key));
    h.entries.push_back(parse_tensor(p, std::move(key)));
  }
  if (!p.at_end()) p.bad_json("nothing but padding after the header object");
  return h;
}

// Checks that the tensors tile the data section [0, data_len) exactly.
void check_offsets(std::vector<Entry>& entries, uint64_t data_len, const std::string& where) {
  for (const Entry& e : entries) {
    if (e.end < e.begin)
      fail(ErrorKind::Value, where, ": tensor ", quoted(e.name), ": data_offsets [", e.begin, ", ",
           e.end, "] end before they begin");
    if (e.end - e.begin != e.file_bytes)
      fail(ErrorKind::Value, where, ": tensor ", quoted(e.name), ": data_offsets [", e.begin, ", ",
           e.end, "] hold ", e.end - e.begin, " bytes, but dtype ", e.dt->name, " and shape ",
           e.shape, " need ", e.file_bytes);
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < expect)
      fail(ErrorKind::Value, where, ": tensors ", quoted(prev->name), " (data_offsets [", prev->begin,
           ", ", prev->end, "]) and ", quoted(e.name), " (data_offsets [", e.begin, ", ", e.end,
           "]) overlap");
    if (e.begin > expect)
      fail(ErrorKind::Value, where, ": no tensor covers data bytes [", expect, ", ", e.begin,
           ") before tensor ", quoted(e.name));
    expect = e.end;
    prev = &e;
  }
  if (expect > data_len)
    fail(ErrorKind::Value, where, ": truncated file: header says ", expect,
         " data bytes, file has ", data_len);
  if (expect < data_len)
    fail(ErrorKind::Value, where, ": ", data_len - expect, " bytes after the last tensor: header says ",
         expect, " data bytes, file has ", data_len);
}

// ---- conversions -----------------------------------------------------------------------

template <typename T>
T load_le(const unsigned char* p) {
  using U = std::conditional_t<sizeof(T) == 1, uint8_t,
            std::conditional_t<sizeof(T) == 2, uint16_t,
            std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  U u = 0;
  for (size_t i = 0; i < sizeof(T); ++i) u |= U(U(p[i]) << (8 * i));
  return std::bit_cast<T>(u);
}

// The file's bytes for `e`, read into the start of `t`'s buffer, become `t`'s values.
// Widening runs from the last element down so that it can work in place.
void convert_in_place(const Entry& e, Tensor& t) {
  auto* raw = static_cast<unsigned char*>(t.raw_data());
  int64_t n = t.numel();
  auto widen = [&](auto from_file, auto* dst) {
    for (int64_t i = n - 1; i >= 0; --i) {
      auto v = from_file(raw + i * e.dt->bytes);
      dst[i] = v;
    }
  };
  switch (e.dt->widen) {
    case Widen::I8: widen([](const unsigned char* p) { return int32_t(int8_t(p[0])); }, t.data<int32_t>()); return;
    case Widen::I16: widen([](const unsigned char* p) { return int32_t(load_le<int16_t>(p)); }, t.data<int32_t>()); return;
    case Widen::U16: widen([](const unsigned char* p) { return int32_t(load_le<uint16_t>(p)); }, t.data<int32_t>()); return;
    case Widen::U32: widen([](const unsigned char* p) { return int64_t(load_le<uint32_t>(p)); }, t.data<int64_t>()); return;
    case Widen::None: break;
  }
  if (e.dt->dtype == DType::Bool) {
    for (int64_t i = 0; i < n; ++i)
      if (raw[i] > 1) fail(ErrorKind::Value, "tensor ", quoted(e.name), ": BOOL element ", i, " holds ", int(raw[i]), " (expected 0 or 1)");
  }
  if (!kLittle && e.dt->bytes > 1) {
    for (int64_t i = 0; i < n; ++i) std::reverse(raw + i * e.dt->bytes, raw + (i + 1) * e.dt->bytes);
  }
}

// ---- reading -----------------------------------------------------------------------------

struct Source {
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  virtual void read(uint64_t offset, void* dst, size_t n) = 0;
};

struct FileSource : Source {
  int fd = -1;
  uint64_t n = 0;
  const std::string& path;
  const char* op;
  FileSource(const std::string& p, const char* o) : path(p), op(o) {
    fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(ErrorKind::Value, op, ": ", p, ": cannot open: ", std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      fail(ErrorKind::Value, op, ": ", p, ": not a regular file");
    }
    n = uint64_t(st.st_size);
  }
  ~FileSource() override { ::close(fd); }
  uint64_t size() const override { return n; }
  void read(uint64_t offset, void* dst, size_t len) override { read_exact(fd, dst, len, offset, path, op); }
};

struct MemorySource : Source {
  const unsigned char* p;
  uint64_t n;
  MemorySource(const void* d, size_t len) : p(static_cast<const unsigned char*>(d)), n(len) {}
  uint64_t size() const override { return n; }
  void read(uint64_t offset, void* dst, size_t len) override {
    DL_ASSERT(offset <= n && len <= n - offset);
    if (len) std::memcpy(dst, p + offset, len);
  }
};

SafetensorsFile load_from(Source& src, const std::string& name, const char* op) {
  const std::string where = std::string(op) + ": " + name;
  uint64_t size = src.size();
  if (size < 8)
    fail(ErrorKind::Value, where, ": truncated file: ", size, " bytes, too short for the 8-byte header length");
  unsigned char lenbuf[8];
  src.read(0, lenbuf, 8);
  uint64_t hlen = load_le<uint64_t>(lenbuf);
  if (hlen > kMaxSafetensorsHeader)
    fail(ErrorKind::Value, where, ": header length ", hlen, " exceeds the limit of ",
         kMaxSafetensorsHeader, " bytes (is this a safetensors file?)");
  if (hlen > size - 8)
    fail(ErrorKind::Value, where, ": truncated file: header says ", hlen,
         " header bytes, file has ", size - 8, " after the length");
  std::string text(hlen, '\0');
  src.read(8, text.data(), hlen);
  Header h = parse_header(text, where);
  text = std::string();
  uint64_t data_start = 8 + hlen;
  check_offsets(h.entries, size - data_start, where);

  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  out.tensors.reserve(h.entries.size());
  for (const Entry& e : h.entries) {
    Tensor t = empty(e.shape, e.dt->dtype, Device{}, op);
    if (e.file_bytes > 0) {
      src.read(data_start + e.begin, t.raw_data(), size_t(e.file_bytes));
      try {
        convert_in_place(e, t);
      } catch (const Error& err) {
        throw Error(err.kind(), where + ": " + err.what());
      }
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

// ---- writing -----------------------------------------------------------------------------

struct Prepared {
  std::string header;                       // padded
  std::vector<std::pair<std::string, Tensor>> order;   // host, contiguous
};

Prepared prepare(const NamedTensors& tensors, const Metadata& metadata, const char* op) {
  Prepared p;
  std::unordered_set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    DL_CHECK(t.defined(), op, ": tensor ", quoted(name), " is undefined");
    DL_CHECK(name != "__metadata__", op, ": \"__metadata__\" is reserved and cannot name a tensor");
    DL_CHECK(valid_utf8(name), op, ": tensor name ", quoted(name), " is not valid UTF-8");
    DL_CHECK(seen.insert(name).second, op, ": duplicate tensor name ", quoted(name));
    Tensor h = t;
    if (!h.device().is_cpu()) {
      Tensor host = empty(t.shape(), t.dtype(), Device{}, op);
      copy_(host, t);
      h = host;
    }
    p.order.emplace_back(name, contiguous(h));
  }
  Metadata meta = metadata;
  std::sort(meta.begin(), meta.end());
  for (size_t i = 0; i < meta.size(); ++i) {
    DL_CHECK(valid_utf8(meta[i].first), op, ": metadata key ", quoted(meta[i].first), " is not valid UTF-8");
    DL_CHECK(valid_utf8(meta[i].second), op, ": metadata value for ", quoted(meta[i].first),
             " is not valid UTF-8");
    DL_CHECK(i == 0 || meta[i].first != meta[i - 1].first, op, ": duplicate metadata key ",
             quoted(meta[i].first));
  }
  // Largest items first keeps every tensor aligned to its item size (the header is
  // padded to 8), as the reference implementation does.
  std::sort(p.order.begin(), p.order.end(), [](const auto& a, const auto& b) {
    size_t ia = a.second.itemsize(), ib = b.second.itemsize();
    return ia != ib ? ia > ib : a.first < b.first;
  });
  std::string& j = p.header;
  j = "{";
  if (!meta.empty()) {
    j += "\"__metadata__\":{";
    for (size_t i = 0; i < meta.size(); ++i) {
      if (i) j += ',';
      json_string(j, meta[i].first);
      j += ':';
      json_string(j, meta[i].second);
    }
    j += '}';
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : p.order) {
    if (j.size() > 1) j += ',';
    json_string(j, name);
    j += ":{\"dtype\":\"";
    j += st_name(t.dtype());
    j += "\",\"shape\":[";
    for (int d = 0; d < t.dim(); ++d) {
      if (d) j += ',';
      j += std::to_string(t.size(d));
    }
    uint64_t nbytes = uint64_t(t.numel()) * t.itemsize();
    j += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + nbytes) + "]}";
    offset += nbytes;
  }
  j += '}';
  j.append((8 - j.size() % 8) % 8, ' ');
  DL_CHECK(j.size() <= kMaxSafetensorsHeader, op, ": the header would take ", j.size(),
           " bytes, more than the format's limit of ", kMaxSafetensorsHeader);
  return p;
}

template <typename Sink>
void emit(Sink& sink, const Prepared& p) {
  unsigned char len[8];
  uint64_t n = p.header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  sink.write(len, 8);
  sink.write(p.header.data(), p.header.size());
  for (const auto& [name, t] : p.order) {
    size_t nbytes = size_t(t.numel()) * t.itemsize();
    if (nbytes == 0) continue;
    const auto* raw = static_cast<const unsigned char*>(t.raw_data());
    if (kLittle || t.itemsize() == 1) {
      sink.write(raw, nbytes);
      continue;
    }
    std::vector<unsigned char> buf;
    size_t isz = t.itemsize();
    for (size_t at = 0; at < nbytes;) {
      size_t chunk = std::min(nbytes - at, size_t(1) << 16);
      buf.assign(raw + at, raw + at + chunk);
      for (size_t i = 0; i < chunk; i += isz) std::reverse(buf.begin() + i, buf.begin() + i + isz);
      sink.write(buf.data(), chunk);
      at += chunk;
    }
  }
}

struct StringSink {
  std::string out;
  void write(const void* d, size_t n) { out.append(static_cast<const char*>(d), n); }
};

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata,
                      const char* op) {
  Prepared p = prepare(tensors, metadata, op);
  AtomicFile f(path, op);
  emit(f, p);
  f.commit();
}

std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata, const char* op) {
  Prepared p = prepare(tensors, metadata, op);
  StringSink s;
  emit(s, p);
  return std::move(s.out);
}

SafetensorsFile load_safetensors(const std::string& path, const char* op) {
  FileSource src(path, op);
  return load_from(src, path, op);
}

SafetensorsFile parse_safetensors(const void* data, size_t n, const std::string& name, const char* op) {
  MemorySource src(data, n);
  return load_from(src, name, op);
}

}  // namespace dl::io

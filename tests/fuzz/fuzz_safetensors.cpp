// Fuzz target: the safetensors reader (io/safetensors.h) on hostile bytes.
//
// Every input is parsed from memory (the path the file reader shares, past the
// open/stat); one input in 16 also goes through a real file, so FileSource's reads are
// covered. Oracles, besides ASan/UBSan: only dl::Error may come out, and never an
// internal one (a failed assertion); a file the reader
// accepts holds no more data than its size; and what it accepts survives a round trip
// through the writer (written again and read back, the same names, metadata, shapes,
// dtypes and bytes). An accepted file the writer refuses (say, a name that is not
// valid UTF-8) is not a failure: the reader is allowed to be the more lenient side.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "io/safetensors.h"
#include "tensor/error.h"

namespace {

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "fuzz_safetensors: %s\n", what.c_str());
  std::abort();
}

std::string g_path;

struct Summary {
  std::map<std::string, std::string> meta;
  std::map<std::string, std::string> tensors;  // name -> dtype, shape and bytes
};

Summary summarize(const dl::io::SafetensorsFile& f) {
  Summary s;
  for (const auto& [k, v] : f.metadata) s.meta[k] = v;
  for (const auto& [name, t] : f.tensors) {
    if (!t.is_contiguous()) fatal("a loaded tensor is not contiguous: " + name);
    std::string d = std::to_string(int(t.dtype())) + ":";
    for (int64_t n : t.shape()) d += std::to_string(n) + ",";
    d += ":";
    d.append(static_cast<const char*>(t.raw_data()), size_t(t.numel()) * t.itemsize());
    if (!s.tensors.emplace(name, std::move(d)).second) fatal("a name was accepted twice: " + name);
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  g_path = std::string(tmp && *tmp ? tmp : "/tmp") + "/dlua-fuzz-safetensors-" +
           std::to_string(::getpid()) + ".safetensors";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dl::io::SafetensorsFile f;
  try {
    f = dl::io::parse_safetensors(data, size, "fuzz.safetensors");
  } catch (const dl::Error& e) {
    if (e.kind() == dl::ErrorKind::Internal) fatal(std::string("internal error: ") + e.what());
    return 0;
  }
  uint64_t bytes = 0;
  for (const auto& [name, t] : f.tensors) bytes += uint64_t(t.numel()) * t.itemsize() / 4;
  // Widening (F16 -> F32, I8 -> I32) at most quadruples the data; more is invented data.
  if (bytes > size) fatal("the reader produced more data than the file holds");
  Summary first = summarize(f);

  if (size % 16 == 0 && !g_path.empty()) {
    FILE* fp = std::fopen(g_path.c_str(), "wb");
    if (!fp || std::fwrite(data, 1, size, fp) != size) fatal("cannot write " + g_path);
    std::fclose(fp);
    try {
      Summary again = summarize(dl::io::load_safetensors(g_path));
      if (again.meta != first.meta || again.tensors != first.tensors)
        fatal("reading from a file and from memory disagree");
    } catch (const dl::Error& e) {
      fatal(std::string("the file reader refused what the memory reader accepted: ") + e.what());
    }
    std::remove(g_path.c_str());
  }

  std::string written;
  try {
    written = dl::io::serialize_safetensors(f.tensors, f.metadata);
  } catch (const dl::Error&) {
    return 0;
  }
  try {
    Summary back = summarize(dl::io::parse_safetensors(written.data(), written.size(), "round trip"));
    if (back.meta != first.meta) fatal("metadata changed in a round trip");
    if (back.tensors != first.tensors) fatal("tensors changed in a round trip");
  } catch (const dl::Error& e) {
    fatal(std::string("the reader refused what the writer wrote: ") + e.what());
  }
  return 0;
}

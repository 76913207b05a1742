// The safetensors format (https://github.com/huggingface/safetensors), read and written.
//
//   dl::io::save_safetensors("model.safetensors", {{"w", w}, {"b", b}}, {{"epoch", "3"}});
//   dl::io::SafetensorsFile f = dl::io::load_safetensors("model.safetensors");
//   for (auto& [name, t] : f.tensors) ...;   // fresh contiguous cpu tensors
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"k": "v"}, "w": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [0, 24]}, ...}
// padded with spaces to a multiple of 8, then the data section: every tensor row-major,
// little-endian, at its offsets relative to the section's start.
//
// Writing: tensors sorted by item size (largest first) then by name, so that each is
// aligned to its item size; `__metadata__` first, keys sorted. The file is replaced
// atomically (io/file.h). Names must be unique and, like metadata, valid UTF-8.
//
// Note [Reading hostile files]
// A file is untrusted: a model from the internet, a checkpoint cut short by a crash.
// The header length is at most 100 MB and within the file; the JSON is parsed by a
// strict, non-recursive parser that knows the schema (so nesting and memory are
// bounded by construction); dtypes must be known, shapes at most kMaxDims dims, byte counts must equal
// numel * itemsize without overflow, and the offsets must tile the data section
// exactly (no gap, no overlap, nothing after the last tensor), as the reference
// implementation requires. Bool bytes must be 0 or 1. Everything is checked before any
// tensor is allocated; data goes into fresh tensors, and the caller gets all of them
// or an exception. F16 and BF16 load as float16 and bfloat16; I8, I16 and U16 are
// widened to int32 and U32 to int64 (dlua has no narrower integer types); other dtypes
// are refused.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace dl::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::vector<std::pair<std::string, std::string>>;

struct SafetensorsFile {
  NamedTensors tensors;   // in data-section order
  Metadata metadata;      // in header order
};

// Header lengths above this are refused (the reference implementation's limit).
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// Writes `path` atomically. `op` starts error messages: "save: model.safetensors: ...".
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata = {}, const char* op = "save");
// The bytes save_safetensors would write (for tests and in-memory use).
std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata = {},
                                  const char* op = "save");

SafetensorsFile load_safetensors(const std::string& path, const char* op = "load");
// Parses a whole file held in memory; `name` is used in messages as the path would be.
SafetensorsFile parse_safetensors(const void* data, size_t n, const std::string& name,
                                  const char* op = "load");

}  // namespace dl::io

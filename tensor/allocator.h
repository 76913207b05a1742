// Host memory: a caching allocator with 64-byte alignment.
//
// Freed blocks go to size-binned free lists (multiples of 64 up to 512 bytes, then four
// classes per power of two) and are handed out again, most recently freed first,
// without a trip to the system allocator; the cache is bounded, and large blocks that
// went unused for several collection cycles, and while four times their size was
// allocated, are given back (trim_idle). Blocks of 2 MB and more are mapped on their
// own and backed by transparent huge pages where Linux offers them (Note [Huge pages
// for large blocks] in allocator.cpp). The allocator also
// counts bytes allocated since the last reset, which the Lua binding reads to step
// its collector (docs/design.md, "Tensor memory and Lua's collector"), and enforces an optional
// byte cap (the embedding API's tensor memory limit).
#pragma once
#include <cstddef>
#include <cstdint>

namespace dl {

struct AllocatorStats {
  int64_t in_use = 0;           // bytes handed out and not yet freed
  int64_t cached = 0;           // bytes held in free lists
  int64_t peak_in_use = 0;
  int64_t allocated_since_reset = 0;
  int64_t limit = 0;            // 0: no limit
};

namespace host_allocator {
// Returns 64-byte aligned memory of at least `nbytes`; throws dl::Error (Memory) naming
// `op` when the system is out of memory or the cap would be exceeded.
void* allocate(size_t nbytes, const char* op);
void deallocate(void* p, size_t nbytes) noexcept;
AllocatorStats stats() noexcept;
// Bytes allocated since the last call (and resets the counter).
int64_t take_allocated_since_reset() noexcept;
void set_limit(int64_t bytes) noexcept;
// Returns every cached block to the system.
void empty_cache() noexcept;
// Returns the cached blocks of 1 MB or more that were already cached at the previous
// call and have not been reused since, while four times their size was allocated,
// beyond as many blocks of their size class as were handed out in any of the last
// kDemandCycles cycles (a loop's steady demand stays cached, even when a step spans
// several cycles). The Lua binding calls it after each full collection, so a large
// temporary stays resident for at most kDemandCycles collection cycles or four times
// its size of allocation, whichever is longer.
constexpr int kDemandCycles = 8;
void trim_idle() noexcept;
// Whether blocks of 2 MB and more are mapped on their own with huge pages (Linux, not
// under AddressSanitizer).
bool maps_large_blocks() noexcept;
}  // namespace host_allocator

// Device allocators (the CUDA plugin) report what they hand out and take back here, so
// that the bytes counted for the Lua collector (take_allocated_since_reset; docs/design.md,
// "Tensor memory and Lua's collector") include device tensors, whose handles are just as small.
namespace device_memory {
// Note [Device bytes and the collector]
// A device byte counts for less than a host byte: `weight` of one, the collector's base
// budget (16 MB, scripts/dlua/lifetime.lua) over the garbage a device may hold between
// collections, max(256 MB, its memory / 32). Counted byte for byte, every op on a
// 16M-float tensor (a 64 MB result) ran a full collection, and on a GPU, where such an
// op takes tens of microseconds, the collections took longer than the work
// (docs/performance.md, "On a GPU"). An allocation the device refuses still runs a
// collection and tries again (the binding's retry), so the larger garbage is bounded by
// what the device has. The plugin gives the smallest of its devices' memories at load;
// 0 (no device) counts bytes as they are.
void set_device_memory(int64_t bytes) noexcept;
double weight() noexcept;
void note_alloc(int64_t bytes) noexcept;
void note_free(int64_t bytes) noexcept;
// Device bytes held by tensors, all devices together.
int64_t in_use() noexcept;
}  // namespace device_memory

}  // namespace dl

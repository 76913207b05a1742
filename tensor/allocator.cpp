#include "tensor/allocator.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "tensor/error.h"

namespace dl::host_allocator {
namespace {

constexpr size_t kAlign = 64;
constexpr int kNumBins = 48;
constexpr int64_t kMaxCached = int64_t(1) << 30;  // keep at most 1 GiB of free blocks

// Bin of a request and the block size actually allocated for it.
int bin_of(size_t n, size_t* rounded) {
  if (n <= 512) {
    size_t r = (n + kAlign - 1) / kAlign * kAlign;
    if (r == 0) r = kAlign;
    *rounded = r;
    return static_cast<int>(r / kAlign) - 1;  // bins 0..7
  }
  int b = 10;
  while ((size_t(1) << b) < n) ++b;
  *rounded = size_t(1) << b;
  return 8 + (b - 10);
}

struct State {
  std::mutex mu;
  std::vector<void*> bins[kNumBins];
  AllocatorStats st;
};
State& state() {
  static State* s = new State();  // leaked on purpose: usable during static destruction
  return *s;
}

}  // namespace

void* allocate(size_t nbytes, const char* op) {
  size_t rounded = 0;
  int b = bin_of(nbytes, &rounded);
  State& s = state();
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (s.st.limit > 0 && s.st.in_use + int64_t(rounded) > s.st.limit)
      fail(ErrorKind::Memory, op, ": tensor memory limit exceeded (asked for ", nbytes,
           " bytes, ", s.st.in_use, " in use, limit ", s.st.limit, ")");
    s.st.in_use += rounded;
    if (s.st.in_use > s.st.peak_in_use) s.st.peak_in_use = s.st.in_use;
    s.st.allocated_since_reset += rounded;
    if (b < kNumBins && !s.bins[b].empty()) {
      void* p = s.bins[b].back();
      s.bins[b].pop_back();
      s.st.cached -= rounded;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) {
    empty_cache();
    p = std::aligned_alloc(kAlign, rounded);
  }
  if (!p) {
    std::lock_guard<std::mutex> g(s.mu);
    s.st.in_use -= rounded;
    fail(ErrorKind::Memory, op, ": out of memory allocating ", nbytes, " bytes (",
         s.st.in_use, " bytes in use)");
  }
  return p;
}

void deallocate(void* p, size_t nbytes) noexcept {
  if (!p) return;
  size_t rounded = 0;
  int b = bin_of(nbytes, &rounded);
  State& s = state();
  {
    std::lock_guard<std::mutex> g(s.mu);
    s.st.in_use -= rounded;
    if (b < kNumBins && s.st.cached + int64_t(rounded) <= kMaxCached) {
      s.bins[b].push_back(p);
      s.st.cached += rounded;
      return;
    }
  }
  std::free(p);
}

AllocatorStats stats() noexcept {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  return s.st;
}

int64_t take_allocated_since_reset() noexcept {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  int64_t n = s.st.allocated_since_reset;
  s.st.allocated_since_reset = 0;
  return n;
}

void set_limit(int64_t bytes) noexcept {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  s.st.limit = bytes > 0 ? bytes : 0;
}

void empty_cache() noexcept {
  State& s = state();
  std::vector<void*> all;
  {
    std::lock_guard<std::mutex> g(s.mu);
    for (auto& v : s.bins) {
      all.insert(all.end(), v.begin(), v.end());
      v.clear();
    }
    s.st.cached = 0;
  }
  for (void* p : all) std::free(p);
}

}  // namespace dl::host_allocator

namespace dl::device_memory {

namespace {
std::atomic<int64_t> g_device_in_use{0};
}

void note_alloc(int64_t bytes) noexcept {
  g_device_in_use.fetch_add(bytes, std::memory_order_relaxed);
  host_allocator::State& s = host_allocator::state();
  std::lock_guard<std::mutex> g(s.mu);
  s.st.allocated_since_reset += bytes;
}

void note_free(int64_t bytes) noexcept { g_device_in_use.fetch_sub(bytes, std::memory_order_relaxed); }

int64_t in_use() noexcept { return g_device_in_use.load(std::memory_order_relaxed); }

}  // namespace dl::device_memory

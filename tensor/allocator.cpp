#include "tensor/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "tensor/error.h"

namespace dl::host_allocator {
namespace {

constexpr size_t kAlign = 64;
// Size classes: multiples of 64 bytes up to 512, then four classes per power of two
// (a block is at most 25% larger than asked; powers of two alone wasted up to half,
// which the tensor memory limit counts).
constexpr int kSmallBins = 8;
constexpr int kNumBins = kSmallBins + 4 * 54;
constexpr int64_t kMaxCached = int64_t(1) << 30;  // keep at most 1 GiB of free blocks
// Blocks at least this large that sat in the cache through a whole collection cycle,
// while kIdleFactor times their size was allocated, go back to the system (trim_idle):
// a big temporary (a data set's conversion, say) must not stay resident for the rest of
// the run. The volume matters when single tensors are larger than the collector's
// budget: every op is then a cycle of its own, and a cycle alone would give back the
// blocks a loop is about to reuse (c = a + b over 10^7 floats paged in 80 MB afresh
// every 30 iterations, a page fault for each 4 KB page: docs/performance.md,
// "Measurements behind the code"). Nor does a bin give back the blocks that its recent
// demand needs: a loop of 4 MB products with a 16 MB collector budget made 4 results in
// one cycle and 5 in the next, so a block idle in one cycle was wanted again in the
// next; trimmed, it came back as fresh memory and its product took markedly longer (the
// same section). So a bin keeps at least as many blocks as it handed out in any of the
// last kDemandCycles cycles. Not just the last two: a training step can span several
// cycles and want its largest blocks in only one of them (the LSTM row of bench/, four
// cycles a call: the sequence's projections at the start and their gradients at the
// end; with two cycles of memory every call paged them in afresh, about 1,100 page
// faults and 5% of its time).
constexpr size_t kLargeBlock = size_t(1) << 20;
constexpr uint64_t kIdleFactor = 4;

// Bin of a request and the block size actually allocated for it.
int bin_of(size_t n, size_t* rounded) {
  if (n <= 512) {
    size_t r = (n + kAlign - 1) / kAlign * kAlign;
    if (r == 0) r = kAlign;
    *rounded = r;
    return static_cast<int>(r / kAlign) - 1;  // bins 0..7
  }
  int b = 9;
  while ((size_t(1) << (b + 1)) < n) ++b;  // 2^b < n <= 2^(b+1)
  size_t step = size_t(1) << (b - 2);      // four classes between 2^b and 2^(b+1)
  size_t k = (n - (size_t(1) << b) + step - 1) / step;  // 1..4
  *rounded = (size_t(1) << b) + k * step;
  return kSmallBins + 4 * (b - 9) + static_cast<int>(k) - 1;
}

// The block size of bin b (the inverse of bin_of).
size_t bin_size(int b) {
  if (b < kSmallBins) return size_t(b + 1) * kAlign;
  int p2 = 9 + (b - kSmallBins) / 4, k = (b - kSmallBins) % 4 + 1;
  return (size_t(1) << p2) + size_t(k) * (size_t(1) << (p2 - 2));
}

// Note [Huge pages for large blocks]
// A block of kHugeBlock bytes or more is mapped on its own, aligned to 2 MB, and the
// kernel is asked to back it with transparent huge pages (MADV_HUGEPAGE: honoured where
// /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or "always"). First touch of
// fresh memory is what a large block costs beyond its copy or product: on virtual
// machines a 4 KB page fault is slow enough that a large product whose result lands in
// a fresh block can take much longer (docs/performance.md, "Measurements behind the
// code"; bench/, `matmul1024`). Huge pages also spare the TLB misses of long streaming loops. What a block
// costs in memory does not change much: blocks this large are written whole.
// Not under AddressSanitizer, whose redzones around the system allocator's blocks catch
// overruns that a mapping of our own would hide.
#if defined(__SANITIZE_ADDRESS__)
#define DL_ALLOCATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DL_ALLOCATOR_ASAN 1
#endif
#endif
#if defined(__linux__) && defined(MADV_HUGEPAGE) && !defined(DL_ALLOCATOR_ASAN)
#define DL_HUGE_PAGE_BLOCKS 1
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeBlock = kHugePage;

size_t mapped_length(size_t rounded) { return (rounded + kHugePage - 1) / kHugePage * kHugePage; }

void* system_alloc(size_t rounded) {
  if (rounded < kHugeBlock) return std::aligned_alloc(kAlign, rounded);
  const size_t len = mapped_length(rounded);
  // Map one huge page more than needed, then unmap the ends around the aligned range.
  void* m = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const uintptr_t base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t start = (base + kHugePage - 1) / kHugePage * kHugePage;
  if (start > base) munmap(m, start - base);
  if (start + len < base + len + kHugePage)
    munmap(reinterpret_cast<void*>(start + len), base + kHugePage - start);
  void* p = reinterpret_cast<void*>(start);
  madvise(p, len, MADV_HUGEPAGE);  // advice only: small pages if the kernel has none
  return p;
}

void system_free(void* p, size_t rounded) {
  if (rounded < kHugeBlock)
    std::free(p);
  else
    munmap(p, mapped_length(rounded));
}
#else
void* system_alloc(size_t rounded) { return std::aligned_alloc(kAlign, rounded); }
void system_free(void* p, size_t) { std::free(p); }
#endif

struct Block {
  void* p;
  size_t size;  // as rounded by bin_of
};

struct Cached {
  void* p;
  uint64_t epoch;   // the trim epoch it was cached in
  uint64_t volume;  // State::volume when it was cached
};

struct State {
  std::mutex mu;
  std::vector<Cached> bins[kNumBins];
  AllocatorStats st;
  uint64_t epoch = 0;
  uint64_t volume = 0;  // bytes ever allocated (cache hits included)
  // Blocks of each large bin handed out in this trim cycle (demand[cycle][b], cycle =
  // epoch % kDemandCycles) and in each of the kDemandCycles - 1 before.
  uint32_t demand[kDemandCycles][kNumBins] = {};
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
    s.volume += rounded;
    if (rounded >= kLargeBlock && b < kNumBins) ++s.demand[s.epoch % kDemandCycles][b];
    if (b < kNumBins && !s.bins[b].empty()) {
      void* p = s.bins[b].back().p;  // the most recently freed: likeliest still in cache
      s.bins[b].pop_back();
      s.st.cached -= rounded;
      return p;
    }
  }
  void* p = system_alloc(rounded);
  if (!p) {
    empty_cache();
    p = system_alloc(rounded);
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
      s.bins[b].push_back(Cached{p, s.epoch, s.volume});
      s.st.cached += rounded;
      return;
    }
  }
  system_free(p, rounded);
}

void trim_idle() noexcept {
  State& s = state();
  std::vector<Block> idle;
  {
    std::lock_guard<std::mutex> g(s.mu);
    const int next = int((s.epoch + 1) % kDemandCycles);   // the oldest cycle's row, reused
    for (int b = 0; b < kNumBins; ++b) {
      auto& v = s.bins[b];
      size_t keep = 0;
      for (const auto& cycle : s.demand) keep = std::max<size_t>(keep, cycle[b]);
      s.demand[next][b] = 0;
      if (v.size() <= keep) continue;
      size_t rounded = bin_size(b);
      if (rounded < kLargeBlock) continue;
      // Oldest first (blocks are cached at the back and reused from there).
      size_t kept = 0, surplus = v.size() - keep;
      for (const Cached& c : v) {
        if (surplus > 0 && c.epoch < s.epoch && s.volume - c.volume >= kIdleFactor * rounded) {
          --surplus;
          idle.push_back(Block{c.p, rounded});
          s.st.cached -= int64_t(rounded);
        } else {
          v[kept++] = c;
        }
      }
      v.resize(kept);
    }
    ++s.epoch;
  }
  for (const Block& k : idle) system_free(k.p, k.size);
}

bool maps_large_blocks() noexcept {
#ifdef DL_HUGE_PAGE_BLOCKS
  return true;
#else
  return false;
#endif
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
  std::vector<Block> all;
  {
    std::lock_guard<std::mutex> g(s.mu);
    for (int b = 0; b < kNumBins; ++b) {
      for (const Cached& c : s.bins[b]) all.push_back(Block{c.p, bin_size(b)});
      s.bins[b].clear();
    }
    s.st.cached = 0;
  }
  for (const Block& k : all) system_free(k.p, k.size);
}

}  // namespace dl::host_allocator

namespace dl::device_memory {

namespace {
std::atomic<int64_t> g_device_in_use{0};
std::atomic<double> g_weight{1.0};
constexpr double kBaseBudget = 16.0 * (1 << 20);   // scripts/dlua/lifetime.lua's BASE_BUDGET
constexpr double kMinGarbage = 256.0 * (1 << 20);
}

void set_device_memory(int64_t bytes) noexcept {
  const double garbage = bytes > 0 ? std::max(kMinGarbage, double(bytes) / 32) : kBaseBudget;
  g_weight.store(kBaseBudget / garbage, std::memory_order_relaxed);
}

double weight() noexcept { return g_weight.load(std::memory_order_relaxed); }

void note_alloc(int64_t bytes) noexcept {
  g_device_in_use.fetch_add(bytes, std::memory_order_relaxed);
  const int64_t counted = int64_t(double(bytes) * weight() + 0.5);
  host_allocator::State& s = host_allocator::state();
  std::lock_guard<std::mutex> g(s.mu);
  s.st.allocated_since_reset += counted;
}

void note_free(int64_t bytes) noexcept { g_device_in_use.fetch_sub(bytes, std::memory_order_relaxed); }

int64_t in_use() noexcept { return g_device_in_use.load(std::memory_order_relaxed); }

}  // namespace dl::device_memory

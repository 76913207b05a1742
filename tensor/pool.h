// Per-thread free lists for the engine's small, fixed-size objects (TensorImpl,
// Storage): every op makes one of each, and glibc's malloc for objects of their size
// (past its fast bins) was about a fifth of a small op's time (bench/, `a + b` on 16
// elements). A class opts in with DL_POOLED(Class).
//
// Each thread keeps up to kMaxCached blocks of each size; an object freed on another
// thread than the one that made it simply joins that thread's list. At thread exit the
// list is given back, and blocks freed after that go straight to the heap. Under
// AddressSanitizer the pool is off, so that a use after free is still reported.
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>

namespace dl::detail {

#if defined(__SANITIZE_ADDRESS__)  // GCC
inline constexpr bool kPoolObjects = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang
inline constexpr bool kPoolObjects = false;
#else
inline constexpr bool kPoolObjects = true;
#endif
#else
inline constexpr bool kPoolObjects = true;
#endif

template <size_t Size>
class ObjectPool {
  static_assert(Size >= sizeof(void*), "a pooled block holds the free list's link");
  // Up to 8 MB of blocks per size and thread. Tensor handles die in batches, a
  // collection cycle's worth at a time (Note [Handles released by a sweep, not by
  // finalizers] in scripts/dlua/lifetime.lua): a recorded chain of 16-element ops
  // released about 9,000 handles per sweep, each with a TensorImpl, a Storage and most
  // with a node, and with a cap of 4,096 blocks half its nodes and a fifth of its other
  // objects came from malloc and went back to free (12% of its instructions; 930 -> 885
  // million with this cap). The blocks kept were all in use at once a moment before,
  // so the cap raises no peak.
  static constexpr uint32_t kMaxCached = uint32_t((size_t(8) << 20) / Size);

  struct Block { Block* next; };
  // Trivially destructible, so that it stays usable after the Reaper below has run.
  struct List {
    Block* head;
    uint32_t count;
    bool closed;
    bool reaped;   // the Reaper is registered
  };
  static List& list() noexcept {
    static thread_local List l{nullptr, 0, false, false};
    return l;
  }
  // Registered on the list's first block, not touched again: a thread-local with a
  // destructor costs a guard check on every access.
  static void register_reaper(List& l) noexcept {
    static thread_local Reaper reaper;  // frees the list at thread exit
    (void)reaper;
    l.reaped = true;
  }
  struct Reaper {
    ~Reaper() {
      List& l = list();
      l.closed = true;
      while (l.head) {
        Block* b = l.head;
        l.head = b->next;
        ::operator delete(b);
      }
      l.count = 0;
    }
  };

 public:
  // Blocks this thread's list holds now, and at most.
  static uint32_t cached() noexcept { return list().count; }
  static constexpr uint32_t capacity() noexcept { return kMaxCached; }

  static void* allocate(size_t n) {
    List& l = list();
    if (kPoolObjects && n == Size && l.head) {
      Block* b = l.head;
      l.head = b->next;
      --l.count;
      return b;
    }
    return ::operator new(n);
  }

  static void deallocate(void* p, size_t n) noexcept {
    List& l = list();
    if (!kPoolObjects || n != Size || l.closed || l.count >= kMaxCached) {
      ::operator delete(p);
      return;
    }
    if (!l.reaped) register_reaper(l);
    Block* b = static_cast<Block*>(p);
    b->next = l.head;
    l.head = b;
    ++l.count;
  }
};

}  // namespace dl::detail

// Inside a class: its objects come from the per-thread pool of their size.
#define DL_POOLED(Class)                                                          \
  static void* operator new(size_t n) { return ::dl::detail::ObjectPool<sizeof(Class)>::allocate(n); } \
  static void operator delete(void* p, size_t n) noexcept {                       \
    ::dl::detail::ObjectPool<sizeof(Class)>::deallocate(p, n);                    \
  }

#include "bindings/handles.h"

#include <atomic>
#include <mutex>
#include <utility>

#include "tensor/allocator.h"
#include "tensor/error.h"

namespace dl::bind {

namespace {

constexpr uint32_t kChunkBits = 12;
constexpr uint32_t kChunkSize = 1u << kChunkBits;   // slots per chunk
constexpr uint32_t kMaxChunks = 1u << 12;            // 16M live tensors at most
constexpr uint32_t kGenMask = (1u << 21) - 1;        // ids stay below 2^53
constexpr uint32_t kNoSlot = 0xffffffffu;

struct Slot {
  Tensor tensor;
  uint32_t gen = 1;           // the generation the next id of this slot gets
  uint32_t next_free = kNoSlot;
};

struct Table {
  std::atomic<Slot*> chunks[kMaxChunks] = {};
  std::mutex mu;              // guards allocation and the free list
  uint32_t free_head = kNoSlot;
  uint32_t used = 0;          // slots ever handed out
  std::atomic<int64_t> live{0};
};

Table& table() {
  static Table* t = new Table();  // never destroyed: finalizers may run at exit
  return *t;
}

double g_total = 0;  // written under Table::mu

Slot* slot_of(uint64_t id) noexcept {
  uint32_t slot = uint32_t(id);
  uint32_t chunk = slot >> kChunkBits;
  if (chunk >= kMaxChunks) return nullptr;
  Slot* c = table().chunks[chunk].load(std::memory_order_acquire);
  return c ? &c[slot & (kChunkSize - 1)] : nullptr;
}

}  // namespace

uint64_t handle_add(Tensor t) {
  DL_ASSERT(t.defined());
  Table& tb = table();
  uint32_t slot;
  Slot* s;
  {
    std::lock_guard<std::mutex> g(tb.mu);
    // Count what the engine allocated since the last handle (docs/design.md, "Tensor memory and
    // Lua's collector").
    g_total += double(host_allocator::take_allocated_since_reset());
    if (tb.free_head != kNoSlot) {
      slot = tb.free_head;
      s = slot_of(slot);
      tb.free_head = s->next_free;
    } else {
      slot = tb.used;
      uint32_t chunk = slot >> kChunkBits;
      if (chunk >= kMaxChunks)
        fail(ErrorKind::Memory, "tensor: too many live tensors (", int64_t(kMaxChunks) * kChunkSize, ")");
      if (!tb.chunks[chunk].load(std::memory_order_relaxed))
        tb.chunks[chunk].store(new Slot[kChunkSize], std::memory_order_release);
      ++tb.used;
      s = slot_of(slot);
    }
    s->next_free = kNoSlot;
    s->tensor = std::move(t);
  }
  tb.live.fetch_add(1, std::memory_order_relaxed);
  return (uint64_t(s->gen) << 32) | slot;
}

bool handle_valid(uint64_t id) noexcept { return handle_find(id) != nullptr; }

const Tensor* handle_find(uint64_t id) noexcept {
  Slot* s = slot_of(id);
  if (!s || s->gen != uint32_t(id >> 32) || !s->tensor.defined()) return nullptr;
  return &s->tensor;
}

const Tensor& handle_get(uint64_t id, const char* op) {
  const Tensor* t = handle_find(id);
  if (!t) fail(ErrorKind::Value, op, ": invalid tensor (released, or not a dlua tensor)");
  return *t;
}

void handle_replace(uint64_t id, Tensor t, const char* op) {
  DL_ASSERT(t.defined());
  Slot* s = slot_of(id);
  Tensor old;
  {
    std::lock_guard<std::mutex> g(table().mu);
    if (!s || s->gen != uint32_t(id >> 32) || !s->tensor.defined())
      fail(ErrorKind::Value, op, ": invalid tensor (released, or not a dlua tensor)");
    old = std::move(s->tensor);
    s->tensor = std::move(t);
  }
  // `old` is released here, outside the lock.
}

void handle_release(uint64_t id) noexcept {
  Slot* s = slot_of(id);
  if (!s) return;
  Tensor dead;
  Table& tb = table();
  {
    std::lock_guard<std::mutex> g(tb.mu);
    if (s->gen != uint32_t(id >> 32) || !s->tensor.defined()) return;
    dead = std::move(s->tensor);
    s->tensor = Tensor();
    s->gen = s->gen >= kGenMask ? 1 : s->gen + 1;   // 1 .. 2^21 - 1, never 0
    s->next_free = tb.free_head;
    tb.free_head = uint32_t(id);
  }
  tb.live.fetch_sub(1, std::memory_order_relaxed);
  // `dead` frees its memory here, outside the lock.
}

int64_t handle_count() noexcept { return table().live.load(std::memory_order_relaxed); }

const double* allocated_total() noexcept { return &g_total; }

}  // namespace dl::bind

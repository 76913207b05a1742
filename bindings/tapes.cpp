// Tapes: the owners of small recorded values held inline (tapes.h).
//
// Note [Recorded values on the tape]
// A small result is held inline in its Lua value (Note [Small tensors inline] in
// value.cpp), except when it was recorded: its history (the node that made it, and
// through it the graph) must stay reachable from the value for as long as a gradient
// may be taken through it. As a handle, each such result cost a lock to register and
// another to release, Lua-side tracking, and, worse, the graph stayed alive until the
// collector found the handle dead: a recorded chain of 16-element ops pinned about
// 1.2 KB of engine objects per op, so collections had to run every few thousand ops
// (Note [Handles released by a sweep, not by finalizers] in scripts/dlua/tensor.lua),
// each marking the whole Lua heap, and the objects went back to the pools cold.
//
// API.md says the tape is "played backwards, then discarded", and that is what this
// file does. Every gradient scope opened from Lua (dl_grad_enter) opens a tape; a
// small recorded result is kept on the innermost open tape, and its Lua value holds
// its elements inline plus (tape serial, slot). While the tape lives, the engine reads
// the value as the kept tensor, history and all; once the tape is discarded the value
// reads as its inline elements, a constant, as a TensorFlow tensor computed under a
// GradientTape is once the tape is gone. The tape also notes the recorded tensors that
// went to Lua as handles (large ones, views, a promoted value) and drops their history
// when it is discarded, so that every value recorded under a tape, whatever its size,
// is a constant afterwards. A tape is discarded
// - when it closes inside another gradient's scope: never on its own; the enclosing
//   tape adopts it, since its values are part of the graph that the enclosing gradient
//   differentiates (dl.grad(dl.grad(f)));
// - for an outermost scope, right after the gradient is taken (dl.grad,
//   implicit_grad: tape_done), or when a GradientTape object that holds it lets it go
//   (after its gradient, or when it is collected);
// - at the latest when the next outermost scope opens (a gradient that raised an
//   error before it was taken leaves its tape pending).
// So the graph of a gradient goes back to the pools when the gradient has been taken,
// warm, with no collection involved. A value's serial is never reused (a 64-bit
// counter), so a stale value can never reach a later tape's slot.
//
// The inline elements are a copy, which is only right if nothing can write to the
// kept tensor's memory while the value exists: so only results whose storage no
// script-visible tensor shares are kept (not views of another tensor, not borrowed
// memory, not Variables); an in-place write to the value itself first makes it a
// handle (the Lua side promotes it), which shares the kept tensor, not the copy.
#include "bindings/tapes.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "autograd/autograd.h"
#include "tensor/error.h"

namespace dl::bind {

namespace {

enum class State { Open, Pending, Adopted, Held };

struct Tape {
  uint64_t serial = 0;
  State state = State::Open;
  std::vector<Tensor> values;
  std::vector<Tape*> children;   // adopted tapes, discarded with this one
};

constexpr size_t kSpareTapes = 4;
constexpr size_t kMaxSpareValues = 4096;   // a larger tape's memory is not kept for reuse

std::atomic<uint64_t> g_next_serial{1};

struct Tapes {
  std::vector<std::unique_ptr<Tape>> live;   // every tape not yet discarded
  std::vector<Tape*> open;                   // innermost last
  std::vector<Tape*> pending;
  std::vector<std::unique_ptr<Tape>> spare;
  Tapes() { spare.reserve(kSpareTapes); }
};

Tapes& tapes() {
  thread_local Tapes t;
  return t;
}

Tape* find_tape(uint64_t serial) noexcept {
  Tapes& ts = tapes();
  if (!ts.open.empty() && ts.open.back()->serial == serial) return ts.open.back();
  for (auto it = ts.live.rbegin(); it != ts.live.rend(); ++it)
    if ((*it)->serial == serial) return it->get();
  return nullptr;
}

void discard(Tape* tape) noexcept {
  Tapes& ts = tapes();
  // Adopted tapes first (they may hold values that this tape's values depend on; the
  // order does not matter for correctness, as nodes hold their inputs themselves).
  while (!tape->children.empty()) {
    Tape* c = tape->children.back();
    tape->children.pop_back();
    discard(c);
  }
  auto it = std::find_if(ts.live.begin(), ts.live.end(), [&](const auto& p) { return p.get() == tape; });
  if (it == ts.live.end()) return;
  std::unique_ptr<Tape> owned = std::move(*it);
  ts.live.erase(it);
  // Later values depend on earlier ones: dropping them last-first frees each graph
  // node as soon as its last user goes. One that a handle still holds becomes a
  // constant, as the small ones' inline values do.
  while (!owned->values.empty()) {
    const Tensor& t = owned->values.back();
    if (t.impl()->use_count() > 1) ag::forget_history(t);
    owned->values.pop_back();
  }
  if (ts.spare.size() < kSpareTapes && owned->values.capacity() <= kMaxSpareValues)
    ts.spare.push_back(std::move(owned));
}

}  // namespace

void tape_open() {
  Tapes& ts = tapes();
  if (ts.open.empty()) tape_done();
  std::unique_ptr<Tape> t;
  if (!ts.spare.empty()) {
    t = std::move(ts.spare.back());
    ts.spare.pop_back();
  } else {
    t = std::make_unique<Tape>();
  }
  t->serial = g_next_serial.fetch_add(1, std::memory_order_relaxed);
  t->state = State::Open;
  ts.open.reserve(ts.open.size() + 1);
  ts.live.push_back(std::move(t));
  ts.open.push_back(ts.live.back().get());
}

void tape_close() noexcept {
  Tapes& ts = tapes();
  if (ts.open.empty()) return;
  Tape* t = ts.open.back();
  ts.open.pop_back();
  try {
    if (!ts.open.empty()) {
      t->state = State::Adopted;
      ts.open.back()->children.push_back(t);
    } else {
      t->state = State::Pending;
      ts.pending.push_back(t);
    }
  } catch (...) {
    discard(t);   // out of memory: the tape goes now rather than leak
  }
}

bool tape_is_open() noexcept { return !tapes().open.empty(); }

TapeRef tape_keep(Tensor t) {
  Tapes& ts = tapes();
  DL_ASSERT(!ts.open.empty());
  Tape* tape = ts.open.back();
  DL_CHECK_KIND(Memory, tape->values.size() < 0xffffffffu, "grad: too many values recorded");
  tape->values.push_back(std::move(t));
  return TapeRef{tape->serial, uint32_t(tape->values.size() - 1)};
}

void tape_note(const Tensor& t) {
  Tapes& ts = tapes();
  if (ts.open.empty() || !t.impl()->grad_node) return;
  ts.open.back()->values.push_back(t);
}

const Tensor* tape_find(const TapeRef& r) noexcept {
  Tape* t = find_tape(r.serial);
  if (!t || r.slot >= t->values.size()) return nullptr;
  return &t->values[r.slot];
}

void tape_done() noexcept {
  Tapes& ts = tapes();
  while (!ts.pending.empty()) {
    Tape* t = ts.pending.back();
    ts.pending.pop_back();
    discard(t);
  }
}

uint64_t tape_hold() noexcept {
  Tapes& ts = tapes();
  if (ts.pending.empty()) return 0;
  Tape* t = ts.pending.back();
  ts.pending.pop_back();
  t->state = State::Held;
  return t->serial;
}

void tape_free(uint64_t serial) noexcept {
  Tape* t = find_tape(serial);
  if (t && (t->state == State::Held || t->state == State::Pending)) {
    Tapes& ts = tapes();
    ts.pending.erase(std::remove(ts.pending.begin(), ts.pending.end(), t), ts.pending.end());
    discard(t);
  }
}

int64_t tape_values() noexcept {
  int64_t n = 0;
  for (const auto& t : tapes().live) n += int64_t(t->values.size());
  return n;
}

}  // namespace dl::bind

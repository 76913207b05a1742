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
// (Note [Handles released by a sweep, not by finalizers] in scripts/dlua/lifetime.lua),
// each marking the whole Lua heap, and the objects went back to the pools cold.
//
// docs/autograd.md ("Gradient tapes") says a tape is discarded once its gradient is taken, and that
// is what this file does. Every gradient scope opened from Lua (dl_grad_enter) opens a tape; a
// small recorded result is kept on the innermost open tape, and its Lua value holds its elements
// inline plus (tape serial, slot). While the tape lives, the engine reads the value as the kept
// tensor, history and all; once the tape is discarded the value reads as its inline elements, a
// constant, as a TensorFlow tensor computed under a GradientTape is once the tape is gone. The tape
// also notes the recorded tensors that went to Lua as handles (large ones, views, a promoted value)
// and drops their history when it is discarded, so that every value recorded under a tape, whatever
// its size, is a constant afterwards. Only history made under that tape goes: a tape knows the
// history stamp (ag::next_history_stamp) it opened at, a note goes to the innermost of the thread's
// open tapes opened before the tensor's stamp (a handle made later of a closed tape's value is not
// noted: its kept value is forgotten with that tape), and the history is dropped only if the stamp
// is still the noted one (a Variable's or a watched tensor's leaf, history made under another tape,
// or rewritten since by an in-place op, stays). Notes are weak (a handle id): a noted tensor is
// freed when Lua lets go of it, as before. A tape is discarded
// - when it closes inside another gradient's scope: never on its own; the enclosing
//   tape adopts it, since its values are part of the graph that the enclosing gradient
//   differentiates (dl.grad(dl.grad(f)));
// - for an outermost scope, right after the gradient is taken (dl.grad,
//   implicit_grad: tape_done);
// - for a GradientTape's record, when the GradientTape lets it go (after its gradient,
//   or when it is collected): it holds the tape (tape_hold), also one that an enclosing
//   tape adopted, which then outlives its parent while held;
// - at the latest when the next outermost scope opens or the runtime's call ends (a
//   gradient that raised an error before it was taken leaves its tape pending).
// So the graph of a gradient goes back to the pools when the gradient has been taken,
// warm, with no collection involved. A value's serial is never reused (a 64-bit
// counter), so a stale value can never reach a later tape's slot; the first read of a
// value whose tape is gone clears its reference (value.cpp, kept).
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
#include <mutex>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/engine.h"
#include "bindings/handles.h"
#include "tensor/error.h"

namespace dl::bind {

namespace {

struct Kept {
  Tensor t;
  uint64_t version;   // its history stamp when kept
};

struct Noted {
  uint64_t id;        // the handle (weak: looked up when the tape is discarded)
  uint64_t version;
};

struct Tape {
  uint64_t serial = 0;
  uint64_t opened = 0;    // the history stamp it opened at: later ones were made under it
  bool open = true;
  bool pending = false;   // closed outermost, waiting for tape_done
  bool adopted = false;   // a child of the enclosing tape
  bool shared = false;    // in the held registry, not the thread's list
  int holders = 0;        // GradientTapes holding it
  std::vector<Kept> values;
  std::vector<Noted> noted;
  std::vector<Tape*> children;
};

constexpr size_t kSpareTapes = 4;
constexpr size_t kMaxSpareValues = 4096;   // a larger tape's memory is not kept for reuse

std::atomic<uint64_t> g_next_serial{1};

struct Tapes {
  std::vector<std::unique_ptr<Tape>> live;   // every tape not yet discarded
  std::vector<Tape*> open;                   // innermost last
  std::vector<Tape*> pending;
  Tape* last_closed = nullptr;
  std::vector<std::unique_ptr<Tape>> spare;
  Tapes() { spare.reserve(kSpareTapes); }
  ~Tapes();
};

// The thread's tapes are made on first use (tapes()) and freed at its exit by the owner
// below. The pointer and the flag are trivially destructible (readable at exit) and
// need no guard on access, which a thread-local object with a constructor would on
// every call. What only reads the thread's tapes reads t_tapes, null when there are
// none (none made yet, or gone).
thread_local Tapes* t_tapes = nullptr;
thread_local bool t_tapes_gone = false;

struct TapesOwner {
  ~TapesOwner() {
    Tapes* t = t_tapes;
    t_tapes = nullptr;
    t_tapes_gone = true;
    delete t;
  }
};

Tapes& make_tapes() {
  // After the owner ran (a finalizer recording a gradient while its thread exits) a new
  // Tapes would never be freed.
  if (t_tapes_gone) fail(ErrorKind::Value, "grad: this thread is exiting; nothing more can be recorded on it");
  thread_local TapesOwner owner;
  (void)owner;
  t_tapes = new Tapes();
  return *t_tapes;
}

Tapes& tapes() {
  Tapes* t = t_tapes;
  return t ? *t : make_tapes();
}

// The tapes GradientTapes hold, and the tapes those adopted: a runtime may be driven
// from another thread by its next call (include/dlua/dlua.hpp), and a GradientTape
// recorded in one call may be asked for its gradient in the next. Open and pending
// tapes live and die within one call, on its thread (the runtime discards what an
// error left pending when its call ends). Only the thread running the runtime whose
// tape it is uses a tape (its serial is in no other runtime's values); the lock guards
// the list and the holder counts of the tapes in it.
struct Held {
  std::mutex mu;
  std::vector<std::unique_ptr<Tape>> tapes;
  std::atomic<size_t> count{0};   // tapes.size(), read without the lock
};

Held& held() {
  static Held* h = new Held();   // never destroyed: finalizers may free tapes at exit
  return *h;
}

// Moves `t` out of `list`; null when it is not there.
std::unique_ptr<Tape> remove_from(std::vector<std::unique_ptr<Tape>>& list, const Tape* t) noexcept {
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& p) { return p.get() == t; });
  if (it == list.end()) return nullptr;
  std::unique_ptr<Tape> owned = std::move(*it);
  list.erase(it);
  return owned;
}

// At the thread's exit its tapes go. A held tape one of them adopted is left to its
// holders, or freed with them when it has none.
Tapes::~Tapes() {
  std::vector<std::unique_ptr<Tape>> orphans;
  {
    Held& h = held();
    std::lock_guard<std::mutex> g(h.mu);
    for (const auto& t : live) {
      for (Tape* c : t->children) {
        if (!c->shared) continue;
        c->adopted = false;
        if (c->holders > 0) continue;
        if (std::unique_ptr<Tape> owned = remove_from(h.tapes, c)) {
          orphans.push_back(std::move(owned));
          h.count.store(h.tapes.size(), std::memory_order_relaxed);
        }
      }
    }
  }
}

Tape* find_in(const std::vector<std::unique_ptr<Tape>>& list, uint64_t serial) noexcept {
  for (auto it = list.rbegin(); it != list.rend(); ++it)
    if ((*it)->serial == serial) return it->get();
  return nullptr;
}

Tape* find_tape(uint64_t serial) noexcept {
  if (const Tapes* ts = t_tapes) {
    if (!ts->open.empty() && ts->open.back()->serial == serial) return ts->open.back();
    if (Tape* t = find_in(ts->live, serial)) return t;
  }
  Held& h = held();
  if (h.count.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard<std::mutex> g(h.mu);
  return find_in(h.tapes, serial);
}

// Moves `t` from the list it is in; null if it is in neither.
std::unique_ptr<Tape> take_out(Tape* t) noexcept {
  if (!t->shared) return t_tapes ? remove_from(t_tapes->live, t) : nullptr;
  Held& h = held();
  std::lock_guard<std::mutex> g(h.mu);
  std::unique_ptr<Tape> owned = remove_from(h.tapes, t);
  h.count.store(h.tapes.size(), std::memory_order_relaxed);
  return owned;
}

// Moves `t` and the tapes it adopted into the held registry. Throws only before
// moving anything (a child that cannot move stays the thread's).
void share(Tape* t) {
  if (!t->shared) {
    Held& h = held();
    std::lock_guard<std::mutex> g(h.mu);
    h.tapes.reserve(h.tapes.size() + 1);
    if (std::unique_ptr<Tape> owned = remove_from(tapes().live, t)) {
      h.tapes.push_back(std::move(owned));   // reserved: cannot throw
      h.count.store(h.tapes.size(), std::memory_order_relaxed);
      t->shared = true;
    }
  }
  for (Tape* c : t->children) share(c);
}

// False when a GradientTape still holds `t`: it then outlives the tape that adopted it.
bool unheld(Tape* t) noexcept {
  std::unique_lock<std::mutex> g;
  if (t->shared) g = std::unique_lock<std::mutex>(held().mu);
  if (t->holders == 0) return true;
  t->adopted = false;
  return false;
}

// Drops t's history if it is still the one made under the tape being discarded.
void forget_if(const Tensor& t, uint64_t version) noexcept {
  TensorImpl* i = t.impl();
  if (i->grad_node && i->grad_version == version && !i->is_variable) ag::forget_history(t);
}

void discard(Tape* tape) noexcept {
  if (!unheld(tape)) return;
  // (A GradientTape's finalizer may free a held tape after this thread's Tapes is gone.)
  if (Tapes* ts = t_tapes; ts && ts->last_closed == tape) ts->last_closed = nullptr;
  while (!tape->children.empty()) {
    Tape* c = tape->children.back();
    tape->children.pop_back();
    discard(c);
  }
  std::unique_ptr<Tape> owned = take_out(tape);
  if (!owned) return;
  for (const Noted& n : owned->noted)
    if (const Tensor* h = handle_find(n.id)) forget_if(*h, n.version);
  owned->noted.clear();
  // Later values depend on earlier ones: dropping them last-first frees each graph
  // node as soon as its last user goes. One that a handle still holds (a promoted
  // value) becomes a constant, as the inline ones do.
  while (!owned->values.empty()) {
    const Kept& k = owned->values.back();
    if (k.t.impl()->use_count() > 1) forget_if(k.t, k.version);
    owned->values.pop_back();
  }
  Tapes* ts = t_tapes;
  if (ts && ts->spare.size() < kSpareTapes && owned->values.capacity() <= kMaxSpareValues) {
    owned->open = true;
    owned->pending = owned->adopted = owned->shared = false;
    ts->spare.push_back(std::move(owned));   // its vectors are empty, their memory kept
  }
}

}  // namespace

void tape_open() {
  Tapes& ts = tapes();
  if (ts.open.empty()) tape_done();
  ts.last_closed = nullptr;
  std::unique_ptr<Tape> t;
  if (!ts.spare.empty()) {
    t = std::move(ts.spare.back());
    ts.spare.pop_back();
  } else {
    t = std::make_unique<Tape>();
  }
  // Room for what tape_close will do, so that closing cannot fail.
  if (ts.open.empty()) ts.pending.reserve(ts.pending.size() + 1);
  else ts.open.back()->children.reserve(ts.open.back()->children.size() + 1);
  ts.open.reserve(ts.open.size() + 1);
  ts.live.reserve(ts.live.size() + 1);
  t->serial = g_next_serial.fetch_add(1, std::memory_order_relaxed);
  t->opened = ag::next_history_stamp();
  ts.live.push_back(std::move(t));
  ts.open.push_back(ts.live.back().get());
}

void tape_close() noexcept {
  Tapes& ts = tapes();
  if (ts.open.empty()) return;
  Tape* t = ts.open.back();
  ts.open.pop_back();
  t->open = false;
  ts.last_closed = t;
  if (!ts.open.empty()) {
    t->adopted = true;
    ts.open.back()->children.push_back(t);   // reserved by tape_open
  } else {
    t->pending = true;
    ts.pending.push_back(t);                 // reserved by tape_open
  }
}

bool tape_is_open() noexcept {
  const Tapes* t = t_tapes;
  return t && !t->open.empty();
}

TapeRef tape_keep(Tensor t) {
  Tapes& ts = tapes();
  DL_ASSERT(!ts.open.empty());
  Tape* tape = ts.open.back();
  DL_CHECK_KIND(Memory, tape->values.size() < 0xffffffffu, "grad: too many values recorded");
  const uint64_t version = t.impl()->grad_version;
  tape->values.push_back(Kept{std::move(t), version});
  return TapeRef{tape->serial, uint32_t(tape->values.size() - 1)};
}

void tape_note(uint64_t id, const Tensor& t) noexcept {
  const TensorImpl* i = t.impl();
  if (!i->grad_node || i->is_variable) return;
  const uint64_t v = i->grad_version;
  // The innermost open tape opened before v: the one the history was made under, if it
  // was made in this call. (History of a closed tape, a handle made of a persistent
  // tape's value in a later call, stays with it: its kept value is forgotten with it.)
  const Tapes* ts = t_tapes;
  if (!ts) return;
  Tape* owner = nullptr;
  for (auto it = ts->open.rbegin(); it != ts->open.rend(); ++it)
    if ((*it)->opened < v) {
      owner = *it;
      break;
    }
  if (!owner) return;
  try {
    owner->noted.push_back(Noted{id, v});
  } catch (...) {
    // Out of memory: the history then outlives the tape, as it did before tapes.
  }
}

const Tensor* tape_find(const TapeRef& r) noexcept {
  Tape* t = find_tape(r.serial);
  if (!t || r.slot >= t->values.size()) return nullptr;
  return &t->values[r.slot].t;
}

void tape_done() noexcept {
  Tapes* ts = t_tapes;
  if (!ts) return;
  while (!ts->pending.empty()) {
    Tape* t = ts->pending.back();
    ts->pending.pop_back();
    t->pending = false;
    discard(t);
  }
}

uint64_t tape_hold() noexcept {
  if (!t_tapes) return 0;   // no tape was ever opened on this thread
  Tapes& ts = *t_tapes;
  Tape* t = ts.last_closed;
  if (!t) return 0;
  ts.last_closed = nullptr;
  if (t->pending) {
    t->pending = false;
    ts.pending.erase(std::remove(ts.pending.begin(), ts.pending.end(), t), ts.pending.end());
  }
  ++t->holders;
  try {
    share(t);
  } catch (...) {
    // Out of memory: the tape stays the thread's (and is still held).
  }
  return t->serial;
}

void tape_free(uint64_t serial) noexcept {
  Tape* t = find_tape(serial);
  if (!t) return;
  {
    std::unique_lock<std::mutex> g;
    if (t->shared) g = std::unique_lock<std::mutex>(held().mu);
    if (t->holders == 0 || --t->holders > 0 || t->adopted || t->open || t->pending) return;
  }
  discard(t);
}

int64_t tape_values() noexcept {
  int64_t n = 0;
  if (const Tapes* ts = t_tapes)
    for (const auto& t : ts->live) n += int64_t(t->values.size());
  Held& h = held();
  std::lock_guard<std::mutex> g(h.mu);
  for (const auto& t : h.tapes) n += int64_t(t->values.size());
  return n;
}

}  // namespace dl::bind

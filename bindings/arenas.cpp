// Arenas: the owners of the values recorded in a gradient scope (arenas.h).
//
// Note [Recorded values in arenas]
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
// docs/autograd.md ("Gradient tapes") says what a GradientTape records is discarded once
// its gradient is taken, and that is what this file does. Every gradient scope opened
// from Lua (dl_grad_enter) opens an arena; a small recorded result is kept in the
// innermost open arena, and its Lua value holds its elements inline plus (arena serial,
// slot). While the arena lives, the engine reads the value as the kept tensor, history
// and all; once the arena is discarded the value reads as its inline elements, a
// constant, as a TensorFlow tensor computed under a GradientTape is once the tape is
// gone. The arena also notes the recorded tensors that went to Lua as handles (large
// ones, views, a promoted value: handle_new) and drops their history when it is
// discarded, so that every value recorded in a scope, whatever its size, is a constant
// afterwards. Only history made in that scope goes (Note [History scopes] in
// autograd/engine.h): an arena knows the stamp it opened at, a note goes to the
// innermost of the thread's open arenas opened before the tensor's stamp (a handle made
// later of a closed arena's value is not noted: its kept value is forgotten with that
// arena), and the history is dropped only if the stamp is still the noted one (a
// Variable's or a watched tensor's leaf, history made in another scope, or rewritten
// since by an in-place op, stays). Notes are weak (a handle id): a noted tensor is freed
// when Lua lets go of it, as before.
//
// An arena's states, and what moves it on:
//
//   state     | how it got there                  | its values read as     | next
//   ----------+-----------------------------------+------------------------+---------------------------
//   open      | arena_open (dl_grad_enter)        | the kept tensors       | closed (arena_close)
//   adopted   | closed inside another open scope  | the kept tensors       | discarded with its parent,
//             | (dl.grad(dl.grad(f)))             |                        | unless held
//   pending   | closed as the outermost scope     | the kept tensors       | discarded by arena_done
//             |                                   |                        | (the gradient was taken),
//             |                                   |                        | the next outermost
//             |                                   |                        | arena_open, or the end of
//             |                                   |                        | the runtime's call
//   held      | arena_hold (a GradientTape's      | the kept tensors, from | discarded by the last
//             | record), pending or adopted       | any thread             | arena_free, once neither
//             |                                   |                        | open, pending nor adopted
//   discarded | any of the above                  | inline constants; the  | (its memory may serve as
//             |                                   | noted handles lose the | a spare arena)
//             |                                   | history made in it     |
//
// So the graph of a gradient goes back to the pools when the gradient has been taken,
// warm, with no collection involved. A value's serial is never reused (a 64-bit
// counter), so a stale value can never reach a later arena's slot; the first read of a
// value whose arena is gone clears its reference (value.cpp, kept).
//
// The inline elements are a copy, which is only right if nothing can write to the
// kept tensor's memory while the value exists: so only results whose storage no
// script-visible tensor shares are kept (not views of another tensor, not borrowed
// memory, not Variables); an in-place write to the value itself first makes it a
// handle (the Lua side promotes it), which shares the kept tensor, not the copy.
#include "bindings/arenas.h"

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
  uint64_t id;        // the handle (weak: looked up when the arena is discarded)
  uint64_t version;
};

struct Arena {
  uint64_t serial = 0;
  uint64_t opened = 0;    // the history stamp it opened at: later ones were made under it
  bool open = true;
  bool pending = false;   // closed outermost, waiting for arena_done
  bool adopted = false;   // a child of the enclosing arena
  bool shared = false;    // in the held registry, not the thread's list
  int holders = 0;        // GradientTapes holding it
  std::vector<Kept> values;
  std::vector<Noted> noted;
  std::vector<Arena*> children;
};

constexpr size_t kSpareArenas = 4;
constexpr size_t kMaxSpareValues = 4096;   // a larger arena's memory is not kept for reuse

std::atomic<uint64_t> g_next_serial{1};

struct Arenas {
  std::vector<std::unique_ptr<Arena>> live;   // every arena not yet discarded
  std::vector<Arena*> open;                   // innermost last
  std::vector<Arena*> pending;
  Arena* last_closed = nullptr;
  std::vector<std::unique_ptr<Arena>> spare;
  Arenas() { spare.reserve(kSpareArenas); }
  ~Arenas();
};

// The thread's arenas are made on first use (arenas()) and freed at its exit by the owner
// below. The pointer and the flag are trivially destructible (readable at exit) and
// need no guard on access, which a thread-local object with a constructor would on
// every call. What only reads the thread's arenas reads t_arenas, null when there are
// none (none made yet, or gone).
thread_local Arenas* t_arenas = nullptr;
thread_local bool t_arenas_gone = false;

struct ArenasOwner {
  ~ArenasOwner() {
    Arenas* t = t_arenas;
    t_arenas = nullptr;
    t_arenas_gone = true;
    delete t;
  }
};

Arenas& make_arenas() {
  // After the owner ran (a finalizer recording a gradient while its thread exits) a new
  // Arenas would never be freed.
  if (t_arenas_gone) fail(ErrorKind::Value, "grad: this thread is exiting; nothing more can be recorded on it");
  thread_local ArenasOwner owner;
  (void)owner;
  t_arenas = new Arenas();
  return *t_arenas;
}

Arenas& arenas() {
  Arenas* t = t_arenas;
  return t ? *t : make_arenas();
}

// The arenas GradientTapes hold, and the arenas those adopted: a runtime may be driven
// from another thread by its next call (include/dlua/dlua.hpp), and a GradientTape
// recorded in one call may be asked for its gradient in the next. Open and pending
// arenas live and die within one call, on its thread (the runtime discards what an
// error left pending when its call ends). Only the thread running the runtime whose
// arena it is uses an arena (its serial is in no other runtime's values); the lock guards
// the list and the holder counts of the arenas in it.
struct Held {
  std::mutex mu;
  std::vector<std::unique_ptr<Arena>> arenas;
  std::atomic<size_t> count{0};   // arenas.size(), read without the lock
};

Held& held() {
  static Held* h = new Held();   // never destroyed: finalizers may free arenas at exit
  return *h;
}

// Moves `t` out of `list`; null when it is not there.
std::unique_ptr<Arena> remove_from(std::vector<std::unique_ptr<Arena>>& list, const Arena* t) noexcept {
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& p) { return p.get() == t; });
  if (it == list.end()) return nullptr;
  std::unique_ptr<Arena> owned = std::move(*it);
  list.erase(it);
  return owned;
}

// At the thread's exit its arenas go. A held arena one of them adopted is left to its
// holders, or freed with them when it has none.
Arenas::~Arenas() {
  std::vector<std::unique_ptr<Arena>> orphans;
  {
    Held& h = held();
    std::lock_guard<std::mutex> g(h.mu);
    for (const auto& t : live) {
      for (Arena* c : t->children) {
        if (!c->shared) continue;
        c->adopted = false;
        if (c->holders > 0) continue;
        if (std::unique_ptr<Arena> owned = remove_from(h.arenas, c)) {
          orphans.push_back(std::move(owned));
          h.count.store(h.arenas.size(), std::memory_order_relaxed);
        }
      }
    }
  }
}

Arena* find_in(const std::vector<std::unique_ptr<Arena>>& list, uint64_t serial) noexcept {
  for (auto it = list.rbegin(); it != list.rend(); ++it)
    if ((*it)->serial == serial) return it->get();
  return nullptr;
}

Arena* find_arena(uint64_t serial) noexcept {
  if (const Arenas* ts = t_arenas) {
    if (!ts->open.empty() && ts->open.back()->serial == serial) return ts->open.back();
    if (Arena* t = find_in(ts->live, serial)) return t;
  }
  Held& h = held();
  if (h.count.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard<std::mutex> g(h.mu);
  return find_in(h.arenas, serial);
}

// Moves `t` from the list it is in; null if it is in neither.
std::unique_ptr<Arena> take_out(Arena* t) noexcept {
  if (!t->shared) return t_arenas ? remove_from(t_arenas->live, t) : nullptr;
  Held& h = held();
  std::lock_guard<std::mutex> g(h.mu);
  std::unique_ptr<Arena> owned = remove_from(h.arenas, t);
  h.count.store(h.arenas.size(), std::memory_order_relaxed);
  return owned;
}

// Moves `t` and the arenas it adopted into the held registry. Throws only before
// moving anything (a child that cannot move stays the thread's).
void share(Arena* t) {
  if (!t->shared) {
    Held& h = held();
    std::lock_guard<std::mutex> g(h.mu);
    h.arenas.reserve(h.arenas.size() + 1);
    if (std::unique_ptr<Arena> owned = remove_from(arenas().live, t)) {
      h.arenas.push_back(std::move(owned));   // reserved: cannot throw
      h.count.store(h.arenas.size(), std::memory_order_relaxed);
      t->shared = true;
    }
  }
  for (Arena* c : t->children) share(c);
}

// False when a GradientTape still holds `t`: it then outlives the arena that adopted it.
bool unheld(Arena* t) noexcept {
  std::unique_lock<std::mutex> g;
  if (t->shared) g = std::unique_lock<std::mutex>(held().mu);
  if (t->holders == 0) return true;
  t->adopted = false;
  return false;
}


void discard(Arena* arena) noexcept {
  if (!unheld(arena)) return;
  // (A GradientTape's finalizer may free a held arena after this thread's Arenas is gone.)
  if (Arenas* ts = t_arenas; ts && ts->last_closed == arena) ts->last_closed = nullptr;
  while (!arena->children.empty()) {
    Arena* c = arena->children.back();
    arena->children.pop_back();
    discard(c);
  }
  std::unique_ptr<Arena> owned = take_out(arena);
  if (!owned) return;
  for (const Noted& n : owned->noted)
    if (const Tensor* h = handle_find(n.id)) ag::forget_history_if(*h, n.version);
  owned->noted.clear();
  // Later values depend on earlier ones: dropping them last-first frees each graph
  // node as soon as its last user goes. One that a handle still holds (a promoted
  // value) becomes a constant, as the inline ones do.
  while (!owned->values.empty()) {
    const Kept& k = owned->values.back();
    if (k.t.impl()->use_count() > 1) ag::forget_history_if(k.t, k.version);
    owned->values.pop_back();
  }
  Arenas* ts = t_arenas;
  if (ts && ts->spare.size() < kSpareArenas && owned->values.capacity() <= kMaxSpareValues) {
    owned->open = true;
    owned->pending = owned->adopted = owned->shared = false;
    ts->spare.push_back(std::move(owned));   // its vectors are empty, their memory kept
  }
}

}  // namespace

void arena_open() {
  Arenas& ts = arenas();
  if (ts.open.empty()) arena_done();
  ts.last_closed = nullptr;
  std::unique_ptr<Arena> t;
  if (!ts.spare.empty()) {
    t = std::move(ts.spare.back());
    ts.spare.pop_back();
  } else {
    t = std::make_unique<Arena>();
  }
  // Room for what arena_close will do, so that closing cannot fail.
  if (ts.open.empty()) ts.pending.reserve(ts.pending.size() + 1);
  else ts.open.back()->children.reserve(ts.open.back()->children.size() + 1);
  ts.open.reserve(ts.open.size() + 1);
  ts.live.reserve(ts.live.size() + 1);
  t->serial = g_next_serial.fetch_add(1, std::memory_order_relaxed);
  t->opened = ag::next_history_stamp();
  ts.live.push_back(std::move(t));
  ts.open.push_back(ts.live.back().get());
}

void arena_close() noexcept {
  Arenas& ts = arenas();
  if (ts.open.empty()) return;
  Arena* t = ts.open.back();
  ts.open.pop_back();
  t->open = false;
  ts.last_closed = t;
  if (!ts.open.empty()) {
    t->adopted = true;
    ts.open.back()->children.push_back(t);   // reserved by arena_open
  } else {
    t->pending = true;
    ts.pending.push_back(t);                 // reserved by arena_open
  }
}

bool arena_is_open() noexcept {
  const Arenas* t = t_arenas;
  return t && !t->open.empty();
}

ArenaRef arena_keep(Tensor t) {
  Arenas& ts = arenas();
  DL_ASSERT(!ts.open.empty());
  Arena* arena = ts.open.back();
  DL_CHECK_KIND(Memory, arena->values.size() < 0xffffffffu, "grad: too many values recorded");
  const uint64_t version = ag::history_stamp(t);
  arena->values.push_back(Kept{std::move(t), version});
  return ArenaRef{arena->serial, uint32_t(arena->values.size() - 1)};
}

namespace {
// Notes the recorded tensor just registered as handle `id`.
void note(uint64_t id, const Tensor& t) noexcept {
  const uint64_t v = ag::history_stamp(t);
  if (v == 0) return;
  // The innermost open arena opened before v: the one the history was made under, if it
  // was made in this call. (History of a closed arena, a handle made of a persistent
  // arena's value in a later call, stays with it: its kept value is forgotten with it.)
  const Arenas* ts = t_arenas;
  if (!ts) return;
  Arena* owner = nullptr;
  for (auto it = ts->open.rbegin(); it != ts->open.rend(); ++it)
    if ((*it)->opened < v) {
      owner = *it;
      break;
    }
  if (!owner) return;
  try {
    owner->noted.push_back(Noted{id, v});
  } catch (...) {
    // Out of memory: the history then outlives the arena, as it did before arenas.
  }
}
}  // namespace

uint64_t handle_new(Tensor t) {
  const uint64_t id = handle_add(std::move(t));
  note(id, *handle_find(id));   // the slot is this thread's until the id is handed out
  return id;
}

void handle_set(uint64_t id, Tensor t, const char* op) {
  handle_replace(id, std::move(t), op);
  note(id, *handle_find(id));
}

void handles_new(std::initializer_list<Tensor> ts, uint64_t* out) {
  int k = 0;
  try {
    for (const Tensor& t : ts) {
      const uint64_t id = handle_new(t);
      out[k++] = id;
    }
  } catch (...) {
    for (int i = 0; i < k; ++i) {
      handle_release(out[i]);
      out[i] = 0;
    }
    throw;
  }
}

const Tensor* arena_find(const ArenaRef& r) noexcept {
  Arena* t = find_arena(r.serial);
  if (!t || r.slot >= t->values.size()) return nullptr;
  return &t->values[r.slot].t;
}

void arena_done() noexcept {
  Arenas* ts = t_arenas;
  if (!ts) return;
  while (!ts->pending.empty()) {
    Arena* t = ts->pending.back();
    ts->pending.pop_back();
    t->pending = false;
    discard(t);
  }
}

uint64_t arena_hold() noexcept {
  if (!t_arenas) return 0;   // no arena was ever opened on this thread
  Arenas& ts = *t_arenas;
  Arena* t = ts.last_closed;
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
    // Out of memory: the arena stays the thread's (and is still held).
  }
  return t->serial;
}

void arena_free(uint64_t serial) noexcept {
  Arena* t = find_arena(serial);
  if (!t) return;
  {
    std::unique_lock<std::mutex> g;
    if (t->shared) g = std::unique_lock<std::mutex>(held().mu);
    if (t->holders == 0 || --t->holders > 0 || t->adopted || t->open || t->pending) return;
  }
  discard(t);
}

int64_t arena_values() noexcept {
  int64_t n = 0;
  if (const Arenas* ts = t_arenas)
    for (const auto& t : ts->live) n += int64_t(t->values.size());
  Held& h = held();
  std::lock_guard<std::mutex> g(h.mu);
  for (const auto& t : h.arenas) n += int64_t(t->values.size());
  return n;
}

}  // namespace dl::bind

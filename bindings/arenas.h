// Arenas: who owns the small recorded values a script holds inline, and what becomes of
// the history of every value recorded in a gradient's scope once that gradient is taken
// (Note [Recorded values in arenas] in arenas.cpp, with the states a value goes through).
// "Tape" is autograd's recording and the Lua GradientTape; an arena is neither: it is
// the bindings' store of one gradient scope's inline results.
//
//   arena_open();                         // dl_grad_enter: a gradient is being taken
//   ArenaRef r = arena_keep(y);           // a recorded result, held until the arena goes
//   const Tensor* t = arena_find(r);      // y while its arena lives, else null
//   uint64_t id = handle_new(big);        // a result as a handle: noted by its arena
//   arena_close();                        // dl_grad_exit: adopted by the enclosing arena,
//   arena_done();                         //   or pending until the gradient is taken
//
// Open and pending arenas are the thread's (a call runs on one thread); arenas a
// GradientTape holds are found from any thread, as a runtime may move between calls.
// This file uses the handle registry (handles.h), never the other way round.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "tensor/tensor.h"

namespace dl::bind {

// Where a recorded value lives: arena `serial` (never 0, never reused), slot `slot`.
struct ArenaRef {
  uint64_t serial = 0;
  uint32_t slot = 0;
};

// Opens an arena for a gradient scope; closes the innermost one. A closed arena is adopted
// by the enclosing open one (its values are part of that gradient's graph), or, when
// it was the outermost, waits as pending until arena_done(), arena_hold() or the next
// outermost arena_open().
void arena_open();
void arena_close() noexcept;
// True when an arena is open: recorded results can be kept in it.
bool arena_is_open() noexcept;
// Keeps `t` in the innermost open arena (one must be open).
ArenaRef arena_keep(Tensor t);
// A handle for a result handed to Lua (handles.h's handle_add), noted by the arena its
// history was made under, if any: once that arena is discarded, the history is dropped
// if the handle still holds it, so that the value is a constant, as an inline one is.
uint64_t handle_new(Tensor t);
// handle_replace, noted as handle_new notes a new handle (the tensor's history may be
// newer than the old one's).
void handle_set(uint64_t id, Tensor t, const char* op);
// Handles for each tensor of `ts` in out[0], out[1] ..., all or none: when one fails, the
// ones already made are released (and zeroed) before the error goes on.
void handles_new(std::initializer_list<Tensor> ts, uint64_t* out);
// The tensor at `r`, or null once its arena is gone (or for a forged reference).
const Tensor* arena_find(const ArenaRef& r) noexcept;
// Frees the pending arenas (after the gradient was taken).
void arena_done() noexcept;
// Holds the arena closed last (a GradientTape's record) until arena_free(serial): it is
// not discarded by arena_done() or with the arena that adopted it. Returns its serial,
// or 0 when there is none.
uint64_t arena_hold() noexcept;
void arena_free(uint64_t serial) noexcept;
// Values kept in the arenas alive now (tests).
int64_t arena_values() noexcept;

}  // namespace dl::bind

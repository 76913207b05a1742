// Tapes: who owns the small recorded values a script holds inline (Note [Recorded
// values on the tape] in tapes.cpp).
//
//   tape_open();                         // dl_grad_enter: a gradient is being taken
//   Ref r = tape_keep(y);                // a recorded result, held until the tape goes
//   const Tensor* t = tape_find(r);      // y while its tape lives, else null
//   tape_note(id, big);                  // a recorded handle: made a constant with the tape
//   tape_close();                        // dl_grad_exit: adopted by the enclosing tape,
//   tape_done();                         //   or pending until the gradient is taken
//
// Open and pending tapes are the thread's (a call runs on one thread); tapes a
// GradientTape holds are found from any thread, as a runtime may move between calls.
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace dl::bind {

// Where a recorded value lives: tape `serial` (never 0, never reused), slot `slot`.
struct TapeRef {
  uint64_t serial = 0;
  uint32_t slot = 0;
};

// Opens a tape for a gradient scope; closes the innermost one. A closed tape is adopted
// by the enclosing open one (its values are part of that gradient's graph), or, when
// it was the outermost, waits as pending until tape_done(), tape_hold() or the next
// outermost tape_open().
void tape_open();
void tape_close() noexcept;
// True when a tape is open: recorded results can be kept on it.
bool tape_is_open() noexcept;
// Keeps `t` on the innermost open tape (one must be open).
TapeRef tape_keep(Tensor t);
// Notes a recorded tensor just handed to Lua as handle `id`: once the tape its history
// was made under is discarded, that history is dropped if the handle still holds it.
void tape_note(uint64_t id, const Tensor& t) noexcept;
// The tensor at `r`, or null once its tape is gone (or for a forged reference).
const Tensor* tape_find(const TapeRef& r) noexcept;
// Frees the pending tapes (after the gradient was taken).
void tape_done() noexcept;
// Holds the tape closed last (a GradientTape's record) until tape_free(serial): it is
// not discarded by tape_done() or with the tape that adopted it. Returns its serial,
// or 0 when there is none.
uint64_t tape_hold() noexcept;
void tape_free(uint64_t serial) noexcept;
// Values kept on the tapes alive now (tests).
int64_t tape_values() noexcept;

}  // namespace dl::bind

// The one exception guard of the C ABI (Note [The C ABI] in capi.cpp), shared by every
// file that defines C entry points.
//
//   uint64_t dl_transpose(uint64_t x, int d1, int d2) {     // bindings/capi.cpp
//     return guard_handle([&] {
//       const Tensor& t = get(x, "transpose");
//       return ag::transpose(t, lua_dim(d1, t.dim(), "transpose"), lua_dim(d2, t.dim(), "transpose"));
//     });
//   }
//
// guard_handle returns the new tensor's handle, or 0; guard_status returns 0, or -1;
// guard_value delivers a struct dl_tensor (value.h).
// On failure the message and kind are left for dl_last_error()/dl_last_error_kind().
// Each first runs the steps a compiled call has deferred (compile::sync, Note [Deferred
// steps] in compile/trace.cpp): an entry point that is not a deferred op then sees the
// state eager execution would have left.
#pragma once
#include <cstdint>

#include "bindings/arenas.h"
#include "bindings/handles.h"
#include "bindings/value.h"
#include "compile/trace.h"

namespace dl::bind {

// Records the exception in flight; call only from a catch block.
void capture_exception() noexcept;
// Records an error without an exception.
void set_error(int kind, const char* msg) noexcept;

// Both guards set the message base (Note [Positions in messages]): a script counts
// dims and positions from 1.
template <typename F>
uint64_t guard_handle(F&& f) noexcept {
  MessageBase base(1);
  try {
    compile::sync();
    return handle_new(f());
  } catch (...) {
    capture_exception();
    return 0;
  }
}

// guard_handle without compile::sync, for a handle to a tensor that exists whatever the
// deferred steps do (a Variable the call used).
template <typename F>
uint64_t guard_handle_nosync(F&& f) noexcept {
  MessageBase base(1);
  try {
    return handle_new(f());
  } catch (...) {
    capture_exception();
    return 0;
  }
}

// guard_status without compile::sync, for what cannot depend on deferred steps (a
// tensor's metadata) and for the compiled call's own work.
template <typename F>
int guard_status_nosync(F&& f) noexcept {
  MessageBase base(1);
  try {
    f();
    return 0;
  } catch (...) {
    capture_exception();
    return -1;
  }
}

template <typename F>
int guard_status(F&& f) noexcept {
  return guard_status_nosync([&] {
    compile::sync();
    f();
  });
}

// For the entry points that return a struct dl_tensor (Note [Small tensors inline]):
// the result goes to *out inline (0) or as a handle (1); -1 on failure. sync false: an
// op whose operands are all small values held inline or by handles (bindings/compile.h:
// Note [Inline operands run at once], Note [Small handles run at once]), which can
// neither read nor change what a compiled call has deferred, so it runs without the
// deferred steps, and without counting as an event of a compiled gradient's scope (a
// constant's reduction inside dl.compile(dl.grad(f)) left the scope to the tape).
template <typename F>
int guard_value(dl_tensor* out, F&& f, bool sync = true) noexcept {
  MessageBase base(1);
  try {
    if (sync) compile::sync();
    return deliver(f(), out);
  } catch (...) {
    capture_exception();
    return -1;
  }
}

// The tensor behind a handle; throws "op: invalid tensor" for a dead or forged id.
inline const Tensor& get(uint64_t id, const char* op) { return handle_get(id, op); }

}  // namespace dl::bind

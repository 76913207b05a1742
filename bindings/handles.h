// The handle table behind the C ABI: tensors that Lua holds, by id.
//
//   uint64_t id = dl::bind::handle_add(t);            // what a Lua tensor carries
//   dl::Tensor u = dl::bind::handle_get(id, "add");   // throws "add: invalid tensor"
//   dl::bind::handle_release(id);                     // once the Lua value is dead
//
// An id is (generation << 32 | slot), below 2^53 so that it also travels exactly as a
// Lua number (the runtime's bridge to C++ hands ids to Lua that way). A slot's
// generation changes each time it is released, so a stale id never reaches the next
// tensor in that slot; id 0 is never issued.
//
// Threads: a handle is used by one thread at a time (the thread running the lua_State
// that holds it); creating and releasing handles may happen on many threads at once.
// Slots live in fixed chunks that never move, so a lookup takes no lock.
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace dl::bind {

// A new id for `t`. (A result handed to Lua is registered through handle_new,
// bindings/arenas.h, which also tells the arenas about its history.)
uint64_t handle_add(Tensor t);
// The tensor behind `id`; throws dl::Error "op: invalid tensor ..." when the id is not
// live.
const Tensor& handle_get(uint64_t id, const char* op);
bool handle_valid(uint64_t id) noexcept;
// The tensor behind `id`, or null when the id is not live.
const Tensor* handle_find(uint64_t id) noexcept;
// `id` names `t` from now on (x:set_(v), x:t_() ...): every Lua value of the id sees the
// new tensor; the old one is released. Throws as handle_get when the id is not live. (A
// handle's tensor may thus change; a reference from handle_get or handle_find is good
// until the id's own thread next calls in here, by the one-thread-per-handle rule above.)
void handle_replace(uint64_t id, Tensor t, const char* op);
// Releasing a stale or unknown id does nothing.
void handle_release(uint64_t id) noexcept;
int64_t handle_count() noexcept;

// Bytes the engine has allocated since the process started (never reset, so that each
// Lua state can measure from its own last collection). Updated each time a handle is
// made, from the host allocator's counter. See Note [Stepping the collector] in
// scripts/dlua/lifetime.lua.
const double* allocated_total() noexcept;

}  // namespace dl::bind

// The sizes below which a tensor takes a shorter path, decided here once.
//
// Note [The paths of a + b]
// `c = a + b` from Lua takes the first of these paths that applies, and every path
// applies the same functor (tensor/functors.h) in the same dtype, so the bits of c do
// not depend on which one ran (tests/cpp/test_pointwise.cpp, tests/lua/test_inline.lua):
//   1. The bindings' fast path (bindings/capi.cpp, small_binary): both operands hold at
//      most kInlineBytes of float32 or float64 elements of one dtype, contiguous on the
//      host, of one shape or one of them 0-dim, and are inline Lua values or handles
//      read in place while nothing is recorded. dl::small's loop (tensor/small.h)
//      writes c inline into its Lua value: no engine tensor is made (Note [Small
//      tensors inline] in bindings/value.cpp).
//   2. The pointwise front end's fast path (tensor/pointwise.cpp, small_host_float):
//      operands of one float dtype and one shape, contiguous on the host, at most
//      kSmallElements each. No dispatch, no broadcasting: dl::small's loop into a new
//      tensor; recorded as usual when a gradient is being taken.
//   3. The CPU backend's dense loop (tensor/cpu/pointwise.cpp, small_dense): out and
//      every operand dense (contiguous, of out's size or a single element), out at most
//      kSmallElements: dl::small's loop over the raw buffers, any dtype it serves.
//   4. The same, out larger than kSmallElements (Note [Dense operands in wide loops]):
//      dl::small's block loops, built for AVX2 and AVX-512 too, over each thread's
//      range (split from kParallelGrain elements up).
//   5. The general strided loops (tensor/cpu/loops.h, elementwise), split across
//      OpenMP threads from kParallelGrain elements up.
// Where c lives: a result of at most kInlineBytes keeps its bytes inside its Storage
// object (Note [Small storages inline] in tensor/tensor.cpp), and, handed to Lua
// without aliases or history, inline in the Lua value (bindings/value.cpp, deliver).
#pragma once
#include <cstdint>

namespace dl::sizes {

// Elements held inside a Lua value or a Storage object: 16 float32, 8 float64. The Lua
// value's layout (struct dl_tensor in bindings/capi.h) is checked against it.
constexpr int64_t kInlineBytes = 64;
// Elements up to which a dense pointwise op skips the general machinery (paths 2, 3).
constexpr int64_t kSmallElements = 1024;

}  // namespace dl::sizes

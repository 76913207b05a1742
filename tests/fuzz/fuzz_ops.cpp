// Fuzz target: random programs of ops through the C ABI (bindings/capi.h), the surface
// a script reaches. Each input is read as a sequence of calls on a small pool of
// tensor handles: creation with random shapes (empty, huge, negative, too many dims)
// and dtypes (valid and not), every op family with any op id, views with random
// dims/starts/steps, broadcasting, in-place writes, index ops with random indices, the
// NN kernels with random geometry, and gradients (scopes, watch, backward with and
// without create_graph, custom nodes), interleaved with releases so that stale handles
// are used too.
//
// Small tensors held inline (struct dl_tensor with id 0, Note [Small tensors inline] in
// bindings/value.cpp) are kept in a pool of their own, as a script holds them: they feed
// the entry points that take values, are promoted into handles, and forged headers
// must be refused.
//
// The programs and their oracles are fuzz_program.h's; the ops added with dl.linalg,
// sorting and scans, layer_norm and the fused updates are fuzz_breadth.cpp's.
#include "tests/fuzz/fuzz_program.h"

namespace {

void run(dlfuzz::Program& p) {
  while (!p.in.done()) {
    switch (p.in.pick(10)) {
      case 0: case 1: p.create(); break;
      case 2: p.family(); break;
      case 3: p.other(); break;
      case 4: p.views(); break;
      case 5: p.join_and_index(); break;
      case 6: p.elements(); break;
      case 7: p.nn(); break;
      case 8: p.gradients(); break;
      default: p.release_slot(p.in.pick(dlfuzz::kPool)); break;
    }
  }
}

}  // namespace

DLFUZZ_PROGRAM_TARGET(run)

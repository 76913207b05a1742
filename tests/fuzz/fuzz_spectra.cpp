// Fuzz target: random programs over dl.fft's engine transforms (bindings/capi.h:
// dl_fft_c2c, dl_fft_r2c, dl_fft_c2r) with the machinery and oracles of fuzz_program.h:
// operands from the pool (empty, huge, strided, broadcast and aliased tensors of every
// dtype, half precision too, stale and forged handles), weights and signal lengths in and
// out of range, and rows of complex pairs and of bins made to fit, so that the kernels'
// success paths (mixed radix, Bluestein, packs of rows, odd and even lengths) run too;
// gradients through them from the pool's gradient programs.
#include "tests/fuzz/fuzz_program.h"

namespace {

using dlfuzz::Program;

// A (rows, n) signal, or (rows, n, 2) pairs, of float32 or float64, n up to 70 (radices
// up to 7 and Bluestein lengths), a length of 1 and empty rows too. The pool keeps it.
void signal(Program& p) {
  int64_t sh[3] = {p.in.pick(5), 1 + p.in.pick(70), 2};
  const int dt = p.in.flag() ? 5 : 4;
  p.put(dl_randn(sh, p.in.flag() ? 3 : 2, dt, nullptr));
}

void transforms(Program& p) {
  const uint64_t x = p.tensor();
  if (!p.cheap(x)) return;
  switch (p.in.pick(3)) {
    case 0: p.put(dl_fft_c2c(x, p.in.flag())); break;
    case 1: p.put(dl_fft_r2c(x, int(p.in.pick(4)))); break;   // weights 1 and 2 are valid
    default: {
      // a length the bins fit (2 (m - 1) or 2 m - 1 for m bins), or any from -2
      dlfuzz::ValueSlot h(x);
      dl_meta meta;
      const bool known = dl_meta_get(h.get(), &meta) == 0 && meta.ndim >= 2;
      const int64_t m = known ? int64_t(meta.sizes[meta.ndim - 2]) : 0;
      const int64_t n = p.in.flag() ? 2 * m - 1 - p.in.pick(2) : int64_t(p.in.pick(80)) - 2;
      p.put(dl_fft_c2r(x, n, int(p.in.pick(4))));
      break;
    }
  }
}

void run(Program& p) {
  while (!p.in.done()) {
    switch (p.in.pick(8)) {
      case 0: p.create(); break;
      case 1: case 2: signal(p); break;
      case 3: p.views(); break;
      case 4: case 5: transforms(p); break;
      case 6: p.gradients(); break;
      default: p.release_slot(p.in.pick(dlfuzz::kPool)); break;
    }
  }
}

}  // namespace

DLFUZZ_PROGRAM_TARGET(run)

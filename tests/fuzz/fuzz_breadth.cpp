// Fuzz target: random programs of the C ABI's ops that came with the breadth of dl.linalg,
// sorting and scans, layer_norm, the LSTM step's gates and the fused optimizer updates
// (bindings/capi.h), and of the entry points that take values (matmul, softmax,
// cross_entropy, watch, a backward pass of one output and one input), which the Lua side
// calls where fuzz_ops calls their handle forms; on the same pool of handles and with
// the same oracles as fuzz_ops (fuzz_program.h). Their operands are whatever the pool
// holds: empty, huge, strided, broadcast and aliased tensors of every dtype (half
// precision too), stale and forged handles; and, so that the decompositions run their
// success paths too, well-formed batches of square matrices made for them (random,
// symmetric positive definite, triangular).
//
// Cost: a decomposition's time grows with n^3, so their operands stay under kMaxLinalg
// elements; the other ops take fuzz_program.h's kMaxCompute.
#include "tests/fuzz/fuzz_program.h"

namespace {

using dlfuzz::Program;

constexpr double kMaxLinalg = 4096;
constexpr int kEps[] = {0, 1, -1};
constexpr double kEpsValues[] = {1e-5, 0.0, -1.0, 1e-30, 1e30};

bool small_for_linalg(uint64_t id) {
  dlfuzz::ValueSlot h(id);
  return dl_numel(h.get()) <= kMaxLinalg;
}

// A batch of n x n matrices for the decompositions: random, symmetric positive definite
// (A A^T + n I), or lower triangular (that one's Cholesky factor); float32 or float64.
// The pool keeps it.
void square(Program& p) {
  int64_t sh[3];
  int nd = 0;
  if (p.in.flag()) sh[nd++] = 1 + p.in.pick(3);   // a batch dim
  const int64_t n = p.in.pick(9);                 // 0 .. 8: empty matrices too
  sh[nd++] = n;
  sh[nd++] = n;
  const int dt = p.in.flag() ? 5 : 4;
  const uint64_t a = dl_randn(sh, nd, dt, nullptr);
  if (a == 0) return p.failed();
  const int kind = p.in.pick(3);
  if (kind == 0) return p.put(a);
  const uint64_t at = dl_transpose(a, -1, -2);
  uint64_t spd = at ? dl_matmul(a, at) : 0;
  const uint64_t eye = dl_eye(n, n, dt, nullptr);
  if (!at || !spd || !eye || dl_binary_scalar_(dl_op_id("mul"), eye, double(n)) != 0 ||
      dl_binary_(dl_op_id("add"), spd, eye) != 0)
    dlfuzz::fatal("making a symmetric positive definite matrix failed:", dl_last_error());
  for (uint64_t t : {a, at, eye}) dl_release_id(t);
  if (kind == 1) return p.put(spd);
  const uint64_t l = dl_cholesky(spd);
  dl_release_id(spd);
  if (l == 0) dlfuzz::fatal("the Cholesky factor of A A^T + n I failed:", dl_last_error());
  p.put(l);
}

void scans_and_sorting(Program& p) {
  const uint64_t x = p.tensor();
  if (!p.cheap(x)) return;
  uint64_t out2[2] = {0, 0};
  switch (p.in.pick(6)) {
    case 0: p.put(dl_cumsum(x, p.dim())); break;
    case 1: p.put(dl_cumprod(x, p.dim())); break;
    case 2:
      p.check_status(dl_sort(x, p.dim(), p.in.flag(), out2));
      p.put(out2[0]), p.put(out2[1]);
      break;
    case 3: p.put(dl_nonzero(x)); break;
    default: {
      const uint64_t v = p.tensor();
      if (p.cheap(v)) p.put(dl_searchsorted(x, v, p.in.flag()));
      break;
    }
  }
}

void linalg(Program& p) {
  const uint64_t a = p.tensor();
  if (!small_for_linalg(a)) return;
  uint64_t out[3] = {0, 0, 0};
  switch (p.in.pick(7)) {
    case 0: {
      const uint64_t b = p.tensor();
      if (small_for_linalg(b)) p.put(dl_linalg_solve(a, b));
      break;
    }
    case 1: {
      const uint64_t b = p.tensor();
      if (small_for_linalg(b)) p.put(dl_solve_triangular(a, b, p.in.flag(), p.in.flag()));
      break;
    }
    case 2: p.put(dl_cholesky(a)); break;
    case 3:
      p.check_status(dl_qr(a, p.in.flag(), out));
      p.put(out[0]), p.put(out[1]);
      break;
    case 4:
      p.check_status(dl_eigh(a, out));
      p.put(out[0]), p.put(out[1]);
      break;
    case 5:
      p.check_status(dl_svd(a, p.in.flag(), out));
      p.put(out[0]), p.put(out[1]), p.put(out[2]);
      break;
    default:
      p.check_status(dl_slogdet(a, out));
      p.put(out[0]), p.put(out[1]);
      break;
  }
}

void layers_and_updates(Program& p) {
  const uint64_t x = p.tensor();
  if (!p.cheap(x)) return;
  uint64_t out2[2] = {0, 0};
  switch (p.in.pick(4)) {
    case 0: {
      const uint64_t w = p.in.flag() ? 0 : p.tensor(), b = p.in.flag() ? 0 : p.tensor();
      if (p.cheap(w) && p.cheap(b))
        p.put(dl_layer_norm(x, p.in.one_of(kEps) + p.in.pick(4), w, b, p.in.one_of(kEpsValues)));
      break;
    }
    case 1: {
      const uint64_t c = p.tensor();
      if (!p.cheap(c)) break;
      p.check_status(dl_lstm_gates(x, c, out2));
      p.put(out2[0]), p.put(out2[1]);
      break;
    }
    case 2: {
      // In place: the parameter may alias its gradient or its buffer (the pool repeats).
      const uint64_t g = p.tensor(), buf = p.in.flag() ? 0 : p.tensor();
      if (p.cheap(g) && p.cheap(buf))
        p.check_status(dl_sgd_step_(x, g, buf, p.scalar(), p.scalar(), p.scalar(), p.scalar(), p.in.flag(),
                                    p.in.flag()));
      break;
    }
    default: {
      const uint64_t g = p.tensor(), m = p.tensor(), v = p.tensor(), vmax = p.in.flag() ? 0 : p.tensor();
      if (p.cheap(g) && p.cheap(m) && p.cheap(v) && p.cheap(vmax))
        p.check_status(dl_adam_step_(x, g, m, v, vmax, p.scalar(), p.scalar(), p.scalar(), p.scalar(),
                                     p.scalar(), p.in.flag(), p.scalar()));
      break;
    }
  }
}

// The entry points the Lua side calls with values (inline or handles) rather than ids,
// and half-precision copies of the pool's tensors for the ops above to take.
void values(Program& p) {
  const dl_tensor* a = p.value(0);
  const dl_tensor* b = p.value(1);
  if (!p.cheap(a) || !p.cheap(b)) return;
  dl_tensor* r = p.result.get();
  switch (p.in.pick(6)) {
    case 0: p.put_value(dl_matmul_value(a, b, r)); break;
    case 1: p.put_value(dl_softmax_value(a, p.dim(), p.in.flag(), r)); break;
    case 2: p.put_value(dl_cross_entropy_value(a, b, p.in.pick(4), p.in.flag(), p.position(), r)); break;
    case 3: p.put_value(dl_watch_value(a, r)); break;
    case 4: {
      int task = 0;
      const int st = dl_backward_one(a, b, r, &task);
      if (st != 2) {
        p.put_value(st);
        break;
      }
      uint64_t res[1] = {0};
      if (dl_backward_results(task, res, 1) == 0) p.put(res[0]);
      dl_backward_free(task);
      break;
    }
    default: p.put(dl_to(p.tensor(), p.in.flag() ? 6 : 7)); break;   // float16, bfloat16
  }
}

void run(Program& p) {
  while (!p.in.done()) {
    switch (p.in.pick(13)) {
      case 0: case 1: p.create(); break;
      case 2: square(p); break;
      case 3: p.views(); break;
      case 4: scans_and_sorting(p); break;
      case 5: case 6: linalg(p); break;
      case 7: layers_and_updates(p); break;
      case 8: p.elements(); break;
      case 9: p.gradients(); break;
      case 10: values(p); break;
      default: p.release_slot(p.in.pick(dlfuzz::kPool)); break;
    }
  }
}

}  // namespace

DLFUZZ_PROGRAM_TARGET(run)

// The C ABI of the decompositions and solves (declared in bindings/capi.h,
// "decompositions and solves"; the engine side is tensor/ops.h, recorded through
// autograd/autograd.h). Conventions are those of Note [The C ABI] in capi.cpp: handles,
// 0 / -1 on failure; a call with several results fills them all or none.
#include <cstdint>

#include "autograd/autograd.h"
#include "bindings/capi.h"
#include "bindings/guard.h"
#include "bindings/arenas.h"
#include "bindings/handles.h"

using dl::Tensor;
namespace ag = dl::ag;
using dl::bind::get;
using dl::bind::guard_handle;
using dl::bind::guard_status;


uint64_t dl_linalg_solve(uint64_t a, uint64_t b) {
  return guard_handle([&] { return ag::linalg_solve(get(a, "linalg.solve"), get(b, "linalg.solve")); });
}

uint64_t dl_solve_triangular(uint64_t a, uint64_t b, int upper, int unitriangular) {
  return guard_handle([&] {
    const char* op = "linalg.solve_triangular";
    return ag::solve_triangular(get(a, op), get(b, op), upper != 0, unitriangular != 0);
  });
}

uint64_t dl_cholesky(uint64_t a) {
  return guard_handle([&] { return ag::cholesky(get(a, "linalg.cholesky")); });
}

int dl_qr(uint64_t a, int complete, uint64_t* out2) {
  out2[0] = out2[1] = 0;
  return guard_status([&] {
    auto [q, r] = ag::qr(get(a, "linalg.qr"), complete != 0);
    dl::bind::handles_new({q, r}, out2);
  });
}

int dl_eigh(uint64_t a, uint64_t* out2) {
  out2[0] = out2[1] = 0;
  return guard_status([&] {
    auto [w, v] = ag::eigh(get(a, "linalg.eigh"));
    dl::bind::handles_new({w, v}, out2);
  });
}

int dl_svd(uint64_t a, int full_matrices, uint64_t* out3) {
  out3[0] = out3[1] = out3[2] = 0;
  return guard_status([&] {
    dl::SvdResult r = ag::svd(get(a, "linalg.svd"), full_matrices != 0);
    dl::bind::handles_new({r.u, r.s, r.vh}, out3);
  });
}

int dl_slogdet(uint64_t a, uint64_t* out2) {
  out2[0] = out2[1] = 0;
  return guard_status([&] {
    auto [sign, logabs] = ag::slogdet(get(a, "linalg.slogdet"));
    dl::bind::handles_new({sign, logabs}, out2);
  });
}

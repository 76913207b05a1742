// Front ends of the decompositions and solves: shapes, dtypes, batch broadcasting and
// the empty cases, then one Backend::linalg call on contiguous 3-D batches (LAPACK on
// the CPU, tensor/cpu/lapack.cpp). Their derivatives are in autograd/linalg.cpp; the
// composites (inv, det, lstsq, pinv, matrix norms) are Lua, scripts/dlua/linalg.lua.
//
//   linalg_solve(a (5, 1, 3, 3), b (4, 3, 2))  -> (5, 4, 3, 2)   batch dims broadcast
//   qr(a (2, 6, 4))                            -> Q (2, 6, 4), R (2, 4, 4)
//   svd(a (6, 4), false)                       -> U (6, 4), S (4,), Vh (4, 4)
#include <cmath>
#include <string>

#include "tensor/backend.h"
#include "tensor/observe.h"
#include "tensor/half_ops.h"

namespace dl {

namespace {

// The last two sizes of a tensor of at least 2 dims (the last one's for a vector).
inline int64_t rows(const Tensor& a) { return a.size(a.dim() - 2); }
inline int64_t cols(const Tensor& a) { return a.size(a.dim() - 1); }

// The float dtype an op computes in: float32/float64 stay, integers and bool become the
// default float dtype (kFloatOnly).
DType float_of(const Tensor& x) { return x.is_floating() ? x.dtype() : default_float(); }

void check_matrix(const Tensor& a, const char* op, const char* what = "A") {
  DL_CHECK(a.dim() >= 2, op, ": expected ", what, " with at least 2 dimensions (a matrix or a batch of them), got shape ",
           a.shape());
}
void check_square(const Tensor& a, const char* op) {
  check_matrix(a, op);
  DL_CHECK(cols(a) == rows(a), op, ": expected square matrices, got shape ", a.shape());
}

Shape batch_of(const Tensor& a) {
  Shape s = a.shape();
  s.resize(s.size() - 2);
  return s;
}
int64_t count(const Shape& batch) {
  int64_t n = 1;
  for (int64_t v : batch) n *= v;
  return n;
}
Shape with(Shape s, std::initializer_list<int64_t> tail) {
  for (int64_t v : tail) s.push_back(v);
  return s;
}

// x in dtype dt, contiguous, as (B, r, c) (or (B, r) for `vec`): the kernels' layout.
Tensor batched(const Tensor& x, DType dt, int64_t B) {
  Tensor c = contiguous(x.dtype() == dt ? x : cast(x, dt));
  Shape s{B};
  for (int d = c.dim() - 2; d < c.dim(); ++d) s.push_back(c.size(d));
  return view(c, s);
}
// A fresh contiguous result of `shape`, seen by the kernel as (B, rest...).
Tensor as_batch(const Tensor& out, int64_t B, int keep) {
  Shape s{B};
  for (int d = out.dim() - keep; d < out.dim(); ++d) s.push_back(out.size(d));
  return view(out, s);
}

// The name an op's errors give: the Lua function's (dl.linalg.solve ...).
const char* shown(Op op) {
  switch (op) {
    case Op::LinalgSolve: return "linalg.solve";
    case Op::SolveTriangular: return "linalg.solve_triangular";
    case Op::Cholesky: return "linalg.cholesky";
    case Op::Qr: return "linalg.qr";
    case Op::Eigh: return "linalg.eigh";
    case Op::Svd: return "linalg.svd";
    default: return "linalg.slogdet";
  }
}

}  // namespace

void linalg_failed(Op op, int64_t info, int64_t b, int64_t count) {
  const std::string which = count > 1 ? " (matrix " + std::to_string(b + 1) + " of the batch)" : std::string();
  if (info < 0)   // the only argument a call can get wrong here is the matrix's values
    fail(ErrorKind::Value, shown(op), ": the matrix", which, " holds NaN or infinity");
  switch (op) {
    case Op::LinalgSolve:
      fail(ErrorKind::Value, shown(op), ": the matrix is singular", which, ": U(", info, ", ", info,
           ") of its LU factorization is exactly zero");
    case Op::Cholesky:
      fail(ErrorKind::Value, shown(op), ": the matrix is not positive-definite", which, ": its leading minor of order ",
           info, " is not positive");
    default:
      fail(ErrorKind::Value, shown(op), ": the algorithm did not converge", which, " (LAPACK info ", info, ")");
  }
}

namespace {

void run(Op op, const Device& d, const TensorList& outs, const TensorList& ins, const LinalgOpts& o) {
  kernel(d, &Backend::linalg, shown(op))(op, outs, ins, o);
}

// A and B of a solve with their batch dims broadcast against each other.
std::pair<Tensor, Tensor> broadcast_batches(const Tensor& a, const Tensor& b, const char* op) {
  const Shape ba = batch_of(a), bb = batch_of(b);
  const int n = std::max(ba.size(), bb.size());
  Shape full;
  for (int i = 0; i < n; ++i) {
    const int ia = i - (n - ba.size()), ib = i - (n - bb.size());
    const int64_t sa = ia >= 0 ? ba[ia] : 1, sb = ib >= 0 ? bb[ib] : 1;
    DL_CHECK(sa == sb || sa == 1 || sb == 1, op, ": the batch dimensions of A ", a.shape(), " and B ", b.shape(),
             " cannot be broadcast");
    full.push_back(sa == 1 ? sb : sa);
  }
  return {expand(a, with(full, {rows(a), cols(a)})), expand(b, with(full, {rows(b), cols(b)}))};
}

Tensor solve_impl(Op op, const Tensor& a, const Tensor& b, const LinalgOpts& o) {
  if (any_half({&a, &b})) return narrowed(solve_impl(op, widened(a), widened(b), o), storage_of({&a, &b}));
  const char* name = shown(op);
  DL_CHECK(a.device() == b.device(), name, ": expected tensors on the same device, got ", a.device(), " and ",
           b.device());
  check_square(a, name);
  check_matrix(b, name, "B");
  DL_CHECK(rows(b) == cols(a), name, ": A ", a.shape(), " and B ", b.shape(),
           " do not match (B needs as many rows as A)");
  const DType dt = promote(float_of(a), float_of(b));
  auto [ea, eb] = broadcast_batches(a, b, name);
  Tensor out = empty(eb.shape(), dt, a.device(), name);
  const int64_t B = count(batch_of(out));
  if (out.numel() == 0) return out;
  run(op, a.device(), {as_batch(out, B, 2)}, {batched(ea, dt, B), batched(eb, dt, B)}, o);
  return out;
}

}  // namespace

Tensor linalg_solve(const Tensor& a, const Tensor& b) {
  return observed_other("linalg_solve", [&] { return solve_impl(Op::LinalgSolve, a, b, {}); },
                        [&](Observed& ob, const Tensor&) { ob.ins = {&a, &b}; });
}

Tensor solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool unitriangular) {
  LinalgOpts o;
  o.upper = upper;
  o.unitriangular = unitriangular;
  return observed_other("solve_triangular", [&] { return solve_impl(Op::SolveTriangular, a, b, o); },
                        [&](Observed& ob, const Tensor&) {
                          ob.ins = {&a, &b};
                          ob.ints = {upper, unitriangular};
                        });
}

namespace {
Tensor cholesky_impl(const Tensor& a) {
  if (is_half(a.dtype())) return narrowed(cholesky_impl(widened(a)), a.dtype());
  check_square(a, "linalg.cholesky");
  const DType dt = float_of(a);
  Tensor out = empty(a.shape(), dt, a.device(), "linalg.cholesky");
  const int64_t B = count(batch_of(a));
  if (out.numel() == 0) return out;
  run(Op::Cholesky, a.device(), {as_batch(out, B, 2)}, {batched(a, dt, B)}, {});
  return out;
}

std::pair<Tensor, Tensor> qr_impl(const Tensor& a, bool complete) {
  if (is_half(a.dtype())) return narrowed(qr_impl(widened(a), complete), a.dtype());
  check_matrix(a, "linalg.qr");
  const DType dt = float_of(a);
  const int64_t m = rows(a), n = cols(a), k = complete ? m : std::min(m, n);
  const Shape batch = batch_of(a);
  Tensor q = empty(with(batch, {m, k}), dt, a.device(), "linalg.qr");
  Tensor r = empty(with(batch, {k, n}), dt, a.device(), "linalg.qr");
  const int64_t B = count(batch);
  if (B == 0) return {q, r};
  if (m == 0 || n == 0) {  // R is empty or zeros; a complete Q is the identity
    backend_for(a.device(), "linalg.qr").fill(r, 0);
    if (q.numel()) copy_(q, expand(eye(m, k, dt, a.device()), q.shape()));
    return {q, r};
  }
  LinalgOpts o;
  o.full = complete;
  run(Op::Qr, a.device(), {as_batch(q, B, 2), as_batch(r, B, 2)}, {batched(a, dt, B)}, o);
  return {q, r};
}

std::pair<Tensor, Tensor> eigh_impl(const Tensor& a) {
  if (is_half(a.dtype())) return narrowed(eigh_impl(widened(a)), a.dtype());
  check_square(a, "linalg.eigh");
  const DType dt = float_of(a);
  const int64_t n = cols(a);
  const Shape batch = batch_of(a);
  Tensor w = empty(with(batch, {n}), dt, a.device(), "linalg.eigh");
  Tensor v = empty(a.shape(), dt, a.device(), "linalg.eigh");
  const int64_t B = count(batch);
  if (w.numel() == 0) return {w, v};
  run(Op::Eigh, a.device(), {as_batch(w, B, 1), as_batch(v, B, 2)}, {batched(a, dt, B)}, {});
  return {w, v};
}

SvdResult svd_impl(const Tensor& a, bool full) {
  if (is_half(a.dtype())) {
    SvdResult r = svd_impl(widened(a), full);
    return {narrowed(r.u, a.dtype()), narrowed(r.s, a.dtype()), narrowed(r.vh, a.dtype())};
  }
  check_matrix(a, "linalg.svd");
  const DType dt = float_of(a);
  const int64_t m = rows(a), n = cols(a), k = std::min(m, n);
  const Shape batch = batch_of(a);
  SvdResult r;
  r.u = empty(with(batch, {m, full ? m : k}), dt, a.device(), "linalg.svd");
  r.s = empty(with(batch, {k}), dt, a.device(), "linalg.svd");
  r.vh = empty(with(batch, {full ? n : k, n}), dt, a.device(), "linalg.svd");
  const int64_t B = count(batch);
  if (B == 0) return r;
  if (k == 0) {  // no singular values; full U and Vh are identities
    if (r.u.numel()) copy_(r.u, expand(eye(m, m, dt, a.device()), r.u.shape()));
    if (r.vh.numel()) copy_(r.vh, expand(eye(n, n, dt, a.device()), r.vh.shape()));
    return r;
  }
  LinalgOpts o;
  o.full = full;
  run(Op::Svd, a.device(), {as_batch(r.u, B, 2), as_batch(r.s, B, 1), as_batch(r.vh, B, 2)}, {batched(a, dt, B)}, o);
  return r;
}

std::pair<Tensor, Tensor> slogdet_impl(const Tensor& a) {
  if (is_half(a.dtype())) return narrowed(slogdet_impl(widened(a)), a.dtype());
  check_square(a, "linalg.slogdet");
  const DType dt = float_of(a);
  const Shape batch = batch_of(a);
  Tensor sign = empty(batch, dt, a.device(), "linalg.slogdet");
  Tensor logabs = empty(batch, dt, a.device(), "linalg.slogdet");
  const int64_t B = count(batch);
  if (B == 0) return {sign, logabs};
  if (cols(a) == 0) {  // the determinant of a 0 x 0 matrix is 1
    backend_for(a.device(), "linalg.slogdet").fill(sign, 1);
    backend_for(a.device(), "linalg.slogdet").fill(logabs, 0);
    return {sign, logabs};
  }
  run(Op::Slogdet, a.device(), {view(sign, Shape{B}), view(logabs, Shape{B})}, {batched(a, dt, B)}, {});
  return {sign, logabs};
}
}  // namespace

Tensor cholesky(const Tensor& a) {
  return observed_other("cholesky", [&] { return cholesky_impl(a); },
                        [&](Observed& ob, const Tensor&) { ob.ins = {&a}; });
}

std::pair<Tensor, Tensor> qr(const Tensor& a, bool complete) {
  return observed_other("qr", [&] { return qr_impl(a, complete); }, [&](Observed& ob, const auto&) {
    ob.ins = {&a};
    ob.ints = {complete};
  });
}

std::pair<Tensor, Tensor> eigh(const Tensor& a) {
  return observed_other("eigh", [&] { return eigh_impl(a); }, [&](Observed& ob, const auto&) { ob.ins = {&a}; });
}

SvdResult svd(const Tensor& a, bool full_matrices) {
  return observed_other("svd", [&] { return svd_impl(a, full_matrices); }, [&](Observed& ob, const auto&) {
    ob.ins = {&a};
    ob.ints = {full_matrices};
  });
}

std::pair<Tensor, Tensor> slogdet(const Tensor& a) {
  return observed_other("slogdet", [&] { return slogdet_impl(a); },
                        [&](Observed& ob, const auto&) { ob.ins = {&a}; });
}

}  // namespace dl

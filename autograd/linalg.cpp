// The decompositions and solves, recorded: forwards and derivatives side by side. Each
// derivative is written in recorded ops (solves, products, masks), so gradients of any
// order come with it. The formulas are the standard ones, as PyTorch's
// FunctionsManual.cpp states them (Murray 2016 for Cholesky; Walter and Lehmann's
// skew-symmetric forms for QR, eigh and SVD).
#include "autograd/math.h"
#include "autograd/record.h"

namespace dl::ag {

using namespace math;

namespace {

// The last two sizes of a tensor of at least 2 dims (the last one's for a vector).
inline int64_t rows(const Tensor& a) { return a.size(a.dim() - 2); }
inline int64_t cols(const Tensor& a) { return a.size(a.dim() - 1); }

Tensor mT(const Tensor& x) { return ag::transpose(x, -2, -1); }

// A constant 0/1 mask (n, m) of x's dtype and device: j - i >= k (upper) or <= k.
Tensor tri_mask(int64_t n, int64_t m, int64_t k, bool upper, const Tensor& like) {
  Tensor r = dl::view(dl::arange(0, double(n), 1, DType::Int64, like.device()), Shape{n, 1});
  Tensor c = dl::view(dl::arange(0, double(m), 1, DType::Int64, like.device()), Shape{1, m});
  Tensor d = dl::binary(Op::Sub, c, r);
  return dl::cast(dl::compare(upper ? Op::Ge : Op::Le, d, Scalar::integer(k)), like.dtype());
}
Tensor triu(const Tensor& x, int64_t k = 0) { return x * tri_mask(rows(x), cols(x), k, true, x); }
Tensor tril(const Tensor& x, int64_t k = 0) { return x * tri_mask(rows(x), cols(x), k, false, x); }
Tensor eye_like(int64_t n, const Tensor& like) { return dl::eye(n, n, like.dtype(), like.device()); }
// diag_embed(v) (..., n, n) of v (..., n).
Tensor diag_embed(const Tensor& v) { return ag::unsqueeze(v, -1) * eye_like(cols(v), v); }
// X with X A = B (a solve from the right) for triangular A.
Tensor solve_triangular_right(const Tensor& a, const Tensor& b, bool upper) {
  return mT(ag::solve_triangular(mT(a), mT(b), !upper, false));
}
bool wants(const Node& n, int i) { return n.next[i].valid(); }

}  // namespace

// ---- solves ----------------------------------------------------------------------------------

Tensor linalg_solve(const Tensor& a, const Tensor& b) {
  Tensor x = dl::linalg_solve(a, b);
  Ref<Node> n = maybe_node(Op::LinalgSolve, {&a, &b});
  if (!n) return x;
  n->save(a);
  n->save(x, true);
  return finish(n, x);
}
// A X = B: gB = A^-T g, gA = -gB X^T (summed over broadcast batch dims by the engine).
template <> Grads derivative<Op::LinalgSolve>(Node& n, const TensorList& g) {
  Tensor a = n.unpack(0), x = n.unpack(1);
  Tensor gb = ag::linalg_solve(mT(a), g[0]);
  return {wants(n, 0) ? -ag::matmul(gb, mT(x)) : Tensor(), gb};
}

Tensor solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool unitriangular) {
  Tensor x = dl::solve_triangular(a, b, upper, unitriangular);
  Ref<Node> n = maybe_node(Op::SolveTriangular, {&a, &b});
  if (!n) return x;
  n->save(a);
  n->save(x, true);
  n->attrs.i[0] = upper;
  n->attrs.i[1] = unitriangular;
  return finish(n, x);
}
// As the full solve, with A's gradient kept to the triangle the op reads.
template <> Grads derivative<Op::SolveTriangular>(Node& n, const TensorList& g) {
  Tensor a = n.unpack(0), x = n.unpack(1);
  const bool upper = n.attrs.i[0] != 0, unit = n.attrs.i[1] != 0;
  Tensor gb = ag::solve_triangular(mT(a), g[0], !upper, unit);
  Tensor ga;
  if (wants(n, 0)) {
    ga = -ag::matmul(gb, mT(x));
    ga = upper ? triu(ga, unit ? 1 : 0) : tril(ga, unit ? -1 : 0);
  }
  return {ga, gb};
}

// ---- factorizations --------------------------------------------------------------------------

Tensor cholesky(const Tensor& a) {
  Tensor l = dl::cholesky(a);
  Ref<Node> n = maybe_node(Op::Cholesky, {&a});
  if (!n) return l;
  n->save(l, true);
  return finish(n, l);
}
// gA = L^-T Phi(L^T gL) L^-1, symmetrised (Murray 2016); Phi takes the lower triangle
// with the diagonal halved.
template <> Grads derivative<Op::Cholesky>(Node& n, const TensorList& g) {
  Tensor l = n.unpack(0);
  Tensor p = tril(ag::matmul(mT(l), g[0]));
  p = (p + mT(tril(p, -1))) * 0.5;
  Tensor s = ag::solve_triangular(mT(l), p, true, false);
  return {solve_triangular_right(l, s, false)};
}

std::pair<Tensor, Tensor> qr(const Tensor& a, bool complete) {
  auto [q, r] = dl::qr(a, complete);
  Ref<Node> n = maybe_node(Op::Qr, {&a});
  if (!n) return {q, r};
  n->save(q, true, 0);
  n->save(r, true, 1);
  n->attrs.i[0] = complete;
  finish_all(n, {&q, &r});
  return {q, r};
}

namespace {
// A = Q R with m >= n (R square): gA = [gQ + Q syminvadj(triu(gR R^T - Q^T gQ))] R^-T,
// where syminvadj(triu(X)) = triu(X) + triu(X, 1)^T.
Tensor qr_tall_backward(const Tensor& gq, const Tensor& gr, const Tensor& q, const Tensor& r) {
  Tensor m;
  if (gr.defined()) m = ag::matmul(gr, mT(r));
  if (gq.defined()) m = m.defined() ? m - ag::matmul(mT(q), gq) : -ag::matmul(mT(q), gq);
  Tensor ga = ag::matmul(q, triu(m) + mT(triu(m, 1)));
  if (gq.defined()) ga = ga + gq;
  return solve_triangular_right(mT(r), ga, false);
}
}  // namespace

template <> Grads derivative<Op::Qr>(Node& n, const TensorList& g) {
  Tensor q = n.unpack(0), r = n.unpack(1);
  const int64_t m = rows(q), nc = cols(r);
  if (n.attrs.i[0] && m > nc)
    fail(ErrorKind::Value, "linalg.qr: the complete decomposition of a matrix with more rows than columns has no unique "
                           "gradient (use the reduced one)");
  if (m >= nc) return {qr_tall_backward(g[0], g[1], q, r)};
  // m < n: R = [U | V] with U square. A = [Q U | Q V]; the left block is the square case
  // with gQ gaining Y gV^T (Y = Q V, A's right block), the right block's gradient is Q gV.
  Tensor u = ag::narrow(r, -1, 0, m), y = ag::matmul(q, ag::narrow(r, -1, m, nc - m));
  Tensor gu, gv, gq = g[0];
  if (g[1].defined()) {
    gu = ag::narrow(g[1], -1, 0, m);
    gv = ag::narrow(g[1], -1, m, nc - m);
    gq = gq.defined() ? gq + ag::matmul(y, mT(gv)) : ag::matmul(y, mT(gv));
  }
  Tensor left = qr_tall_backward(gq, gu, q, u);
  Tensor right = gv.defined() ? ag::matmul(q, gv) : ag::binary(Op::Mul, y, Scalar(0.0));
  return {ag::cat({left, right}, -1)};
}

std::pair<Tensor, Tensor> eigh(const Tensor& a) {
  auto [w, v] = dl::eigh(a);
  Ref<Node> n = maybe_node(Op::Eigh, {&a});
  if (!n) return {w, v};
  n->save(w, true, 0);
  n->save(v, true, 1);
  finish_all(n, {&w, &v});
  return {w, v};
}
// gA = V (diag(gw) + skew(V^T gV) / 2 / E) V^T with E_ij = w_j - w_i (1 on the diagonal,
// where the skew part is 0). Repeated eigenvalues make E zero: the gradient of the
// eigenvectors is then undefined, as in every framework.
template <> Grads derivative<Op::Eigh>(Node& n, const TensorList& g) {
  Tensor w = n.unpack(0), v = n.unpack(1);
  Tensor inner;
  if (g[1].defined()) {
    Tensor vg = ag::matmul(mT(v), g[1]);
    Tensor e = ag::unsqueeze(w, -2) - ag::unsqueeze(w, -1) + eye_like(cols(w), w);
    inner = (vg - mT(vg)) * 0.5 / e;
  }
  if (g[0].defined()) inner = inner.defined() ? inner + diag_embed(g[0]) : diag_embed(g[0]);
  return {ag::matmul(ag::matmul(v, inner), mT(v))};
}

SvdResult svd(const Tensor& a, bool full_matrices) {
  SvdResult r = dl::svd(a, full_matrices);
  Ref<Node> n = maybe_node(Op::Svd, {&a});
  if (!n) return r;
  n->save(r.u, true, 0);
  n->save(r.s, true, 1);
  n->save(r.vh, true, 2);
  n->attrs.i[0] = full_matrices;
  finish_all(n, {&r.u, &r.s, &r.vh});
  return r;
}
// A = U diag(S) Vh, k = min(m, n):
//   gA = U [(skew(U^T gU) S_j + S_i skew(V^T gV)) / E + diag(gS)] Vh, E_ij = S_j^2 - S_i^2,
// plus (I - U U^T) gU S^-1 Vh when m > k, or U S^-1 gV^T (I - V V^T) when n > k.
template <> Grads derivative<Op::Svd>(Node& n, const TensorList& g) {
  Tensor u = n.unpack(0), s = n.unpack(1), vh = n.unpack(2);
  const int64_t m = rows(u), nc = cols(vh), k = cols(s);
  const Tensor &gu = g[0], &gs = g[1], &gvh = g[2];
  if (n.attrs.i[0] && m != nc && (gu.defined() || gvh.defined()))
    fail(ErrorKind::Value, "linalg.svd: the singular vectors of full_matrices = true are not unique for a matrix that is "
                           "not square, so they have no gradient (use full_matrices = false)");
  if (n.attrs.i[0]) {   // full U and Vh: only their first k columns (rows) meet S
    u = ag::narrow(u, -1, 0, k);
    vh = ag::narrow(vh, -2, 0, k);
  }
  if (!gu.defined() && !gvh.defined()) {
    Tensor ga = ag::matmul(ag::matmul(u, diag_embed(gs)), vh);
    return {ga};
  }
  Tensor v = mT(vh);
  Tensor s_row = ag::unsqueeze(s, -2), s_col = ag::unsqueeze(s, -1);
  Tensor s2 = s * s;
  Tensor e = ag::unsqueeze(s2, -2) - ag::unsqueeze(s2, -1) + eye_like(k, s);
  Tensor inner;
  if (gu.defined()) {
    Tensor ug = ag::matmul(mT(u), gu);
    inner = (ug - mT(ug)) * s_row;
  }
  if (gvh.defined()) {
    Tensor vg = ag::matmul(vh, mT(gvh));
    Tensor t = s_col * (vg - mT(vg));
    inner = inner.defined() ? inner + t : t;
  }
  inner = inner / e;
  if (gs.defined()) inner = inner + diag_embed(gs);
  Tensor ga;
  if (m > k && gu.defined()) {
    Tensor gus = gu / s_row;
    ga = ag::matmul(u, inner) + gus - ag::matmul(u, ag::matmul(mT(u), gus));
    ga = ag::matmul(ga, vh);
  } else if (nc > k && gvh.defined()) {
    Tensor sgvh = gvh / s_col;
    ga = ag::matmul(inner, vh) + sgvh - ag::matmul(ag::matmul(sgvh, v), vh);
    ga = ag::matmul(u, ga);
  } else {
    ga = ag::matmul(ag::matmul(u, inner), vh);
  }
  return {ga};
}

std::pair<Tensor, Tensor> slogdet(const Tensor& a) {
  auto [sign, logabs] = dl::slogdet(a);
  Ref<Node> n = maybe_node(Op::Slogdet, {&a});
  if (!n) return {sign, logabs};
  n->save(a);
  n->num_outputs = 2;   // the sign carries no gradient
  logabs = finish(n, logabs, 1);
  return {sign, logabs};
}
// d log|det A| = tr(A^-1 dA): gA = g A^-T.
template <> Grads derivative<Op::Slogdet>(Node& n, const TensorList& g) {
  Tensor a = n.unpack(0);
  if (!g[1].defined()) return {Tensor()};
  Tensor inv_t = ag::linalg_solve(mT(a), ag::expand(eye_like(cols(a), a), a.shape()));
  return {ag::unsqueeze(ag::unsqueeze(g[1], -1), -1) * inv_t};
}

}  // namespace dl::ag

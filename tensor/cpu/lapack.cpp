// The decompositions and solves on the CPU: LAPACK (OpenBLAS's, declared by Debian's
// lapack.h, loaded with OpenBLAS: openblas.h) and cblas_?trsm, one matrix of the batch
// at a time (each call is threaded by OpenBLAS itself).
//
// Note [Row-major matrices in LAPACK]
// The engine's matrices are row-major; LAPACK's are column-major. A row-major (r, c)
// matrix is, in the same memory, the column-major matrix of its transpose (c, r), so
// most ops need no transposing copy:
//   - solve: getrf factors A^T (a copy, as getrf overwrites), getrs with trans 'T' then
//     solves A X = B; B and X are transposed only when they have several columns.
//   - cholesky: potrf 'U' of A^T's copy gives U with A^T = U^T U; read row-major, U's
//     memory is U^T = L with A = L L^T. potrf 'U' reads the column-major upper triangle,
//     which is A's row-major lower one.
//   - svd: gesdd of A^T = U' S V'^T means A = V' S U'^T: the column-major U' written by
//     gesdd is, row-major, Vh, and its V'^T is U. No transposes at all.
//   - eigh: syevd 'U' of A^T (= A) reads A's lower triangle; its eigenvectors are
//     column-major columns and are transposed into the row-major result.
//   - slogdet: det(A^T) = det(A), so getrf of A^T's copy is enough.
//   - qr: QR of A^T is not a QR of A, so A is transposed into the column-major work.
// Triangular solves need no LAPACK: cblas_?trsm takes row-major matrices as they are.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/openblas.h"

namespace dl::cpu {

namespace {

using Int = lapack_int;

// ---- the LAPACK routines by element type ---------------------------------------------------
// Each character argument's length follows the arguments (openblas.h).
void getrf(Int n, float* a, Int* ipiv, Int* info) { openblas().sgetrf(&n, &n, a, &n, ipiv, info); }
void getrf(Int n, double* a, Int* ipiv, Int* info) { openblas().dgetrf(&n, &n, a, &n, ipiv, info); }
void getrs(Int n, Int k, const float* a, const Int* ipiv, float* b, Int* info) {
  openblas().sgetrs("T", &n, &k, a, &n, ipiv, b, &n, info, 1);
}
void getrs(Int n, Int k, const double* a, const Int* ipiv, double* b, Int* info) {
  openblas().dgetrs("T", &n, &k, a, &n, ipiv, b, &n, info, 1);
}
void potrf(Int n, float* a, Int* info) { openblas().spotrf("U", &n, a, &n, info, 1); }
void potrf(Int n, double* a, Int* info) { openblas().dpotrf("U", &n, a, &n, info, 1); }
void geqrf(Int m, Int n, float* a, float* tau, float* work, Int lwork, Int* info) {
  openblas().sgeqrf(&m, &n, a, &m, tau, work, &lwork, info);
}
void geqrf(Int m, Int n, double* a, double* tau, double* work, Int lwork, Int* info) {
  openblas().dgeqrf(&m, &n, a, &m, tau, work, &lwork, info);
}
void orgqr(Int m, Int n, Int k, float* a, const float* tau, float* work, Int lwork, Int* info) {
  openblas().sorgqr(&m, &n, &k, a, &m, tau, work, &lwork, info);
}
void orgqr(Int m, Int n, Int k, double* a, const double* tau, double* work, Int lwork, Int* info) {
  openblas().dorgqr(&m, &n, &k, a, &m, tau, work, &lwork, info);
}
void syevd(Int n, float* a, float* w, float* work, Int lwork, Int* iwork, Int liwork, Int* info) {
  openblas().ssyevd("V", "U", &n, a, &n, w, work, &lwork, iwork, &liwork, info, 1, 1);
}
void syevd(Int n, double* a, double* w, double* work, Int lwork, Int* iwork, Int liwork, Int* info) {
  openblas().dsyevd("V", "U", &n, a, &n, w, work, &lwork, iwork, &liwork, info, 1, 1);
}
void gesdd(const char* job, Int m, Int n, float* a, float* s, float* u, Int ldu, float* vt, Int ldvt, float* work,
           Int lwork, Int* iwork, Int* info) {
  openblas().sgesdd(job, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info, 1);
}
void gesdd(const char* job, Int m, Int n, double* a, double* s, double* u, Int ldu, double* vt, Int ldvt,
           double* work, Int lwork, Int* iwork, Int* info) {
  openblas().dgesdd(job, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info, 1);
}
void trsm(bool upper, bool unit, Int n, Int k, const float* a, float* b) {
  openblas().cblas_strsm(CblasRowMajor, CblasLeft, upper ? CblasUpper : CblasLower, CblasNoTrans,
                         unit ? CblasUnit : CblasNonUnit, n, k, 1.0f, a, n, b, k);
}
void trsm(bool upper, bool unit, Int n, Int k, const double* a, double* b) {
  openblas().cblas_dtrsm(CblasRowMajor, CblasLeft, upper ? CblasUpper : CblasLower, CblasNoTrans,
                         unit ? CblasUnit : CblasNonUnit, n, k, 1.0, a, n, b, k);
}

// LAPACK's sizes are 32-bit: a larger matrix is refused by name rather than truncated.
Int dim_of(int64_t v, const char* op) {
  DL_CHECK(v <= INT32_MAX / 2, op, ": a matrix dimension of ", v, " is larger than LAPACK takes");
  return Int(v);
}
// The optimal workspace LAPACK reported to a query (lwork = -1), rounded up: a float32
// query reports it as a float, which may have rounded it down.
Int lwork_of(double w) { return std::max<Int>(1, Int(std::ceil(w * (1 + 1e-6)))); }

// out (r, c) row-major = the column-major (r, c) matrix at src with leading dim ld.
template <typename T>
void from_colmajor(T* out, const T* src, int64_t r, int64_t c, int64_t ld) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = src[i + j * ld];
}

// Whether the n values at p are all finite. The iterative decompositions (gesdd, syevd)
// are given only matrices that are: LAPACK's gesdd refuses NaN itself (info -4) but not
// infinity, which it scales into NaNs that its bidiagonal QR iteration (bdsqr) then never
// converges on: a call with one infinity ran for minutes (tests/fuzz/fuzz_breadth.cpp
// found it). An SVD of such a matrix fails as one with NaN does, naming the matrix; an
// eigh gives NaN, as it did for NaN.
template <typename T>
bool all_finite(const T* p, size_t n) {
  bool ok = true;
  for (size_t i = 0; i < n; ++i) ok &= std::isfinite(p[i]);
  return ok;
}

// The same for the triangle of a column-major n x n matrix that syevd 'U' reads.
template <typename T>
bool upper_finite(const T* z, int64_t n) {
  bool ok = true;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i <= j; ++i) ok &= std::isfinite(z[i + j * n]);
  return ok;
}

template <typename T>
void solve(const Tensor& x, const Tensor& a, const Tensor& b) {
  const int64_t B = a.size(0);
  const Int n = dim_of(a.size(1), "linalg.solve"), k = dim_of(b.size(2), "linalg.solve");
  std::vector<T> lu(size_t(n) * n), rhs(k > 1 ? size_t(n) * k : 0);
  std::vector<Int> ipiv(n);
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* ab = a.data<T>() + bi * n * n;
    const T* bb = b.data<T>() + bi * n * k;
    T* xb = x.data<T>() + bi * n * k;
    std::copy(ab, ab + size_t(n) * n, lu.data());
    Int info = 0;
    getrf(n, lu.data(), ipiv.data(), &info);
    if (info != 0) linalg_failed(Op::LinalgSolve, info, bi, B);
    if (k == 1) {
      std::copy(bb, bb + n, xb);
      getrs(n, 1, lu.data(), ipiv.data(), xb, &info);
    } else {
      for (Int i = 0; i < n; ++i)
        for (Int j = 0; j < k; ++j) rhs[i + size_t(j) * n] = bb[size_t(i) * k + j];
      getrs(n, k, lu.data(), ipiv.data(), rhs.data(), &info);
      from_colmajor(xb, rhs.data(), n, k, n);
    }
    DL_ASSERT(info == 0);
  }
}

template <typename T>
void solve_triangular(const Tensor& x, const Tensor& a, const Tensor& b, const LinalgOpts& o) {
  const int64_t B = a.size(0);
  const Int n = dim_of(a.size(1), "linalg.solve_triangular"), k = dim_of(b.size(2), "linalg.solve_triangular");
  std::copy(b.data<T>(), b.data<T>() + b.numel(), x.data<T>());
  for (int64_t bi = 0; bi < B; ++bi) trsm(o.upper, o.unitriangular, n, k, a.data<T>() + bi * n * n, x.data<T>() + bi * n * k);
}

template <typename T>
void cholesky(const Tensor& l, const Tensor& a) {
  const int64_t B = a.size(0);
  const Int n = dim_of(a.size(1), "linalg.cholesky");
  std::copy(a.data<T>(), a.data<T>() + a.numel(), l.data<T>());
  for (int64_t bi = 0; bi < B; ++bi) {
    T* lb = l.data<T>() + bi * n * n;
    Int info = 0;
    potrf(n, lb, &info);
    if (info != 0) linalg_failed(Op::Cholesky, info, bi, B);
    for (Int i = 0; i < n; ++i) std::fill(lb + size_t(i) * n + i + 1, lb + size_t(i + 1) * n, T(0));
  }
}

template <typename T>
void qr(const Tensor& q, const Tensor& r, const Tensor& a, const LinalgOpts& o) {
  const int64_t B = a.size(0);
  const Int m = dim_of(a.size(1), "linalg.qr"), n = dim_of(a.size(2), "linalg.qr"), k = std::min(m, n);
  const Int kq = o.full ? m : k;
  // The work holds A column-major, then Q's kq columns (m x max(n, kq)).
  std::vector<T> w(size_t(m) * std::max(n, kq)), tau(k);
  T query = 0;
  Int info = 0;
  geqrf(m, n, w.data(), tau.data(), &query, -1, &info);
  T query2 = 0;
  orgqr(m, kq, k, w.data(), tau.data(), &query2, -1, &info);
  std::vector<T> work(size_t(lwork_of(std::max(double(query), double(query2)))));
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* ab = a.data<T>() + bi * m * n;
    for (Int i = 0; i < m; ++i)
      for (Int j = 0; j < n; ++j) w[i + size_t(j) * m] = ab[size_t(i) * n + j];
    geqrf(m, n, w.data(), tau.data(), work.data(), Int(work.size()), &info);
    DL_ASSERT(info == 0);
    T* rb = r.data<T>() + bi * kq * n;
    for (Int i = 0; i < kq; ++i)
      for (Int j = 0; j < n; ++j) rb[size_t(i) * n + j] = j >= i && i < m ? w[i + size_t(j) * m] : T(0);
    orgqr(m, kq, k, w.data(), tau.data(), work.data(), Int(work.size()), &info);
    DL_ASSERT(info == 0);
    from_colmajor(q.data<T>() + bi * m * kq, w.data(), m, kq, m);
  }
}

template <typename T>
void eigh(const Tensor& w, const Tensor& v, const Tensor& a) {
  const int64_t B = a.size(0);
  const Int n = dim_of(a.size(1), "linalg.eigh");
  std::vector<T> z(size_t(n) * n);
  T query = 0;
  Int iquery = 0, info = 0;
  syevd(n, z.data(), w.data<T>(), &query, -1, &iquery, -1, &info);
  std::vector<T> work(size_t(lwork_of(query)));
  std::vector<Int> iwork(size_t(std::max<Int>(1, iquery)));
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* ab = a.data<T>() + bi * n * n;
    std::copy(ab, ab + size_t(n) * n, z.data());
    if (!upper_finite(z.data(), n)) {   // NaN propagates, as through every op, without LAPACK's iteration
      std::fill_n(w.data<T>() + bi * n, n, std::numeric_limits<T>::quiet_NaN());
      std::fill_n(v.data<T>() + bi * n * n, size_t(n) * n, std::numeric_limits<T>::quiet_NaN());
      continue;
    }
    syevd(n, z.data(), w.data<T>() + bi * n, work.data(), Int(work.size()), iwork.data(), Int(iwork.size()), &info);
    if (info != 0) linalg_failed(Op::Eigh, info, bi, B);
    from_colmajor(v.data<T>() + bi * n * n, z.data(), n, n, n);
  }
}

template <typename T>
void svd(const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& a, const LinalgOpts& o) {
  // The column-major matrix at ab is A^T (n x m); see Note [Row-major matrices in LAPACK].
  const int64_t B = a.size(0);
  const Int m = dim_of(a.size(1), "linalg.svd"), n = dim_of(a.size(2), "linalg.svd"), k = std::min(m, n);
  const Int ku = o.full ? m : k, kv = o.full ? n : k;
  const char* job = o.full ? "A" : "S";
  std::vector<T> w(size_t(m) * n);
  std::vector<Int> iwork(size_t(8) * k);
  T query = 0;
  Int info = 0;
  // A^T = U' S V'^T: U' (n x kv) is Vh row-major, V'^T (ku x m) is U row-major.
  gesdd(job, n, m, w.data(), s.data<T>(), vh.data<T>(), n, u.data<T>(), ku, &query, -1, iwork.data(), &info);
  std::vector<T> work(size_t(lwork_of(query)));
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* ab = a.data<T>() + bi * m * n;
    std::copy(ab, ab + size_t(m) * n, w.data());
    if (!all_finite(w.data(), w.size())) linalg_failed(Op::Svd, -1, bi, B);
    gesdd(job, n, m, w.data(), s.data<T>() + bi * k, vh.data<T>() + bi * kv * n, n, u.data<T>() + bi * m * ku, ku,
          work.data(), Int(work.size()), iwork.data(), &info);
    if (info != 0) linalg_failed(Op::Svd, info, bi, B);
  }
}

template <typename T>
void slogdet(const Tensor& sign, const Tensor& logabs, const Tensor& a) {
  const int64_t B = a.size(0);
  const Int n = dim_of(a.size(1), "linalg.slogdet");
  std::vector<T> lu(size_t(n) * n);
  std::vector<Int> ipiv(n);
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* ab = a.data<T>() + bi * n * n;
    std::copy(ab, ab + size_t(n) * n, lu.data());
    Int info = 0;
    getrf(n, lu.data(), ipiv.data(), &info);
    DL_ASSERT(info >= 0);
    // The log is summed in double, as the reductions sum float32.
    double s = 1, l = 0;
    for (Int i = 0; i < n; ++i) {
      const T d = lu[size_t(i) * n + i];
      if (ipiv[i] != i + 1) s = -s;
      if (d < 0) s = -s;
      l += std::log(std::fabs(double(d)));
    }
    if (info > 0) s = 0, l = -INFINITY;
    sign.data<T>()[bi] = T(s);
    logabs.data<T>()[bi] = T(l);
  }
}

template <typename T>
void run(Op op, const TensorList& outs, const TensorList& ins, const LinalgOpts& o) {
  switch (op) {
    case Op::LinalgSolve: return solve<T>(outs[0], ins[0], ins[1]);
    case Op::SolveTriangular: return solve_triangular<T>(outs[0], ins[0], ins[1], o);
    case Op::Cholesky: return cholesky<T>(outs[0], ins[0]);
    case Op::Qr: return qr<T>(outs[0], outs[1], ins[0], o);
    case Op::Eigh: return eigh<T>(outs[0], outs[1], ins[0]);
    case Op::Svd: return svd<T>(outs[0], outs[1], outs[2], ins[0], o);
    case Op::Slogdet: return slogdet<T>(outs[0], outs[1], ins[0]);
    default: DL_ASSERT(false);
  }
}

}  // namespace

void linalg(Op op, const TensorList& outs, const TensorList& ins, const LinalgOpts& o) {
  switch (ins[0].dtype()) {
    case DType::Float32: return run<float>(op, outs, ins, o);
    case DType::Float64: return run<double>(op, outs, ins, o);
    default: fail(ErrorKind::Type, op_name(op), ": not implemented for dtype ", dtype_name(ins[0].dtype()));
  }
}

}  // namespace dl::cpu

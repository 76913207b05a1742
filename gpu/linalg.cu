// The decompositions and solves on CUDA: cuSOLVER's dense routines and cuBLAS's trsm and
// geam (for transposes), one matrix of the batch at a time on the device's stream. The
// layouts are those of the CPU kernels (Note [Row-major matrices in LAPACK] in
// tensor/cpu/lapack.cpp): a row-major matrix is, in place, the column-major matrix of
// its transpose. Each call's `info` values land in one device array, read back once at
// the end, so that a failure names the first bad matrix as the CPU does.
#include <cusolverDn.h>

#include <mutex>
#include <vector>

#include "gpu/loops.cuh"

namespace dl::gpu {

namespace {

[[noreturn]] void throw_cusolver(cusolverStatus_t s, const char* op, const char* what) {
  fail(ErrorKind::Internal, op, ": cuSOLVER failed while ", what, " (status ", int(s), ")");
}
void check_cusolver(cusolverStatus_t s, const char* op, const char* what) {
  if (s != CUSOLVER_STATUS_SUCCESS) throw_cusolver(s, op, what);
}

// The device's cuSOLVER handle, bound to its stream (created on first use).
cusolverDnHandle_t cusolver(const DeviceContext& c, const char* op) {
  static std::mutex mu;
  static std::vector<cusolverDnHandle_t> handles;
  std::lock_guard<std::mutex> g(mu);
  if (handles.size() <= size_t(c.index)) handles.resize(size_t(c.index) + 1, nullptr);
  cusolverDnHandle_t& h = handles[size_t(c.index)];
  if (!h) {
    cusolverDnHandle_t fresh = nullptr;
    check_cusolver(cusolverDnCreate(&fresh), op, "creating its handle");
    cusolverStatus_t s = cusolverDnSetStream(fresh, c.stream);
    if (s != CUSOLVER_STATUS_SUCCESS) {
      cusolverDnDestroy(fresh);
      throw_cusolver(s, op, "binding it to the device's stream");
    }
    h = fresh;
  }
  return h;
}

// ---- the routines by element type ----------------------------------------------------------
struct S {
  using T = float;
  static constexpr auto getrf_size = cusolverDnSgetrf_bufferSize;
  static constexpr auto getrf = cusolverDnSgetrf;
  static constexpr auto getrs = cusolverDnSgetrs;
  static constexpr auto potrf_size = cusolverDnSpotrf_bufferSize;
  static constexpr auto potrf = cusolverDnSpotrf;
  static constexpr auto geqrf_size = cusolverDnSgeqrf_bufferSize;
  static constexpr auto geqrf = cusolverDnSgeqrf;
  static constexpr auto orgqr_size = cusolverDnSorgqr_bufferSize;
  static constexpr auto orgqr = cusolverDnSorgqr;
  static constexpr auto syevd_size = cusolverDnSsyevd_bufferSize;
  static constexpr auto syevd = cusolverDnSsyevd;
  static constexpr auto gesvd_size = cusolverDnSgesvd_bufferSize;
  static constexpr auto gesvd = cusolverDnSgesvd;
  static constexpr auto trsm = cublasStrsm;
  static constexpr auto geam = cublasSgeam;
};
struct D {
  using T = double;
  static constexpr auto getrf_size = cusolverDnDgetrf_bufferSize;
  static constexpr auto getrf = cusolverDnDgetrf;
  static constexpr auto getrs = cusolverDnDgetrs;
  static constexpr auto potrf_size = cusolverDnDpotrf_bufferSize;
  static constexpr auto potrf = cusolverDnDpotrf;
  static constexpr auto geqrf_size = cusolverDnDgeqrf_bufferSize;
  static constexpr auto geqrf = cusolverDnDgeqrf;
  static constexpr auto orgqr_size = cusolverDnDorgqr_bufferSize;
  static constexpr auto orgqr = cusolverDnDorgqr;
  static constexpr auto syevd_size = cusolverDnDsyevd_bufferSize;
  static constexpr auto syevd = cusolverDnDsyevd;
  static constexpr auto gesvd_size = cusolverDnDgesvd_bufferSize;
  static constexpr auto gesvd = cusolverDnDgesvd;
  static constexpr auto trsm = cublasDtrsm;
  static constexpr auto geam = cublasDgeam;
};

// What every routine of one call shares: the device, its handles, the op's name and the
// info array.
struct Call {
  DeviceContext& c;
  cusolverDnHandle_t sol;
  cublasHandle_t blas;
  const char* op;
  Scratch info;
  int64_t count;
  Call(const Tensor& t, const char* name, int64_t B)
      : c(activate(t, name)), sol(cusolver(c, name)), blas(cublas(c, name)), op(name),
        info(sizeof(int) * size_t(B), t.device().index, name), count(B) {}
  int* info_at(int64_t b) const { return info.as<int>() + b; }
  // The info values, checked: the first positive one fails as the CPU's would.
  void check(Op o) const {
    std::vector<int> host(static_cast<size_t>(count), 0);
    d2h(host.data(), info.as<int>(), sizeof(int) * host.size(), c.index, op);
    for (int64_t b = 0; b < count; ++b) {
      if (host[size_t(b)] != 0) linalg_failed(o, host[size_t(b)], b, count);
    }
  }
  void d2d(void* dst, const void* src, size_t n) const {
    check_cuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c.stream), op, "copying a matrix");
  }
};

// dst (cols x rows, column-major, ld cols) = the transpose of src (rows x cols,
// column-major, ld rows): a row-major (rows, cols) matrix into its column-major form.
template <typename R>
void transpose(const Call& k, typename R::T* dst, const typename R::T* src, int rows, int cols) {
  const typename R::T one = 1, zero = 0;
  check_cublas(R::geam(k.blas, CUBLAS_OP_T, CUBLAS_OP_N, cols, rows, &one, src, rows, &zero, dst, cols, dst, cols),
               k.op, "transposing a matrix");
}

template <typename T>
__global__ void zero_strict_upper_rows(T* a, int64_t n, int64_t B) {
  // Row-major (n, n) matrices: zeros right of the diagonal.
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < B * n * n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = (i / n) % n, col = i % n;
    if (col > r) a[i] = T(0);
  }
}

// R (kq, n) row-major from the column-major geqrf result w (m, n), ld m: upper part only.
template <typename T>
__global__ void extract_r(T* r, const T* w, int64_t kq, int64_t n, int64_t m) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < kq * n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / n, col = i % n;
    r[i] = col >= row && row < m ? w[row + col * m] : T(0);
  }
}

// sign and log|det| of each LU factor (column-major n x n, ld n) and its pivots.
template <typename T>
__global__ void lu_slogdet(T* sign, T* logabs, const T* lu, const int* ipiv, const int* info, int64_t n, int64_t B) {
  const int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (b >= B) return;
  const T* m = lu + b * n * n;
  double s = 1, l = 0;   // summed in double, as on the CPU
  for (int64_t i = 0; i < n; ++i) {
    const T d = m[i + i * n];
    if (ipiv[b * n + i] != i + 1) s = -s;
    if (d < 0) s = -s;
    l += log(fabs(double(d)));
  }
  if (info[b] > 0) s = 0, l = -INFINITY;
  sign[b] = T(s);
  logabs[b] = T(l);
}

template <typename R>
void solve(const Tensor& x, const Tensor& a, const Tensor& b) {
  using T = typename R::T;
  const int64_t B = a.size(0);
  const int n = int(a.size(1)), k = int(b.size(2));
  Call c(a, "linalg.solve", B);
  int lwork = 0;
  check_cusolver(R::getrf_size(c.sol, n, n, a.data<T>(), n, &lwork), c.op, "sizing getrf");
  Scratch lu(sizeof(T) * (size_t(n) * n * B), c.c.index, c.op), work(sizeof(T) * size_t(lwork > 0 ? lwork : 1), c.c.index, c.op);
  Scratch ipiv(sizeof(int) * size_t(n), c.c.index, c.op), rhs(sizeof(T) * size_t(k > 1 ? n * k : 1), c.c.index, c.op);
  Scratch dummy(sizeof(int), c.c.index, c.op);   // getrs's info: a singular U is getrf's to report
  c.d2d(lu.as<T>(), a.data<T>(), sizeof(T) * size_t(a.numel()));
  for (int64_t bi = 0; bi < B; ++bi) {
    T* m = lu.as<T>() + bi * n * n;
    check_cusolver(R::getrf(c.sol, n, n, m, n, work.as<T>(), ipiv.as<int>(), c.info_at(bi)), c.op, "running getrf");
    T* xb = x.data<T>() + bi * n * k;
    const T* bb = b.data<T>() + bi * n * k;
    if (k == 1) {
      c.d2d(xb, bb, sizeof(T) * size_t(n));
      check_cusolver(R::getrs(c.sol, CUBLAS_OP_T, n, 1, m, n, ipiv.as<int>(), xb, n, dummy.as<int>()), c.op, "running getrs");
    } else {
      transpose<R>(c, rhs.as<T>(), bb, k, n);   // row-major (n, k) -> column-major
      check_cusolver(R::getrs(c.sol, CUBLAS_OP_T, n, k, m, n, ipiv.as<int>(), rhs.as<T>(), n, dummy.as<int>()), c.op,
                     "running getrs");
      transpose<R>(c, xb, rhs.as<T>(), n, k);
    }
  }
  c.check(Op::LinalgSolve);
}

template <typename R>
void solve_triangular(const Tensor& x, const Tensor& a, const Tensor& b, const LinalgOpts& o) {
  using T = typename R::T;
  const int64_t B = a.size(0);
  const int n = int(a.size(1)), k = int(b.size(2));
  Call c(a, "linalg.solve_triangular", B);
  c.d2d(x.data<T>(), b.data<T>(), sizeof(T) * size_t(b.numel()));
  const T one = 1;
  // X^T A^T = B^T, column-major: X^T is x's memory (k x n, ld k), A^T is a's (n x n).
  for (int64_t bi = 0; bi < B; ++bi)
    check_cublas(R::trsm(c.blas, CUBLAS_SIDE_RIGHT, o.upper ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER,
                         CUBLAS_OP_N, o.unitriangular ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT, k, n, &one,
                         a.data<T>() + bi * n * n, n, x.data<T>() + bi * n * k, k),
                 c.op, "running trsm");
}

template <typename R>
void cholesky(const Tensor& l, const Tensor& a) {
  using T = typename R::T;
  const int64_t B = a.size(0);
  const int n = int(a.size(1));
  Call c(a, "linalg.cholesky", B);
  c.d2d(l.data<T>(), a.data<T>(), sizeof(T) * size_t(a.numel()));
  int lwork = 0;
  check_cusolver(R::potrf_size(c.sol, CUBLAS_FILL_MODE_UPPER, n, l.data<T>(), n, &lwork), c.op, "sizing potrf");
  Scratch work(sizeof(T) * size_t(lwork > 0 ? lwork : 1), c.c.index, c.op);
  for (int64_t bi = 0; bi < B; ++bi)
    check_cusolver(R::potrf(c.sol, CUBLAS_FILL_MODE_UPPER, n, l.data<T>() + bi * n * n, n, work.as<T>(), lwork,
                            c.info_at(bi)),
                   c.op, "running potrf");
  zero_strict_upper_rows<<<grid_for(l.numel(), c.c), 256, 0, c.c.stream>>>(l.data<T>(), n, B);
  check_launch(c.op);
  c.check(Op::Cholesky);
}

template <typename R>
void qr(const Tensor& q, const Tensor& r, const Tensor& a, const LinalgOpts& o) {
  using T = typename R::T;
  const int64_t B = a.size(0);
  const int m = int(a.size(1)), n = int(a.size(2)), k = m < n ? m : n, kq = o.full ? m : k;
  const int wcols = n > kq ? n : kq;
  Call c(a, "linalg.qr", B);
  Scratch w(sizeof(T) * size_t(m) * wcols, c.c.index, c.op), tau(sizeof(T) * size_t(k), c.c.index, c.op);
  int l1 = 0, l2 = 0;
  check_cusolver(R::geqrf_size(c.sol, m, n, w.as<T>(), m, &l1), c.op, "sizing geqrf");
  check_cusolver(R::orgqr_size(c.sol, m, kq, k, w.as<T>(), m, tau.as<T>(), &l2), c.op, "sizing orgqr");
  const int lwork = l1 > l2 ? l1 : l2;
  Scratch work(sizeof(T) * size_t(lwork > 0 ? lwork : 1), c.c.index, c.op);
  for (int64_t bi = 0; bi < B; ++bi) {
    transpose<R>(c, w.as<T>(), a.data<T>() + bi * m * n, n, m);   // row-major (m, n) -> column-major
    check_cusolver(R::geqrf(c.sol, m, n, w.as<T>(), m, tau.as<T>(), work.as<T>(), lwork, c.info_at(bi)), c.op,
                   "running geqrf");
    extract_r<<<grid_for(int64_t(kq) * n, c.c), 256, 0, c.c.stream>>>(r.data<T>() + bi * kq * n, w.as<T>(), kq, n, m);
    check_launch(c.op);
    check_cusolver(R::orgqr(c.sol, m, kq, k, w.as<T>(), m, tau.as<T>(), work.as<T>(), lwork, c.info_at(bi)), c.op,
                   "running orgqr");
    transpose<R>(c, q.data<T>() + bi * m * kq, w.as<T>(), m, kq);
  }
  c.check(Op::Qr);
}

template <typename R>
void eigh(const Tensor& w, const Tensor& v, const Tensor& a) {
  using T = typename R::T;
  const int64_t B = a.size(0);
  const int n = int(a.size(1));
  Call c(a, "linalg.eigh", B);
  Scratch z(sizeof(T) * size_t(n) * n, c.c.index, c.op);
  int lwork = 0;
  check_cusolver(R::syevd_size(c.sol, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n, z.as<T>(), n, w.data<T>(),
                               &lwork),
                 c.op, "sizing syevd");
  Scratch work(sizeof(T) * size_t(lwork > 0 ? lwork : 1), c.c.index, c.op);
  for (int64_t bi = 0; bi < B; ++bi) {
    c.d2d(z.as<T>(), a.data<T>() + bi * n * n, sizeof(T) * size_t(n) * n);
    check_cusolver(R::syevd(c.sol, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n, z.as<T>(), n,
                            w.data<T>() + bi * n, work.as<T>(), lwork, c.info_at(bi)),
                   c.op, "running syevd");
    transpose<R>(c, v.data<T>() + bi * n * n, z.as<T>(), n, n);
  }
  c.check(Op::Eigh);
}

// gesvd takes matrices with at least as many rows as columns. The column-major view of
// a row-major (m, n) A is A^T (n, m): when n >= m its SVD A^T = U' S V'^T gives Vh = U'^T
// and U = V'^T with no copy (as on the CPU); otherwise A itself is made column-major and
// its U and Vh are transposed back.
template <typename R>
void svd(const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& a, const LinalgOpts& o) {
  using T = typename R::T;
  const int64_t B = a.size(0);
  const int m = int(a.size(1)), n = int(a.size(2)), k = m < n ? m : n;
  const int ku = o.full ? m : k, kv = o.full ? n : k;
  const signed char job = o.full ? 'A' : 'S';
  const bool direct = n >= m;
  const int rows = direct ? n : m, cols = direct ? m : n;
  Call c(a, "linalg.svd", B);
  Scratch w(sizeof(T) * size_t(m) * n, c.c.index, c.op);
  Scratch tu(sizeof(T) * (direct ? 1 : size_t(m) * ku), c.c.index, c.op), tv(sizeof(T) * (direct ? 1 : size_t(kv) * n), c.c.index, c.op);
  int lwork = 0;
  check_cusolver(R::gesvd_size(c.sol, rows, cols, &lwork), c.op, "sizing gesvd");
  Scratch work(sizeof(T) * size_t(lwork > 0 ? lwork : 1), c.c.index, c.op);
  for (int64_t bi = 0; bi < B; ++bi) {
    const T* ab = a.data<T>() + bi * m * n;
    T* ub = u.data<T>() + bi * m * ku;
    T* vb = vh.data<T>() + bi * kv * n;
    T* sb = s.data<T>() + bi * k;
    if (direct) {
      c.d2d(w.as<T>(), ab, sizeof(T) * size_t(m) * n);
      // A^T (n x m) = U' S V'^T: U' (n x kv, ld n) is Vh row-major, V'^T (ku x m, ld ku) is U.
      check_cusolver(R::gesvd(c.sol, job, job, n, m, w.as<T>(), n, sb, vb, n, ub, ku, work.as<T>(), lwork, nullptr,
                              c.info_at(bi)),
                     c.op, "running gesvd");
    } else {
      transpose<R>(c, w.as<T>(), ab, n, m);   // A column-major (m x n)
      check_cusolver(R::gesvd(c.sol, job, job, m, n, w.as<T>(), m, sb, tu.as<T>(), m, tv.as<T>(), kv, work.as<T>(),
                              lwork, nullptr, c.info_at(bi)),
                     c.op, "running gesvd");
      transpose<R>(c, ub, tu.as<T>(), m, ku);
      transpose<R>(c, vb, tv.as<T>(), kv, n);
    }
  }
  c.check(Op::Svd);
}

template <typename R>
void slogdet(const Tensor& sign, const Tensor& logabs, const Tensor& a) {
  using T = typename R::T;
  const int64_t B = a.size(0);
  const int n = int(a.size(1));
  Call c(a, "linalg.slogdet", B);
  int lwork = 0;
  check_cusolver(R::getrf_size(c.sol, n, n, a.data<T>(), n, &lwork), c.op, "sizing getrf");
  Scratch lu(sizeof(T) * size_t(a.numel()), c.c.index, c.op), work(sizeof(T) * size_t(lwork > 0 ? lwork : 1), c.c.index, c.op);
  Scratch ipiv(sizeof(int) * size_t(n) * B, c.c.index, c.op);
  c.d2d(lu.as<T>(), a.data<T>(), sizeof(T) * size_t(a.numel()));
  for (int64_t bi = 0; bi < B; ++bi)
    check_cusolver(R::getrf(c.sol, n, n, lu.as<T>() + bi * n * n, n, work.as<T>(), ipiv.as<int>() + bi * n,
                            c.info_at(bi)),
                   c.op, "running getrf");
  lu_slogdet<<<unsigned((B + 127) / 128), 128, 0, c.c.stream>>>(sign.data<T>(), logabs.data<T>(), lu.as<T>(),
                                                                ipiv.as<int>(), c.info_at(0), n, B);
  check_launch(c.op);
}

template <typename R>
void run(Op op, const TensorList& outs, const TensorList& ins, const LinalgOpts& o) {
  switch (op) {
    case Op::LinalgSolve: return solve<R>(outs[0], ins[0], ins[1]);
    case Op::SolveTriangular: return solve_triangular<R>(outs[0], ins[0], ins[1], o);
    case Op::Cholesky: return cholesky<R>(outs[0], ins[0]);
    case Op::Qr: return qr<R>(outs[0], outs[1], ins[0], o);
    case Op::Eigh: return eigh<R>(outs[0], outs[1], ins[0]);
    case Op::Svd: return svd<R>(outs[0], outs[1], outs[2], ins[0], o);
    case Op::Slogdet: return slogdet<R>(outs[0], outs[1], ins[0]);
    default: DL_ASSERT(false);
  }
}

}  // namespace

void linalg(Op op, const TensorList& outs, const TensorList& ins, const LinalgOpts& o) {
  for (const Tensor& t : ins)
    DL_CHECK(t.size(t.dim() - 1) <= INT32_MAX / 2 && t.size(t.dim() - 2) <= INT32_MAX / 2, op_name(op),
             ": a matrix dimension of ", t.size(t.dim() - 1), " is larger than cuSOLVER takes");
  switch (ins[0].dtype()) {
    case DType::Float32: return run<S>(op, outs, ins, o);
    case DType::Float64: return run<D>(op, outs, ins, o);
    default: fail(ErrorKind::Type, op_name(op), ": not implemented for dtype ", dtype_name(ins[0].dtype()), " on cuda");
  }
}

}  // namespace dl::gpu

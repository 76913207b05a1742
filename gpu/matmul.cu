// CUDA matmul: cuBLAS for float32/float64 and, with float32 accumulation, float16 and
// bfloat16 (one strided-batched GEMM for every batch),
// a plain kernel with int64 accumulation for the integer dtypes (as the CPU does).
//
// Contract (tensor/kernels.def): out is a fresh contiguous (batch..., M, N); a is
// (..., M, K) and b (..., K, N), in out's dtype, with batch dims that broadcast to out's.
// cuBLAS is column-major: the row-major product C = A B is computed as C^T = B^T A^T,
// and a row-major matrix with leading dimension ld is the column-major transpose with
// the same ld, so nothing is transposed in memory. Matrices stored transposed (column-
// major) are read with CUBLAS_OP_T; batches must be one stride apart (0 when
// broadcast), else the operand is first copied into that layout. float32 GEMMs run in
// full float32 precision (cuBLAS's default math mode, no TF32).
#include <climits>

#include "gpu/loops.cuh"
#include "tensor/geometry.h"
#include "tensor/half.h"

namespace dl::gpu {

namespace {

using geometry::MatLayout;   // how BLAS can read a matrix (tensor/geometry.h)
MatLayout layout_of(int64_t rows, int64_t cols, int64_t sr, int64_t sc) { return geometry::mat_layout(rows, cols, sr, sc); }

// The single stride between consecutive batches (in out's batch order) of operand t,
// whose batch dims are aligned right against out's `bs`; false when there is none.
bool batch_stride(const Tensor& t, const Shape& bs, int64_t* stride) {
  const int n = bs.size(), tn = t.dim() - 2;
  int64_t s = -1, expect = 0;
  for (int d = n - 1; d >= 0; --d) {
    if (bs[d] == 1) continue;
    const int td = d - (n - tn);
    const int64_t sd = (td < 0 || t.size(td) == 1) ? 0 : t.stride(td);
    if (s < 0) {
      s = sd;
    } else if (sd != expect) {
      return false;
    }
    expect = sd * bs[d];
  }
  *stride = s < 0 ? 0 : s;
  return true;
}

// t broadcast to the full batch `bs` and copied into contiguous matrices.
Tensor compact(const Tensor& t, const Shape& bs) {
  Shape full = bs;
  full.push_back(t.size(t.dim() - 2));
  full.push_back(t.size(t.dim() - 1));
  Shape st;
  st.resize(full.size());
  const int off = full.size() - t.dim();
  for (int d = 0; d < full.size(); ++d) {
    const int td = d - off;
    st[d] = (td < 0 || t.size(td) == 1) ? 0 : t.stride(td);
  }
  Tensor c = empty(full, t.dtype(), t.device(), "matmul");
  convert(c, make_view(t, full, st, t.offset()), "matmul");
  return c;
}

void check_blas_size(int64_t v, const Tensor& a, const Tensor& b) {
  DL_CHECK(v <= INT_MAX, "matmul: shapes ", a.shape(), " and ", b.shape(),
           " are too large for cuBLAS (a size or stride exceeds ", INT_MAX, ")");
}

cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const float* a, int lda, long long sa, const float* b, int ldb,
                            long long sb, float* c, int ldc, long long sc, int count) {
  const float one = 1, zero = 0;
  if (count == 1) return cublasSgemm(h, ta, tb, m, n, k, &one, a, lda, b, ldb, &zero, c, ldc);
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero, c, ldc, sc, count);
}
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const double* a, int lda, long long sa, const double* b, int ldb,
                            long long sb, double* c, int ldc, long long sc, int count) {
  const double one = 1, zero = 0;
  if (count == 1) return cublasDgemm(h, ta, tb, m, n, k, &one, a, lda, b, ldb, &zero, c, ldc);
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &zero, c, ldc, sc, count);
}

// float16 and bfloat16: cuBLAS's mixed-precision GEMM, half inputs and output with
// float32 accumulation (Note [Autocast] in tensor/half_ops.h).
cublasStatus_t gemm_half(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                         const void* a, int lda, long long sa, const void* b, int ldb, long long sb, void* c,
                         int ldc, long long sc, int count, cudaDataType_t type) {
  const float one = 1, zero = 0;
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, a, type, lda, sa, b, type, ldb, sb, &zero, c, type,
                                    ldc, sc, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const Half* a, int lda, long long sa, const Half* b, int ldb,
                            long long sb, Half* c, int ldc, long long sc, int count) {
  return gemm_half(h, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, count, CUDA_R_16F);
}
cublasStatus_t gemm_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const BFloat16* a, int lda, long long sa, const BFloat16* b, int ldb,
                            long long sb, BFloat16* c, int ldc, long long sc, int count) {
  return gemm_half(h, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, count, CUDA_R_16BF);
}

template <typename T>
void float_matmul(const Tensor& out, Tensor a, Tensor b) {
  const char* op = "matmul";
  const DeviceContext& c = activate(out, op);
  const int nd = out.dim();
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(a.dim() - 1);
  for (int64_t v : {M, N, K}) check_blas_size(v, a, b);
  Shape bs;
  for (int d = 0; d < nd - 2; ++d) bs.push_back(out.size(d));
  int64_t count = 1;
  for (int64_t v : bs) count *= v;

  auto matrix_layout = [](const Tensor& t) {
    const int td = t.dim();
    return layout_of(t.size(td - 2), t.size(td - 1), t.stride(td - 2), t.stride(td - 1));
  };
  auto prepare = [&](Tensor& t, MatLayout& l, int64_t& s) {
    l = matrix_layout(t);
    if (!l.ok || !batch_stride(t, bs, &s)) {
      t = compact(t, bs);  // contiguous: row-major matrices, one after another
      l = matrix_layout(t);
      s = t.size(t.dim() - 2) * t.size(t.dim() - 1);
    }
  };
  MatLayout la, lb;
  int64_t sa = 0, sb = 0;
  prepare(a, la, sa);
  prepare(b, lb, sb);
  for (int64_t v : {la.ld, lb.ld}) check_blas_size(v, a, b);
  cublasHandle_t h = cublas(c, op);
  const cublasOperation_t ta = la.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = out.data<T>();
  // C^T (N x M, ld N) = B^T (N x K) A^T (K x M), in chunks of at most INT_MAX batches.
  for (int64_t done = 0; done < count;) {
    const int64_t n = count - done < INT_MAX ? count - done : INT_MAX;
    check_cublas(gemm_batched(h, tb, ta, int(N), int(M), int(K), pb + done * sb, int(lb.ld), sb,
                              pa + done * sa, int(la.ld), sa, pc + done * M * N, int(N), M * N, int(n)),
                 op, "a matrix product");
    done += n;
  }
}

// Integer matmul: a thread per output element, products summed in uint64 (wrapping
// like int64 arithmetic, without signed overflow), then narrowed to T.
struct IntMatmulGeom {
  int nb = 0;
  int64_t bs[kMaxDims] = {}, sa[kMaxDims] = {}, sb[kMaxDims] = {};
  int64_t M = 0, N = 0, K = 0, ar = 0, ac = 0, br = 0, bc = 0, total = 0;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) int_matmul_kernel(IntMatmulGeom g, const T* a, const T* b, T* c) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < g.total; t += step) {
    const int64_t j = t % g.N, i = (t / g.N) % g.M;
    int64_t batch = t / (g.M * g.N), oa = 0, ob = 0;
    for (int d = g.nb - 1; d >= 0; --d) {
      const int64_t q = batch % g.bs[d];
      batch /= g.bs[d];
      oa += q * g.sa[d];
      ob += q * g.sb[d];
    }
    const T* arow = a + oa + i * g.ar;
    const T* bcol = b + ob + j * g.bc;
    uint64_t acc = 0;
    for (int64_t p = 0; p < g.K; ++p)
      acc += uint64_t(int64_t(arow[p * g.ac])) * uint64_t(int64_t(bcol[p * g.br]));
    c[t] = static_cast<T>(acc);
  }
}

template <typename T>
void int_matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "matmul";
  const DeviceContext& c = activate(out, op);
  const int nd = out.dim(), ad = a.dim(), bd = b.dim();
  IntMatmulGeom g;
  g.nb = nd - 2;
  for (int d = 0; d < g.nb; ++d) {
    g.bs[d] = out.size(d);
    const int ia = d - (g.nb - (ad - 2)), ib = d - (g.nb - (bd - 2));
    g.sa[d] = (ia < 0 || a.size(ia) == 1) ? 0 : a.stride(ia);
    g.sb[d] = (ib < 0 || b.size(ib) == 1) ? 0 : b.stride(ib);
  }
  g.M = out.size(nd - 2);
  g.N = out.size(nd - 1);
  g.K = a.size(ad - 1);
  g.ar = a.stride(ad - 2);
  g.ac = a.stride(ad - 1);
  g.br = b.stride(bd - 2);
  g.bc = b.stride(bd - 1);
  g.total = out.numel();
  int_matmul_kernel<T><<<grid_for(g.total, c), kThreads, 0, c.stream>>>(g, a.data<T>(), b.data<T>(), out.data<T>());
  check_launch(op);
}

}  // namespace

void matmul(const Tensor& out, const Tensor& a, const Tensor& b) {
  geometry::dispatch_product<true>(out.dtype(), [&]<typename T>() { float_matmul<T>(out, a, b); },
                                   [&]<typename T>() { int_matmul<T>(out, a, b); });
}

}  // namespace dl::gpu

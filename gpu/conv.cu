// CUDA convolution: im2col + cuBLAS, one strided-batched GEMM over the groups per chunk
// of samples (contracts in tensor/kernels.def, "neural networks"; the CPU version is
// tensor/cpu/conv.cpp).
//
// For a chunk of nb samples the column matrix is (C kH kW, nb P), P = Ho Wo: row
// (c, ki, kj) holds, for every sample and output position, the input pixel that kernel
// tap sees (zero in the padding), so group g's rows are one block of Kg = Cg kH kW rows
// and every product of a chunk is one GEMM per group:
//   forward       Y[g]   (Og, nb P) = W[g] (Og, Kg) . col[g] (Kg, nb P)
//   input grad    col[g] (Kg, nb P) = W[g]^T . G[g] (Og, nb P), then col2im
//   weight grad   gW[g]  (Og, Kg)  += G[g] . col[g]^T
// with Y and G laid out (O, nb, P); small kernels move them from and to (N, O, P) (the
// forward adds the bias there). col2im gathers: each input pixel sums the column
// entries that read it, so nothing is added atomically. Chunks keep the scratch
// buffers near kScratchBudget.
#include <climits>

#include "gpu/loops.cuh"

namespace dl::gpu {

namespace {

constexpr int64_t kScratchBudget = int64_t(256) << 20;

struct ConvGeom {
  int64_t N, C, H, W;
  int64_t O, kh, kw;
  int64_t Ho, Wo, P;
  int64_t sh, sw, ph, pw, dh, dw, G;
  int64_t Cg, Og, Kg, rows;
};

ConvGeom conv_geom(const Shape& xs, const Shape& ws, const Shape& ys, const Conv2dOpts& o) {
  ConvGeom g;
  g.N = xs[0];
  g.C = xs[1];
  g.H = xs[2];
  g.W = xs[3];
  g.O = ws[0];
  g.kh = ws[2];
  g.kw = ws[3];
  g.Ho = ys[2];
  g.Wo = ys[3];
  g.P = g.Ho * g.Wo;
  g.sh = o.stride[0];
  g.sw = o.stride[1];
  g.ph = o.padding[0];
  g.pw = o.padding[1];
  g.dh = o.dilation[0];
  g.dw = o.dilation[1];
  g.G = o.groups;
  g.Cg = g.C / g.G;
  g.Og = g.O / g.G;
  g.Kg = g.Cg * g.kh * g.kw;
  g.rows = g.C * g.kh * g.kw;
  return g;
}

// Samples per chunk: the column matrix and the (O, nb, P) buffer within the budget,
// and nb P within cuBLAS's int.
int64_t chunk_of(const ConvGeom& g, size_t itemsize) {
  const int64_t per_sample = (g.rows + g.O) * g.P * int64_t(itemsize);
  int64_t nb = kScratchBudget / (per_sample > 0 ? per_sample : 1);
  if (nb > INT_MAX / g.P) nb = INT_MAX / g.P;
  if (nb > g.N) nb = g.N;
  return nb < 1 ? 1 : nb;
}

void check_sizes(const ConvGeom& g, int64_t cols, const char* op) {
  for (int64_t v : {cols, g.Kg, g.Og, g.G})
    DL_CHECK(v <= INT_MAX, op, ": the convolution is too large for cuBLAS (a size exceeds ", INT_MAX, ")");
}

template <typename T>
__global__ void __launch_bounds__(kThreads) im2col_kernel(ConvGeom g, const T* x, int64_t n0, int64_t nb, T* col) {
  const int64_t cols = nb * g.P, total = g.rows * cols, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t r = t / cols, rem = t - r * cols;
    const int64_t n = rem / g.P, p = rem - n * g.P;
    const int64_t c = r / (g.kh * g.kw), ky = (r / g.kw) % g.kh, kx = r % g.kw;
    const int64_t iy = (p / g.Wo) * g.sh - g.ph + ky * g.dh, ix = (p % g.Wo) * g.sw - g.pw + kx * g.dw;
    col[t] = (iy >= 0 && iy < g.H && ix >= 0 && ix < g.W) ? x[(((n0 + n) * g.C + c) * g.H + iy) * g.W + ix] : T(0);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) col2im_kernel(ConvGeom g, const T* col, int64_t n0, int64_t nb, T* gx) {
  const int64_t cols = nb * g.P, total = nb * g.C * g.H * g.W, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t ix = t % g.W, iy = (t / g.W) % g.H, c = (t / (g.W * g.H)) % g.C, n = t / (g.W * g.H * g.C);
    T acc = T(0);
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      const int64_t ty = iy + g.ph - ky * g.dh;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.Ho) continue;
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const int64_t tx = ix + g.pw - kx * g.dw;
        if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.Wo) continue;
        acc += col[((c * g.kh + ky) * g.kw + kx) * cols + n * g.P + (ty / g.sh) * g.Wo + tx / g.sw];
      }
    }
    gx[(n0 * g.C) * g.H * g.W + t] = acc;
  }
}

// out (N, O, P) samples n0.. from y (O, nb, P), plus bias[o] when given.
template <typename T>
__global__ void __launch_bounds__(kThreads)
ocp_to_ncp(const T* y, const T* bias, T* out, int64_t O, int64_t nb, int64_t P, int64_t n0) {
  const int64_t total = nb * O * P, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t p = t % P, o = (t / P) % O, n = t / (P * O);
    const T v = y[(o * nb + n) * P + p];
    out[n0 * O * P + t] = bias ? v + bias[o] : v;
  }
}

// gt (O, nb, P) from g (N, O, P) samples n0..
template <typename T>
__global__ void __launch_bounds__(kThreads) ncp_to_ocp(const T* g, T* gt, int64_t O, int64_t nb, int64_t P, int64_t n0) {
  const int64_t total = nb * O * P, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t p = t % P, n = (t / P) % nb, o = t / (P * nb);
    gt[t] = g[((n0 + n) * O + o) * P + p];
  }
}

cublasStatus_t gemm_groups(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                           int64_t k, const float* a, int64_t lda, int64_t sa, const float* b, int64_t ldb,
                           int64_t sb, float beta, float* c, int64_t ldc, int64_t sc, int64_t count) {
  const float one = 1;
  return cublasSgemmStridedBatched(h, ta, tb, int(m), int(n), int(k), &one, a, int(lda), sa, b, int(ldb), sb,
                                   &beta, c, int(ldc), sc, int(count));
}
cublasStatus_t gemm_groups(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                           int64_t k, const double* a, int64_t lda, int64_t sa, const double* b, int64_t ldb,
                           int64_t sb, double beta, double* c, int64_t ldc, int64_t sc, int64_t count) {
  const double one = 1;
  return cublasDgemmStridedBatched(h, ta, tb, int(m), int(n), int(k), &one, a, int(lda), sa, b, int(ldb), sb,
                                   &beta, c, int(ldc), sc, int(count));
}

template <typename T>
void forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o) {
  const char* op = "conv2d";
  const DeviceContext& c = activate(out, op);
  const ConvGeom g = conv_geom(x.shape(), w.shape(), out.shape(), o);
  const int64_t nb_max = chunk_of(g, sizeof(T));
  check_sizes(g, nb_max * g.P, op);
  Scratch col(size_t(g.rows * nb_max * g.P) * sizeof(T), c.index, op);
  Scratch y(size_t(g.O * nb_max * g.P) * sizeof(T), c.index, op);
  cublasHandle_t h = cublas(c, op);
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = g.N - n0 < nb_max ? g.N - n0 : nb_max, cols = nb * g.P;
    im2col_kernel<T><<<grid_for(g.rows * cols, c), kThreads, 0, c.stream>>>(g, x.data<T>(), n0, nb, col.as<T>());
    check_launch(op);
    check_cublas(gemm_groups(h, CUBLAS_OP_N, CUBLAS_OP_N, cols, g.Og, g.Kg, col.as<T>(), cols, g.Kg * cols,
                             w.data<T>(), g.Kg, g.Og * g.Kg, T(0), y.as<T>(), cols, g.Og * cols, g.G),
                 op, "the convolution's product");
    ocp_to_ncp<T><<<grid_for(g.O * cols, c), kThreads, 0, c.stream>>>(
        y.as<T>(), bias.defined() ? bias.data<T>() : nullptr, out.data<T>(), g.O, nb, g.P, n0);
    check_launch(op);
  }
}

template <typename T>
void input_grad(const Tensor& gx, const Tensor& gy, const Tensor& w, const Conv2dOpts& o) {
  const char* op = "conv2d_input_grad";
  const DeviceContext& c = activate(gx, op);
  const ConvGeom g = conv_geom(gx.shape(), w.shape(), gy.shape(), o);
  const int64_t nb_max = chunk_of(g, sizeof(T));
  check_sizes(g, nb_max * g.P, op);
  Scratch col(size_t(g.rows * nb_max * g.P) * sizeof(T), c.index, op);
  Scratch gt(size_t(g.O * nb_max * g.P) * sizeof(T), c.index, op);
  cublasHandle_t h = cublas(c, op);
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = g.N - n0 < nb_max ? g.N - n0 : nb_max, cols = nb * g.P;
    ncp_to_ocp<T><<<grid_for(g.O * cols, c), kThreads, 0, c.stream>>>(gy.data<T>(), gt.as<T>(), g.O, nb, g.P, n0);
    check_launch(op);
    check_cublas(gemm_groups(h, CUBLAS_OP_N, CUBLAS_OP_T, cols, g.Kg, g.Og, gt.as<T>(), cols, g.Og * cols,
                             w.data<T>(), g.Kg, g.Og * g.Kg, T(0), col.as<T>(), cols, g.Kg * cols, g.G),
                 op, "the convolution's product");
    col2im_kernel<T><<<grid_for(nb * g.C * g.H * g.W, c), kThreads, 0, c.stream>>>(g, col.as<T>(), n0, nb,
                                                                                    gx.data<T>());
    check_launch(op);
  }
}

template <typename T>
void weight_grad(const Tensor& gw, const Tensor& x, const Tensor& gy, const Conv2dOpts& o) {
  const char* op = "conv2d_weight_grad";
  const DeviceContext& c = activate(gw, op);
  const ConvGeom g = conv_geom(x.shape(), gw.shape(), gy.shape(), o);
  const int64_t nb_max = chunk_of(g, sizeof(T));
  check_sizes(g, nb_max * g.P, op);
  Scratch col(size_t(g.rows * nb_max * g.P) * sizeof(T), c.index, op);
  Scratch gt(size_t(g.O * nb_max * g.P) * sizeof(T), c.index, op);
  cublasHandle_t h = cublas(c, op);
  for (int64_t n0 = 0; n0 < g.N; n0 += nb_max) {
    const int64_t nb = g.N - n0 < nb_max ? g.N - n0 : nb_max, cols = nb * g.P;
    im2col_kernel<T><<<grid_for(g.rows * cols, c), kThreads, 0, c.stream>>>(g, x.data<T>(), n0, nb, col.as<T>());
    check_launch(op);
    ncp_to_ocp<T><<<grid_for(g.O * cols, c), kThreads, 0, c.stream>>>(gy.data<T>(), gt.as<T>(), g.O, nb, g.P, n0);
    check_launch(op);
    check_cublas(gemm_groups(h, CUBLAS_OP_T, CUBLAS_OP_N, g.Kg, g.Og, cols, col.as<T>(), cols, g.Kg * cols,
                             gt.as<T>(), cols, g.Og * cols, T(n0 == 0 ? 0 : 1), gw.data<T>(), g.Kg, g.Og * g.Kg,
                             g.G),
                 op, "the convolution's product");
  }
}

}  // namespace

void conv2d(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOpts& o) {
  DL_DISPATCH_FLOAT(x.dtype(), "conv2d", forward<scalar_t>(out, x, w, bias, o));
}

void conv2d_input_grad(const Tensor& gx, const Tensor& g, const Tensor& w, const Conv2dOpts& o) {
  DL_DISPATCH_FLOAT(gx.dtype(), "conv2d_input_grad", input_grad<scalar_t>(gx, g, w, o));
}

void conv2d_weight_grad(const Tensor& gw, const Tensor& x, const Tensor& g, const Conv2dOpts& o) {
  DL_DISPATCH_FLOAT(gw.dtype(), "conv2d_weight_grad", weight_grad<scalar_t>(gw, x, g, o));
}

}  // namespace dl::gpu

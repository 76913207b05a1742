// Per-device kernel tables. The front ends in tensor/*.cpp check arguments, work out
// shapes and dtypes, allocate outputs, and then call the kernels of the device the
// tensors live on: tensor/cpu fills the CPU table, the CUDA plugin (gpu/) registers
// its own when loaded. A kernel receives outputs already allocated with the right
// shape and dtype, and inputs already converted to the dtype it computes in.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "tensor/nn.h"
#include "tensor/ops.h"
#include "tensor/error.h"
#include "tensor/optim_functors.h"
#include "tensor/random.h"

namespace dl {

namespace fused { struct Program; }

struct Backend {
  const char* name;
  // memory
  void* (*alloc)(size_t nbytes, int device_index, const char* op);
  void (*free)(void* p, size_t nbytes, int device_index);
  // pointwise: `out` has the broadcast shape; inputs are in the compute dtype
  void (*unary)(Op op, const Tensor& out, const Tensor& x);
  void (*binary)(Op op, const Tensor& out, const Tensor& a, const Tensor& b);
  void (*binary_scalar)(Op op, const Tensor& out, const Tensor& a, double s, bool scalar_first);
  void (*where)(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
  void (*clamp)(const Tensor& out, const Tensor& x, double lo, double hi);
  // out = src converted to out's dtype, src broadcast to out's shape
  void (*copy)(const Tensor& out, const Tensor& src);
  void (*fill)(const Tensor& out, double value);
  // every output of a fused pointwise program (tensor/fused.h) of this device's memory
  void (*fused)(const fused::Program& p, int device_index);
  // ---- reductions (front ends: tensor/reduce.cpp; CPU: tensor/cpu/reduce.cpp) ----
  // `out` is contiguous with x's dims, size 1 at each of `dims` (sorted, 0-based) and
  // the op's result dtype; x has any strides and its own dtype (kFloatOnly ops get it
  // converted to a float dtype first). Sum/Prod/Any/All read every dtype directly.
  void (*reduce)(Op op, const Tensor& out, const Tensor& x, const std::vector<int>& dims,
                 const ReduceOpts& opts);
  // Max (Op::MaxDim, Op::Argmax) or min (Op::MinDim, Op::Argmin) along `dim` of a
  // non-empty dim: int64 `indices` and, when defined, `values` (x's dtype), both
  // contiguous with size 1 at `dim`.
  void (*arg_reduce)(Op op, const Tensor& values, const Tensor& indices, const Tensor& x,
                     int dim);
  // Op::Softmax or Op::LogSoftmax along `dim`: x and out contiguous, same shape, floating.
  void (*softmax)(Op op, const Tensor& out, const Tensor& x, int dim);
  // out = the running sums (op Cumsum) or products (Cumprod, fn::ScanStep) of contiguous
  // x along dim, from the end when `reverse`; float x: of its dtype, accumulated in
  // double; integer or bool x: int64 out.
  void (*scan)(Op op, const Tensor& out, const Tensor& x, int dim, bool reverse);

  // ---- sorting and selection (front ends: tensor/sorting.cpp; CPU: tensor/cpu/sorting.cpp) --
  // The order is fn::less_nan_last (tensor/sort_functors.h) on every backend.
  // indices (R, n) int64 = the stable order of each row of x (R, n), contiguous and not
  // bool; n >= 1.
  void (*sort)(const Tensor& indices, const Tensor& x, bool descending);
  // out (count, ndim) int64 = the 0-based positions of x's non-zero elements in row-major
  // order, for a contiguous x of ndim >= 1 dims with exactly `count` of them (the front end
  // counted).
  void (*nonzero)(const Tensor& out, const Tensor& x);
  // out (R, m) int64 = fn::insertion_point of each value of row r of values (R, m) into
  // row r of seq (R, n); all contiguous, seq and values of one dtype.
  void (*searchsorted)(const Tensor& out, const Tensor& seq, const Tensor& values, bool right);

  // ---- indexing and linear algebra (front ends: tensor/index.cpp, tensor/linalg.cpp;
  // CPU: tensor/cpu/index.cpp, tensor/cpu/matmul.cpp) ----
  // A null entry makes the front end throw "OP: not implemented for <backend>". Index
  // kernels check every index they read and throw dl::Error (Index) naming the op, the
  // index and the size. Every tensor passed has at least one dim.
  // out (contiguous) = the non-empty xs joined along dim; each x may have any layout
  // and dtype (converted to out's).
  void (*cat)(const Tensor& out, const TensorList& xs, int dim);
  // out = x's slices at the 1-D (or 0-dim) int32/int64 `index` along dim.
  void (*index_select)(const Tensor& out, const Tensor& x, int dim, const Tensor& index);
  // out (index's shape) = x[..., index[...], ...] along dim; index int32/int64.
  void (*gather)(const Tensor& out, const Tensor& x, int dim, const Tensor& index);
  // out[..., index[...], ...] += src[...] along dim, in place on out.
  void (*scatter_add)(const Tensor& out, int dim, const Tensor& index, const Tensor& src);
  // out (contiguous (batch..., M, N)) = a (..., M, K) @ b (..., K, N), all in out's
  // dtype; a's and b's batch dims broadcast to out's; M, N, K, batch all non-empty.
  void (*matmul)(const Tensor& out, const Tensor& a, const Tensor& b);
  // matmul also takes float16 and bfloat16 (out, a and b of one of them), accumulating
  // in float32; without it the front end computes half products in float32.
  bool half_matmul = false;

  // ---- decompositions and solves (front ends: tensor/decomp.cpp; CPU: LAPACK,
  // tensor/cpu/lapack.cpp) ----
  // Every tensor is contiguous and 3-D or 2-D: a batch of B matrices (B >= 1) or of
  // their vectors, all of one float dtype, no matrix empty. Inputs are read, never
  // written. A singular system or a matrix that is not positive-definite throws
  // dl::Error (Value) naming the op and the batch element (1-based).
  //   LinalgSolve      ins {a (B, n, n), b (B, n, k)}, outs {x (B, n, k)}
  //   SolveTriangular  the same; o.upper picks a's triangle, o.unitriangular its diagonal
  //   Cholesky         ins {a (B, n, n)}, outs {l (B, n, n)}, lower, zeros above
  //   Qr               ins {a (B, m, n)}, outs {q (B, m, kq), r (B, kq, n)}, kq = m when
  //                    o.full else min(m, n)
  //   Eigh             ins {a (B, n, n)}, outs {w (B, n) ascending, v (B, n, n) columns}
  //   Svd              ins {a (B, m, n)}, outs {u (B, m, ku), s (B, k), vh (B, kv, n)},
  //                    ku = m and kv = n when o.full, else k = min(m, n)
  //   Slogdet          ins {a (B, n, n)}, outs {sign (B), logabsdet (B)}
  // Each backend reports a failure through linalg_failed() below.
  void (*linalg)(Op op, const TensorList& outs, const TensorList& ins, const LinalgOpts& o);

  // ---- random numbers (front end: tensor/random.cpp; CPU: tensor/cpu/random.cpp) ----
  // out (contiguous, fresh) element i = convert(spec(i)) (tensor/random.h): the math is
  // the spec's, so every device produces the same stream. Null: generated on the host
  // and copied.
  void (*random)(const Tensor& out, const fn::RandomSpec& spec);

  // ---- optimizer updates (front end: tensor/optim.cpp; CPU: tensor/cpu/optim.cpp) ----
  // In place on p and the state, one pass; the tensors share p's shape, dtype (floating)
  // and device and may have any strides; p is not empty. sgd_step's buf is p itself
  // when momentum is 0; adam_step's vmax is undefined without amsgrad.
  void (*sgd_step)(const Tensor& p, const Tensor& g, const Tensor& buf, const fn::SgdStep& s);
  void (*adam_step)(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                    const Tensor& vmax, const fn::AdamStep& s);

  // ---- neural networks (front ends: tensor/nn.cpp; CPU: tensor/cpu/conv.cpp, pool.cpp,
  // norm.cpp, loss.cpp) ----
  // Every tensor passed is contiguous, every float one of one float dtype (the
  // output's), and no size is 0 (the front ends handle empty cases). Images are 4-D
  // NCHW, conv weights OIHW; the geometry follows from the shapes and the options.
  // out (N, O, Ho, Wo) = conv of x (N, C, H, W) with w (O, C / groups, kH, kW), plus
  // bias (O) when it is defined.
  void (*conv2d)(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                 const Conv2dOpts& o);
  // gx (N, C, H, W), fully written = the gradient of conv2d with respect to x for the
  // output gradient g (N, O, Ho, Wo).
  void (*conv2d_input_grad)(const Tensor& gx, const Tensor& g, const Tensor& w, const Conv2dOpts& o);
  // gw (O, C / groups, kH, kW), fully written = the gradient with respect to w.
  void (*conv2d_weight_grad)(const Tensor& gw, const Tensor& x, const Tensor& g, const Conv2dOpts& o);
  // out and int64 indices (N, C, Ho, Wo): window maxima of x (N, C, H, W) and their
  // positions h * W + w in the plane (not computed when `indices` is undefined);
  // o.stride already resolved (non-zero).
  void (*max_pool2d)(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dOpts& o);
  // gx (N, C, H, W), fully written = zeros plus each g (N, C, Ho, Wo) at its index.
  void (*max_pool2d_backward)(const Tensor& gx, const Tensor& g, const Tensor& indices);
  void (*avg_pool2d)(const Tensor& out, const Tensor& x, const Pool2dOpts& o);
  // gx (N, C, H, W), fully written = the adjoint of avg_pool2d applied to g.
  void (*avg_pool2d_backward)(const Tensor& gx, const Tensor& g, const Pool2dOpts& o);
  // mean and biased var (C) of x (N, C, S) over N and S.
  void (*batch_norm_stats)(const Tensor& mean, const Tensor& var, const Tensor& x);
  // out (N, C, S) = x * scale[c] + shift[c].
  void (*channel_affine)(const Tensor& out, const Tensor& x, const Tensor& scale, const Tensor& shift);
  // y (R, D) = fn::LayerNormY of each row of x (R, D) with weight and bias (D); mean
  // and invstd (R) = each row's mean and 1 / sqrt(biased var + eps) (in double).
  void (*layer_norm)(const Tensor& y, const Tensor& mean, const Tensor& invstd, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, double eps);
  // dx (R, D) = fn::LayerNormDx per row, from g, x (R, D), mean, invstd (R) and weight
  // (D); dweight (D) = the sum over rows of g xhat, dbias (D) = of g, each when defined.
  void (*layer_norm_backward)(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& g,
                              const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight);
  // loss (N) = logsumexp(logits[i]) - logits[i][target[i]] for logits (N, C) and int64
  // target (N); 0 where target is ignore_index. Throws (Index) for a target outside
  // [0, C) that is not ignored.
  void (*cross_entropy)(const Tensor& loss, const Tensor& logits, const Tensor& target,
                        std::optional<int64_t> ignore_index);
};

const Backend& cpu_backend();

// Throws the error of a factorization whose LAPACK (or cuSOLVER) `info` was not 0 (< 0:
// a NaN or infinity in the matrix, which LAPACK's drivers refuse as a bad argument),
// for matrix `b` (0-based) of a batch of `count`: one wording for every backend
// (tensor/decomp.cpp).
[[noreturn]] void linalg_failed(Op op, int64_t info, int64_t b, int64_t count);

// The CPU threads of this thread's ops: OpenMP's loops and the largest matrix products
// (OpenBLAS, Note [BLAS threads] in tensor/cpu/matmul.cpp). At start, what OpenMP and
// OpenBLAS chose (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, or the cores); n >= 1.
void set_cpu_threads(int n);
int cpu_threads();

// OpenBLAS's kernels (Note [Choosing OpenBLAS's core] in tensor/cpu/blas_core.cpp).
struct BlasInfo {
  std::string core;       // the core running now ("Haswell", "SkylakeX", ...)
  std::string detected;   // the one OpenBLAS picked by itself
  std::string chosen_by;  // "openblas", "dlua", "OPENBLAS_CORETYPE", or "host" (warned)
  std::string config;     // openblas_get_config()
  int threads = 1;        // OpenBLAS's threads for the largest products
};
BlasInfo blas_info();
// The best instruction set the CPU and the OS support: 5 AVX-512 (F, BW, DQ, VL),
// 4 AVX2 with FMA, 3 AVX, 0 older.
int cpu_simd_level();
// The OpenBLAS core to use instead of `detected` on a CPU of `cpu_level`: one for the
// CPU's level when `detected` is a pre-AVX fallback, else nullptr.
const char* better_blas_core(std::string_view detected, int cpu_level);
// Makes OpenBLAS pick its kernels again as if OPENBLAS_CORETYPE were `core` (the
// environment is restored); false when this OpenBLAS cannot, or ended on another level.
// Only while no product runs: the engine does it when its image loads.
bool select_blas_core(const char* core);
void select_blas_core_at_load();
// The backend for `d`. For a cuda device this loads the plugin on first use
// (tensor/plugin.h); throws "op: cuda is not available (why)" when there is none, and
// names the device when its index is out of range.
const Backend& backend_for(Device d, const char* op);

// The backend entry `k` for `d`; a backend that leaves it null gets "op: not
// implemented for cuda" instead of a call through a null pointer.
template <typename Fn>
Fn kernel(Device d, Fn Backend::*k, const char* op) {
  const Backend& b = backend_for(d, op);
  Fn f = b.*k;
  if (!f) fail(ErrorKind::NotImplemented, op, ": not implemented for ", b.name);
  return f;
}
// Installs (or, with nullptr, removes) the backend of a device type. `device_count`, when
// not negative, bounds the device indices backend_for accepts (the plugin passes it;
// tests that install a fake backend leave it open).
void register_backend(DeviceType type, const Backend* b, int device_count = -1);

}  // namespace dl

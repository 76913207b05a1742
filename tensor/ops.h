// The engine's ops, declared from tensor/ops.def, with no autograd.
//
//   dl::Tensor a = dl::randn({2, 3}, dl::DType::Float32);
//   dl::Tensor b = dl::binary(dl::Op::Add, a, dl::Scalar(1.0));   // a + 1
//   dl::Tensor s = dl::reduce(dl::Op::Sum, b, {1}, /*keepdim=*/false);
//
// Dims here are 0-based (negative counts from the end); the Lua layer converts from
// its 1-based convention. Every function checks its inputs and throws dl::Error with
// a message that starts with the op's name. The autograd layer (autograd/) wraps
// these functions to record them; nothing here records anything.
#pragma once
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace dl {

enum class Op : uint16_t {
#define DL_OP(Name, lua, arity, flags) Name,
#include "tensor/ops.def"
  NumOps
};
constexpr int kNumOps = static_cast<int>(Op::NumOps);

enum OpFlags : unsigned {
  kDiff = 1u << 0,
  kFloatOnly = 1u << 1,
  kNoBool = 1u << 2,
  kIntExact = 1u << 3,
  kIntOnly = 1u << 4,
  kLong = 1u << 5,   // Note [Long ops in fused programs] (tensor/fused.h)
};

// Which dtypes a pointwise functor is instantiated for, by its row's flags: float-only
// ops for float and double, int-only ops for the integers and bool, no-bool ops for
// everything but bool (the front end has already refused the rest with its message).
template <typename T>
constexpr bool op_accepts(unsigned flags) {
  if ((flags & kFloatOnly) && !std::is_floating_point_v<T>) return false;
  if ((flags & kIntOnly) && std::is_floating_point_v<T>) return false;
  if ((flags & kNoBool) && std::is_same_v<T, bool>) return false;
  return true;
}
enum class OpFamily : uint8_t { Unary, Binary, Compare, Reduce, Other };

struct OpInfo {
  Op op;
  const char* name;      // C++ name, "LogSoftmax"
  const char* lua_name;  // "log_softmax"
  int arity;             // -1: a list of tensors
  unsigned flags;
  OpFamily family;
};
const OpInfo& op_info(Op op);
inline const char* op_name(Op op) { return op_info(op).lua_name; }

// A Lua number (or a C++ constant) taking part in an op. Its kind decides promotion
// as PyTorch's wrapped numbers do: an int tensor plus an integral number stays int;
// a non-integral number makes it the default float dtype.
struct Scalar {
  double v = 0;
  ScalarKind kind = ScalarKind::Float;
  Scalar() = default;
  Scalar(double x) : v(x), kind(ScalarKind::Float) {}
  static Scalar from_lua(double x);  // integral values become Int
  static Scalar integer(int64_t x) { Scalar s; s.v = double(x); s.kind = ScalarKind::Int; return s; }
};

// ---- type promotion (PyTorch's result_type) -------------------------------------
// Dimensioned tensors take precedence over 0-dim tensors, which take precedence over
// scalars, unless a lower-priority operand is of a higher category (bool < int < float).
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, Scalar s);
// Refuses a number written into a tensor of `dtype` (fill_, full, masked_fill, x[i] = v)
// that the dtype cannot hold, as PyTorch's "cannot be converted without overflow": NaN or
// an infinity into an integer, a finite number past a float's range. A whole number up to
// the width in either sign wraps into uint8 (-1 is 255), as PyTorch's; a negative fraction
// does not.
void check_fits(const char* op, double value, DType dtype);

// ---- creation --------------------------------------------------------------------
Tensor zeros(const Shape& shape, DType dtype, Device device = Device{});
Tensor ones(const Shape& shape, DType dtype, Device device = Device{});
Tensor full(const Shape& shape, Scalar value, DType dtype, Device device = Device{});
Tensor arange(double start, double stop, double step, DType dtype, Device device = Device{});
Tensor linspace(double start, double stop, int64_t n, DType dtype, Device device = Device{});
Tensor eye(int64_t n, int64_t m, DType dtype, Device device = Device{});
// Contiguous tensor from host values (row-major), converted to `dtype`.
Tensor from_values(const double* values, int64_t n, const Shape& shape, DType dtype,
                   Device device = Device{});
// Zero-copy view of foreign host memory (see Storage::borrow).
Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype,
                 Storage::FreeFn free_fn = nullptr, void* ctx = nullptr);

// ---- random numbers (tensor/random.cpp) -------------------------------------------
// One global generator: Philox-4x32-10 keyed by the seed, counter-based, so a stream is
// reproducible on one machine for a given seed whatever the thread count.
void manual_seed(uint64_t seed);
uint64_t initial_seed();
// The generator's whole state: its seed and how far its stream has been read (in
// blocks of four 32-bit words); setting it back replays the same numbers.
struct RngState {
  uint64_t seed = 0, offset = 0;
};
RngState rng_state();
void set_rng_state(const RngState& s);
Tensor rand(const Shape& shape, DType dtype, Device device = Device{});       // U[0, 1)
Tensor randn(const Shape& shape, DType dtype, Device device = Device{});      // N(0, 1)
Tensor randint(int64_t lo, int64_t hi, const Shape& shape, DType dtype, Device device = Device{});  // [lo, hi)
Tensor randperm(int64_t n, DType dtype = DType::Int64);                         // 0..n-1 shuffled
Tensor bernoulli(const Shape& shape, double p, DType dtype, Device device = Device{});

// ---- pointwise --------------------------------------------------------------------
Tensor unary(Op op, const Tensor& x);
Tensor binary(Op op, const Tensor& a, const Tensor& b);
// `s op a` when scalar_first, else `a op s`.
Tensor binary(Op op, const Tensor& a, Scalar s, bool scalar_first = false);
// In place: a = a op b (b broadcast to a's shape; the result dtype must be a's).
void binary_(Op op, Tensor& a, const Tensor& b);
void binary_(Op op, Tensor& a, Scalar s);
Tensor compare(Op op, const Tensor& a, const Tensor& b);
Tensor compare(Op op, const Tensor& a, Scalar s, bool scalar_first = false);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
// dtype conversion (a copy; returns x itself when the dtype already matches and
// `copy` is false).
Tensor cast(const Tensor& x, DType dtype, bool copy = false);
// dst[...] = src, broadcasting src to dst's shape and converting its dtype.
void copy_(Tensor& dst, const Tensor& src);
void fill_(Tensor& dst, Scalar value);
Tensor contiguous(const Tensor& x);   // x itself when already contiguous
Tensor clone(const Tensor& x);

// ---- reductions (tensor/cpu/reduce.cpp) --------------------------------------------
// `dims` empty means every dim. For Var/Std `correction` is 1 (unbiased) by default;
// for Norm `p` is the order. Integer Sum/Prod give int64, as PyTorch does.
struct ReduceOpts {
  double correction = 1;  // Var, Std
  double p = 2;           // Norm
};
Tensor reduce(Op op, const Tensor& x, const std::vector<int>& dims, bool keepdim,
              const ReduceOpts& opts = {});
// Values and int64 indices (0-based) of the max/min along `dim`.
std::pair<Tensor, Tensor> max_dim(const Tensor& x, int dim, bool keepdim);
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int dim, bool keepdim);
// int64 index (0-based) of the max/min: over the flattened tensor when dim is nullopt.
Tensor argmax(const Tensor& x, std::optional<int> dim, bool keepdim);
Tensor argmin(const Tensor& x, std::optional<int> dim, bool keepdim);
Tensor softmax(const Tensor& x, int dim);
// softmax's gradient along the last dim, y (g - sum(g y)), from its output y and the
// output's gradient g, in one pass a row. Not recorded: autograd's derivative uses it
// when no gradient of the gradient is wanted.
Tensor softmax_backward(const Tensor& g, const Tensor& y);
Tensor log_softmax(const Tensor& x, int dim);
// Running sums along dim (from the end with `reverse`); integer and bool x give int64.
Tensor cumsum(const Tensor& x, int dim, bool reverse = false);
// Running products along dim (from the end with `reverse`); integer and bool x give int64.
Tensor cumprod(const Tensor& x, int dim, bool reverse = false);

// The discrete Fourier transform of x (..., n, 2), complex values as (real, imaginary)
// pairs, along dim -2, unnormalised; the sign of the exponent + when `inverse`
// (tensor/spectral.cpp; Note [Complex values as pairs] in tensor/fft.h).
Tensor fft_c2c(const Tensor& x, bool inverse);
// The forward transform of a real x (..., n) along its last dim: bins 0 .. n/2 as pairs
// (..., n/2 + 1, 2), those strictly between times `weight` (1: rfft's; 2: the adjoint of
// fft_c2r with 2). fft_c2r(y, n, weight): the n real values of those bins, inverse and
// unnormalised (weight 2: irfft's, n times the inverse of fft_r2c with 1; 1: fft_r2c's
// adjoint). Note [A real signal's transform] in tensor/cpu/fft.cpp.
Tensor fft_r2c(const Tensor& x, int64_t weight);
Tensor fft_c2r(const Tensor& y, int64_t n, int64_t weight);

// ---- sorting and selection (tensor/sorting.cpp; CPU: tensor/cpu/sorting.cpp) -------
// Values and int64 indices (0-based) of x sorted along dim; stable, NaN the largest.
std::pair<Tensor, Tensor> sort(const Tensor& x, int dim, bool descending);
// int64 (count, x.dim()): the positions (0-based) of x's non-zero elements, in
// row-major order. Reads the count back from the device first (a synchronisation).
Tensor nonzero(const Tensor& x);
// int64 of values' shape: the insertion points (0-based, in [0, n]) of values into the
// ascending last dim of seq (n elements); a 1-D seq serves every value, else seq's
// leading dims must equal values'. `right`: after equal elements.
Tensor searchsorted(const Tensor& seq, const Tensor& values, bool right);

// ---- shape ops (tensor/view.cpp): views share storage ------------------------------
// `shape` may hold one -1, inferred. view() needs compatible strides; reshape() copies
// when it must.
Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int d0, int d1);
Tensor permute(const Tensor& x, const std::vector<int>& order);
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
// Elements start, start+step, ... < stop along dim (0-based, stop exclusive, step > 0).
Tensor slice(const Tensor& x, int dim, int64_t start, int64_t stop, int64_t step);
Tensor select(const Tensor& x, int dim, int64_t index);
// Zeros of base_shape with g written into the strided region (sizes, strides, offset) of
// that contiguous layout: the adjoint of taking such a view (the gradient of narrow,
// slice, select). One op for an observer (a capture replays it; its write is inside).
Tensor embed(const Tensor& g, const Shape& base_shape, const Shape& sizes, const Shape& strides, int64_t offset);
// embed's adjoint: the view (sizes, strides, offset) of t's elements in t's contiguous
// layout (a copy first when t is not contiguous).
Tensor strided_view(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a dim
Tensor squeeze(const Tensor& x, std::optional<int> dim);
Tensor unsqueeze(const Tensor& x, int dim);
Tensor flatten(const Tensor& x, int start_dim = 0, int end_dim = -1);
Tensor cat(const TensorList& xs, int dim);
Tensor stack(const TensorList& xs, int dim);
// Index tensors hold 0-based int64 (or int32) indices.
Tensor index_select(const Tensor& x, int dim, const Tensor& index);
Tensor gather(const Tensor& x, int dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src);
// x with `sizes` broadcast-summed away: the reverse of expand (used for gradients).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra (tensor/cpu/matmul.cpp) -----------------------------------------
// PyTorch's matmul: 1-D x 1-D dot, 2-D x 2-D, batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- decompositions and solves (tensor/decomp.cpp; CPU: LAPACK, tensor/cpu/lapack.cpp) --
// Matrices are the last two dims; the leading dims are a batch. Float32 and float64
// (integers are converted to the default float dtype). Bad shapes, singular systems and
// matrices that are not positive-definite throw dl::Error naming the op and, for a
// batch, the matrix (1-based, as the Lua API counts).
// The options a Backend::linalg kernel reads (tensor/kernels.def).
struct LinalgOpts {
  bool upper = false;          // SolveTriangular: a is upper-triangular
  bool unitriangular = false;  // SolveTriangular: a's diagonal is ones
  bool full = false;           // Qr: complete Q; Svd: full U and Vh
};
// X with A X = B: a (..., n, n), b (..., n, k), batch dims broadcast.
Tensor linalg_solve(const Tensor& a, const Tensor& b);
// X with A X = B for a triangular a (..., n, n) (only its upper or lower triangle is
// read; with `unitriangular` its diagonal is taken as ones); b (..., n, k).
Tensor solve_triangular(const Tensor& a, const Tensor& b, bool upper, bool unitriangular);
// Lower L with L L^T = a, from a's lower triangle.
Tensor cholesky(const Tensor& a);
// Q (..., m, k) with orthonormal columns and upper-triangular R (..., k, n), k = min(m, n);
// `complete`: Q (..., m, m) and R (..., m, n).
std::pair<Tensor, Tensor> qr(const Tensor& a, bool complete);
// Eigenvalues (..., n) in ascending order and eigenvectors (..., n, n, one a column) of
// a symmetric a, from its lower triangle.
std::pair<Tensor, Tensor> eigh(const Tensor& a);
// U (..., m, k), S (..., k) descending, Vh (..., k, n) with a = U diag(S) Vh, k =
// min(m, n); `full_matrices`: U (..., m, m) and Vh (..., n, n).
struct SvdResult {
  Tensor u, s, vh;
};
SvdResult svd(const Tensor& a, bool full_matrices);
// sign(det a) and log|det a| (..., ): the sign is 0 and the log -inf for a singular a.
std::pair<Tensor, Tensor> slogdet(const Tensor& a);

}  // namespace dl

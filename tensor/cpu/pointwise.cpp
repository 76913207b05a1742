// CPU kernels of the pointwise families: each op's functor (tensor/functors.h) run by
// the loops of tensor/cpu/loops.h, for every dtype the op accepts.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "tensor/backend.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/functors.h"
#include "tensor/half.h"
#include "tensor/small.h"
#include "tensor/small_sizes.h"

namespace dl::cpu {

namespace {

// Note [Small dense operands]
// An op on a few elements costs more in its loop's set-up than in its arithmetic: the
// operand geometry (make_operands' strides and coalescing, for_each_run's index) was
// about 300 of the 1,000 instructions of a 16-element multiply, and a recorded op and
// its gradient run several such kernels (callgrind, bench/ `chain`). So when out and
// every operand are dense (contiguous, each either of out's size or a single element
// read for all) and the op is small, it runs as dl::small's loop over the raw buffers
// (tensor/small.h): the same functor in the same dtype and order, so the same bits.
// (Contiguous with out's element count means the same layout: broadcasting to out's
// shape can only have added or kept size-1 dims.) Larger ops, and the dtypes and
// layouts dl::small does not serve, take the general loops.
constexpr int64_t kSmallDense = sizes::kSmallElements;   // Note [The paths of a + b]

// t's step in a dense loop over out: 1, or 0 for one element (a one-element tensor, or
// one expanded: every stride 0, as the gradient of a sum is), or -1 when t is not dense.
int dense_step(const Tensor& t, const Tensor& out) {
  if (t.numel() == out.numel() && t.is_contiguous()) return 1;
  for (int d = 0; d < t.dim(); ++d)
    if (t.stride(d) != 0 && t.size(d) != 1) return -1;
  return 0;
}

bool small_dense(const Tensor& out) {
  return out.numel() <= kSmallDense && out.numel() > 0 && out.is_contiguous();
}

// Note [Dense operands in wide loops]
// The general loops (elementwise, tensor/cpu/loops.h) are built for the baseline
// x86-64: SSE2, four float32 lanes, and two doubles for the float exponentials'
// polynomials (Note [Float exponentials in double] in functors.h). When out and every
// operand are dense and of one float dtype, an op larger than kSmallDense runs
// dl::small's block loops instead (tensor/small.h: built for AVX2 and AVX-512 as well,
// picked at load time) over each thread's range: the same functor in the same dtype, so
// the same bits (test_pointwise compares dense operands with strided views of the same
// values). In cache the width shows: an in-place multiply of 8,192 float32 ran clearly
// faster in the AVX2 loop than in the SSE2 one; into fresh memory the stores set the
// pace either way (docs/performance.md, "Measurements behind the code"). A one-element
// operand is read before the threads start, as the general loops read it before their
// loop, in case out is the buffer it lies in.

// block(b, e) runs elements [b, e) of contiguous out, and says false (running nothing)
// for a dtype or op that dl::small has not: asked once for no elements first.
template <typename Block>
bool dense_blocks(const Tensor& out, Block block) {
  if (!block(0, 0)) return false;
  parallel_range(out.numel(), [&](int64_t b, int64_t e) { block(b, e); });
  return true;
}

// Operand t of a dense loop: its elements, or (step 0) its one element read now.
struct DenseOperand {
  const char* p;
  int step;
  size_t size;
  alignas(8) char one[8];
  DenseOperand(const Tensor& t, int s) : p(static_cast<const char*>(t.raw_data())), step(s), size(itemsize(t.dtype())) {
    if (step == 0) {
      std::memcpy(one, p, size);
      p = one;
    }
  }
  const void* at(int64_t i) const { return p + i * step * int64_t(size); }
};

char* element(const Tensor& out, int64_t i) {
  return static_cast<char*>(out.raw_data()) + i * int64_t(itemsize(out.dtype()));
}

template <typename T, typename F>
void run_unary(const Tensor& out, const Tensor& x, F f) {
  elementwise<T, T, 2>({&out, &x}, [f](T v) { return T(f(v)); });
}

template <typename Out, typename T, typename F>
void run_binary(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  elementwise<Out, T, 3>({&out, &a, &b}, [f](T x, T y) { return Out(f(x, y)); });
}

template <typename Out, typename T, typename F>
void run_binary_scalar(const Tensor& out, const Tensor& a, T s, bool first, F f) {
  if (first)
    elementwise<Out, T, 2>({&out, &a}, [f, s](T x) { return Out(f(s, x)); });
  else
    elementwise<Out, T, 2>({&out, &a}, [f, s](T x) { return Out(f(x, s)); });
}

}  // namespace

void unary(Op op, const Tensor& out, const Tensor& x) {
  if (out.is_contiguous() && dense_step(x, out) == 1) {
    if (small_dense(out) && small::unary(op, x.dtype(), out.raw_data(), x.raw_data(), out.numel())) return;
    const DenseOperand in(x, 1);
    if (out.numel() > kSmallDense && dense_blocks(out, [&](int64_t b, int64_t e) {
          return small::block_unary(op, x.dtype(), element(out, b), in.at(b), e - b);
        }))
      return;
  }
  if (op == Op::Logical_not) {
    DL_DISPATCH_ALL(x.dtype(), "logical_not",
        elementwise<bool, scalar_t, 2>({&out, &x}, [](scalar_t v) { return fn::NotFn{}(v); }));
    return;
  }
  switch (op) {
#define DL_UNARY(Name, lua, Fn, flags)                                              \
    case Op::Name:                                                                  \
      DL_DISPATCH_NUMERIC(x.dtype(), lua, {                                         \
        if constexpr (op_accepts<scalar_t>(flags)) run_unary<scalar_t>(out, x, fn::Fn{}); \
        else fail(ErrorKind::Type, lua, ": not implemented for ", dtype_name(x.dtype())); \
      });                                                                           \
      return;
#include "tensor/ops.def"
    default: break;
  }
  fail(ErrorKind::Internal, "unary: not a unary op: ", op_name(op));
}

void binary(Op op, const Tensor& out, const Tensor& a, const Tensor& b) {
  const int sa = dense_step(a, out), sb = dense_step(b, out);
  if (out.is_contiguous() && a.dtype() == b.dtype() && sa >= 0 && sb >= 0) {
    if (small_dense(out) &&
        small::binary(op, a.dtype(), out.raw_data(), a.raw_data(), sa, b.raw_data(), sb, out.numel()))
      return;
    const DenseOperand x(a, sa), y(b, sb);
    if (out.numel() > kSmallDense && dense_blocks(out, [&](int64_t i, int64_t e) {
          return small::block_binary(op, a.dtype(), element(out, i), x.at(i), x.step, y.at(i), y.step, e - i);
        }))
      return;
  }
  switch (op) {
#define DL_BINARY(Name, lua, Fn, flags)                                             \
    case Op::Name:                                                                  \
      DL_DISPATCH_ALL(a.dtype(), lua, {                                             \
        if constexpr (op_accepts<scalar_t>(flags)) run_binary<scalar_t, scalar_t>(out, a, b, fn::Fn{}); \
        else fail(ErrorKind::Type, lua, ": not implemented for ", dtype_name(a.dtype())); \
      });                                                                           \
      return;
#define DL_COMPARE(Name, lua, Fn)                                                   \
    case Op::Name:                                                                  \
      DL_DISPATCH_ALL(a.dtype(), lua, run_binary<bool, scalar_t>(out, a, b, fn::Fn{})); \
      return;
#include "tensor/ops.def"
    default: break;
  }
  fail(ErrorKind::Internal, "binary: not a binary op: ", op_name(op));
}

void binary_scalar(Op op, const Tensor& out, const Tensor& a, double s, bool first) {
  if (out.is_contiguous() && dense_step(a, out) == 1) {
    if (small_dense(out) &&
        small::binary_scalar(op, a.dtype(), out.raw_data(), a.raw_data(), s, first, out.numel()))
      return;
    const DenseOperand x(a, 1);
    if (out.numel() > kSmallDense && dense_blocks(out, [&](int64_t b, int64_t e) {
          return small::block_binary_scalar(op, a.dtype(), element(out, b), x.at(b), s, first, e - b);
        }))
      return;
  }
  switch (op) {
#define DL_BINARY(Name, lua, Fn, flags)                                             \
    case Op::Name:                                                                  \
      DL_DISPATCH_ALL(a.dtype(), lua, {                                             \
        if constexpr (op_accepts<scalar_t>(flags))                                  \
          run_binary_scalar<scalar_t, scalar_t>(out, a, fn::scalar_operand<scalar_t>(s), first, fn::Fn{}); \
        else fail(ErrorKind::Type, lua, ": not implemented for ", dtype_name(a.dtype())); \
      });                                                                           \
      return;
#define DL_COMPARE(Name, lua, Fn)                                                   \
    case Op::Name:                                                                  \
      if (is_floating(a.dtype()) || holds_whole(a.dtype(), s)) {                    \
        DL_DISPATCH_ALL(a.dtype(), lua,                                             \
          run_binary_scalar<bool, scalar_t>(out, a, fn::convert<scalar_t>(s), first, fn::Fn{})); \
      } else {  /* int tensor against a number it does not hold: compare in double */ \
        DL_DISPATCH_ALL(a.dtype(), lua,                                             \
          elementwise<bool, scalar_t, 2>({&out, &a}, [s, first](scalar_t x) {       \
            return first ? fn::Fn{}(s, double(x)) : fn::Fn{}(double(x), s); }));     \
      }                                                                             \
      return;
#include "tensor/ops.def"
    default: break;
  }
  fail(ErrorKind::Internal, "binary: not a binary op: ", op_name(op));
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  DL_DISPATCH_ALL(out.dtype(), "where",
      elementwise<scalar_t, scalar_t, 4>({&out, &cond, &a, &b},
          [](bool c, scalar_t x, scalar_t y) { return fn::WhereFn{}(c, x, y); }));
}

void clamp(const Tensor& out, const Tensor& x, double lo, double hi) {
  DL_DISPATCH_NUMERIC(out.dtype(), "clamp", {
    // Bounds outside the dtype's range saturate instead of overflowing.
    const fn::ClampFn<scalar_t> f{fn::convert<scalar_t>(lo), fn::convert<scalar_t>(hi)};
    elementwise<scalar_t, scalar_t, 2>({&out, &x}, [f](scalar_t v) { return f(v); });
  });
}

namespace {

// A copy that transposes (after coalescing: out walks its rows contiguously while src
// walks them down its columns), done in square tiles that stay in the L1 cache. Read
// element by element, every element of a column touched a new cache line (docs/
// performance.md, "Measurements behind the code").
template <typename T>
bool copy_transposed(const Tensor& out, const Tensor& src) {
  StridedOperands<2> g = make_operands<2>({&out, &src});
  const int64_t z = int64_t(sizeof(T));
  if (g.numel == 0) return true;  // (an empty shape may have a dim near 2^63)
  if (g.ndim != 2 || g.strides[0][1] != z || g.strides[1][0] != z) return false;
  const int64_t rows = g.sizes[0], cols = g.sizes[1];
  const int64_t out_row = g.strides[0][0], src_col = g.strides[1][1];  // bytes
  constexpr int64_t kTile = 32;
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  char* o = g.data[0];
  const char* in = g.data[1];
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = t * kTile, i1 = rows - i0 > kTile ? i0 + kTile : rows;
      for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
        const int64_t j1 = cols - j0 > kTile ? j0 + kTile : cols;
        for (int64_t i = i0; i < i1; ++i) {
          T* dst = reinterpret_cast<T*>(o + i * out_row);
          const char* col = in + i * z;
          for (int64_t j = j0; j < j1; ++j) dst[j] = *reinterpret_cast<const T*>(col + j * src_col);
        }
      }
    }
  };
  if (g.numel < kParallelGrain) {
    run(0, row_tiles);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < row_tiles; ++t) run(t, t + 1);
  }
  return true;
}

}  // namespace

void copy(const Tensor& out, const Tensor& src) {
  if (out.dtype() == src.dtype()) {
    bool done = false;
    DL_DISPATCH_STORAGE(src.dtype(), "copy_", done = copy_transposed<scalar_t>(out, src));
    if (done) return;
  }
  if (src.dtype() == DType::Bool) {
    // Read as bytes and compared with 0 in the same expression: a loop through a bool
    // value stayed scalar, several times slower than a float copy (docs/performance.md,
    // "Measurements behind the code").
    DL_DISPATCH_STORAGE(out.dtype(), "copy_",
        elementwise<scalar_t, uint8_t, 2>({&out, &src}, [](uint8_t v) { return convert_element<scalar_t>(uint8_t(v != 0)); }));
    return;
  }
  if (convert_half(out, src)) return;
  DL_DISPATCH_STORAGE(src.dtype(), "copy_", {
    using In = scalar_t;
    DL_DISPATCH_STORAGE(out.dtype(), "copy_",
        elementwise<scalar_t, In, 2>({&out, &src}, [](In v) { return convert_element<scalar_t>(v); }));
  });
}

void fill(const Tensor& out, double value) {
  DL_DISPATCH_STORAGE(out.dtype(), "fill_", {
    scalar_t v = fill_value<scalar_t>(value);
    elementwise<scalar_t, scalar_t, 1>({&out}, [v]() { return v; });
  });
}

}  // namespace dl::cpu

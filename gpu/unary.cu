// CUDA kernels of the one-input pointwise ops, where, clamp and fill: each op's functor
// (tensor/functors.h) run by the grid-stride loop of gpu/loops.cuh, for the dtypes the
// CPU kernels (tensor/cpu/pointwise.cpp) accept.
#include "gpu/loops.cuh"
#include "tensor/half.h"

namespace dl::gpu {

namespace {

template <typename T, typename Fn>
struct UnaryValue {
  Fn f;
  __device__ T operator()(T x) const { return T(f(x)); }
};

template <typename T>
struct NotOp {
  __device__ void operator()(char* const (&p)[2], int64_t) const {
    store<bool>(p[0], fn::NotFn{}(load<T>(p[1])));
  }
};

template <typename T>
struct WhereOp {
  __device__ void operator()(char* const (&p)[4], int64_t) const {
    store<T>(p[0], fn::WhereFn{}(load<bool>(p[1]), load<T>(p[2]), load<T>(p[3])));
  }
};

template <typename T>
struct ClampOp {
  fn::ClampFn<T> f;
  __device__ void operator()(char* const (&p)[2], int64_t) const { store<T>(p[0], f(load<T>(p[1]))); }
};

template <typename T>
struct FillOp {
  T v;
  __device__ void operator()(char* const (&p)[1], int64_t) const { store<T>(p[0], v); }
};

template <typename T, typename Fn>
void run_unary(const Tensor& out, const Tensor& x, Fn f, const char* name) {
  const DeviceContext& c = activate(out, name);
  launch_map<T, 2>(c, make_geom<2>({&out, &x}), UnaryValue<T, Fn>{f}, name);
}

}  // namespace

void unary(Op op, const Tensor& out, const Tensor& x) {
  if (op == Op::Logical_not) {
    const DeviceContext& c = activate(out, "logical_not");
    DL_DISPATCH_ALL(x.dtype(), "logical_not",
        launch_elementwise<2>(c, make_geom<2>({&out, &x}), NotOp<scalar_t>{}, "logical_not"));
    return;
  }
  switch (op) {
#define DL_UNARY(Name, lua, Fn, flags)                                              \
    case Op::Name:                                                                  \
      DL_DISPATCH_NUMERIC(x.dtype(), lua, {                                         \
        if constexpr (op_accepts<scalar_t>(flags)) run_unary<scalar_t>(out, x, fn::Fn{}, lua); \
        else fail(ErrorKind::Type, lua, ": not implemented for ", dtype_name(x.dtype())); \
      });                                                                           \
      return;
#include "tensor/ops.def"
    default: break;
  }
  fail(ErrorKind::Internal, "unary: not a unary op: ", op_name(op));
}

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const DeviceContext& c = activate(out, "where");
  DL_DISPATCH_ALL(out.dtype(), "where",
      launch_elementwise<4>(c, make_geom<4>({&out, &cond, &a, &b}), WhereOp<scalar_t>{}, "where"));
}

void clamp(const Tensor& out, const Tensor& x, double lo, double hi) {
  const DeviceContext& c = activate(out, "clamp");
  DL_DISPATCH_NUMERIC(out.dtype(), "clamp", {
    // Bounds outside the dtype's range saturate instead of overflowing.
    ClampOp<scalar_t> f{{fn::convert<scalar_t>(lo), fn::convert<scalar_t>(hi)}};
    launch_elementwise<2>(c, make_geom<2>({&out, &x}), f, "clamp");
  });
}

void fill(const Tensor& out, double value) {
  const DeviceContext& c = activate(out, "fill_");
  DL_DISPATCH_STORAGE(out.dtype(), "fill_",
      launch_elementwise<1>(c, make_geom<1>({&out}), FillOp<scalar_t>{fill_value<scalar_t>(value)}, "fill_"));
}

}  // namespace dl::gpu

// CUDA kernels of the two-input pointwise ops and comparisons, against a tensor or a
// number: each op's functor (tensor/functors.h) run by the grid-stride loop of
// gpu/loops.cuh, for the dtypes the CPU kernels (tensor/cpu/pointwise.cpp) accept. One
// kernel per functor and dtype serves `a op b`, `a op s` and `s op a`.
#include <cmath>

#include "gpu/loops.cuh"

namespace dl::gpu {

namespace {

enum Mode : int { kTensor = 0, kScalarSecond = 1, kScalarFirst = 2 };

template <typename Out, typename T, typename Fn>
struct BinaryOp {
  Fn f;
  T s;
  int mode;
  __device__ void operator()(char* const (&p)[3], int64_t) const {
    const T a = load<T>(p[1]);
    Out r;
    if (mode == kTensor) r = Out(f(a, load<T>(p[2])));
    else if (mode == kScalarSecond) r = Out(f(a, s));
    else r = Out(f(s, a));
    store<Out>(p[0], r);
  }
};

// The same op as values of one dtype (the arithmetic ops: Out == T), for launch_map.
template <typename T, typename Fn>
struct BinaryValue {
  Fn f;
  __device__ T operator()(T a, T b) const { return T(f(a, b)); }
};
template <typename T, typename Fn>
struct ScalarValue {
  Fn f;
  T s;
  bool first;
  __device__ T operator()(T a) const { return first ? T(f(s, a)) : T(f(a, s)); }
};

// An integer tensor compared with a fractional number: in double, as the CPU does.
template <typename T, typename Fn>
struct CompareDoubleOp {
  Fn f;
  double s;
  bool first;
  __device__ void operator()(char* const (&p)[2], int64_t) const {
    const double x = double(load<T>(p[1]));
    store<bool>(p[0], first ? f(s, x) : f(x, s));
  }
};

template <typename Out, typename T, typename Fn>
void run_binary(const Tensor& out, const Tensor& a, const Tensor* b, T s, int mode, Fn f,
                const char* name) {
  const DeviceContext& c = activate(out, name);
  if constexpr (std::is_same_v<Out, T>) {
    if (b) launch_map<T, 3>(c, make_geom<3>({&out, &a, b}), BinaryValue<T, Fn>{f}, name);
    else launch_map<T, 2>(c, make_geom<2>({&out, &a}), ScalarValue<T, Fn>{f, s, mode == kScalarFirst}, name);
  } else {   // comparisons
    launch_elementwise<3>(c, make_geom<3>({&out, &a, b ? b : &a}), BinaryOp<Out, T, Fn>{f, s, mode}, name);
  }
}


}  // namespace

void binary(Op op, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (op) {
#define DL_BINARY(Name, lua, Fn, flags)                                             \
    case Op::Name:                                                                  \
      DL_DISPATCH_ALL(a.dtype(), lua, {                                             \
        if constexpr (op_accepts<scalar_t>(flags))                                  \
          run_binary<scalar_t, scalar_t>(out, a, &b, scalar_t{}, kTensor, fn::Fn{}, lua); \
        else fail(ErrorKind::Type, lua, ": not implemented for ", dtype_name(a.dtype())); \
      });                                                                           \
      return;
#define DL_COMPARE(Name, lua, Fn)                                                   \
    case Op::Name:                                                                  \
      DL_DISPATCH_ALL(a.dtype(), lua,                                               \
          run_binary<bool, scalar_t>(out, a, &b, scalar_t{}, kTensor, fn::Fn{}, lua)); \
      return;
#include "tensor/ops.def"
    default: break;
  }
  fail(ErrorKind::Internal, "binary: not a binary op: ", op_name(op));
}

void binary_scalar(Op op, const Tensor& out, const Tensor& a, double s, bool first) {
  const int mode = first ? kScalarFirst : kScalarSecond;
  switch (op) {
#define DL_BINARY(Name, lua, Fn, flags)                                             \
    case Op::Name:                                                                  \
      DL_DISPATCH_ALL(a.dtype(), lua, {                                             \
        if constexpr (op_accepts<scalar_t>(flags))                                  \
          run_binary<scalar_t, scalar_t>(out, a, nullptr, fn::scalar_operand<scalar_t>(s), mode, fn::Fn{}, lua); \
        else fail(ErrorKind::Type, lua, ": not implemented for ", dtype_name(a.dtype())); \
      });                                                                           \
      return;
#define DL_COMPARE(Name, lua, Fn)                                                   \
    case Op::Name:                                                                  \
      if (is_floating(a.dtype()) || holds_whole(a.dtype(), s)) {                           \
        DL_DISPATCH_ALL(a.dtype(), lua,                                             \
          run_binary<bool, scalar_t>(out, a, nullptr, fn::convert<scalar_t>(s), mode, fn::Fn{}, lua)); \
      } else {                                                                      \
        const DeviceContext& c = activate(out, lua);                                \
        DL_DISPATCH_INTEGRAL_OR_BOOL(a.dtype(), lua,                                \
          launch_elementwise<2>(c, make_geom<2>({&out, &a}),                        \
                                CompareDoubleOp<scalar_t, fn::Fn>{fn::Fn{}, s, first}, lua)); \
      }                                                                             \
      return;
#include "tensor/ops.def"
    default: break;
  }
  fail(ErrorKind::Internal, "binary: not a binary op: ", op_name(op));
}

}  // namespace dl::gpu

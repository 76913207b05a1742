// Front ends of the pointwise ops: argument checks, promotion, broadcasting, output
// allocation. The arithmetic itself is in the device kernels (tensor/cpu/, gpu/).
#include <cmath>
#include <iomanip>
#include <sstream>

#include "tensor/backend.h"
#include "tensor/functors.h"
#include "tensor/observe.h"
#include "tensor/small.h"
#include "tensor/small_sizes.h"

namespace dl {

// ---- the op table -----------------------------------------------------------------

namespace {
const OpInfo kOpInfo[] = {
#define DL_OP(Name, lua, arity, flags) {Op::Name, #Name, lua, arity, flags, OpFamily::Other},
#define DL_UNARY(Name, lua, Fn, flags) {Op::Name, #Name, lua, 1, flags, OpFamily::Unary},
#define DL_BINARY(Name, lua, Fn, flags) {Op::Name, #Name, lua, 2, flags, OpFamily::Binary},
#define DL_COMPARE(Name, lua, Fn) {Op::Name, #Name, lua, 2, 0, OpFamily::Compare},
#define DL_REDUCE(Name, lua, flags) {Op::Name, #Name, lua, 1, flags, OpFamily::Reduce},
#include "tensor/ops.def"
};
static_assert(sizeof(kOpInfo) / sizeof(kOpInfo[0]) == size_t(kNumOps));
}  // namespace

const OpInfo& op_info(Op op) { return kOpInfo[static_cast<int>(op)]; }

// ---- promotion ----------------------------------------------------------------------

Scalar Scalar::from_lua(double x) {
  Scalar s;
  s.v = x;
  s.kind = (x == std::floor(x) && x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? ScalarKind::Int
                                                                                            : ScalarKind::Float;
  return s;
}

namespace {
int category(DType t) { return t == DType::Bool ? 0 : (is_floating(t) ? 2 : 1); }
int category(ScalarKind k) { return k == ScalarKind::Bool ? 0 : (k == ScalarKind::Float ? 2 : 1); }
}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  bool a0 = a.dim() == 0, b0 = b.dim() == 0;
  if (a0 == b0) return promote(a.dtype(), b.dtype());
  const Tensor& hi = a0 ? b : a;  // the dimensioned one
  const Tensor& lo = a0 ? a : b;  // the 0-dim one
  if (category(lo.dtype()) > category(hi.dtype())) return lo.dtype();
  return hi.dtype();
}

DType result_type(const Tensor& a, Scalar s) {
  if (category(s.kind) > category(a.dtype()))
    return s.kind == ScalarKind::Float ? default_float() : DType::Int64;
  return a.dtype();
}

// ---- helpers ------------------------------------------------------------------------

namespace {

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  DL_CHECK(a.device() == b.device(), op, ": expected tensors on the same device, got ",
           a.device(), " and ", b.device());
}

// The dtype an op computes in, given the promoted input dtype.
DType compute_dtype(Op op, DType t) {
  unsigned f = op_info(op).flags;
  DL_CHECK_KIND(Type, !(t == DType::Bool && (f & kNoBool)), op_name(op),
                ": not supported for bool tensors", op == Op::Sub ? " (logical_xor is a - b of bools)" : "");
  DL_CHECK_KIND(Type, !((f & kIntOnly) && is_floating(t)), op_name(op),
                ": expected integer or bool tensors, got ", dtype_name(t));
  if ((f & kFloatOnly) && !is_floating(t)) return default_float();
  return compute_type(t);
}

Tensor to_dtype(const Tensor& x, DType t) { return x.dtype() == t ? x : cast(x, t); }

// A result computed in float32 for operands of a half dtype goes back to that dtype
// (Note [Half-precision storage] in tensor/half.h).
Tensor stored(const Tensor& out, DType storage) {
  return is_half(storage) && out.dtype() != storage ? cast(out, storage) : out;
}

// A whole number beside an integer tensor is taken modulo its width (fn::scalar_operand):
// 256 beside uint8 divides by 0.
bool wraps_to_zero(DType t, double v) {
  switch (t) {
    case DType::UInt8: return fn::scalar_operand<uint8_t>(v) == 0;
    case DType::Int32: return fn::scalar_operand<int32_t>(v) == 0;
    case DType::Int64: return fn::scalar_operand<int64_t>(v) == 0;
    default: return v == 0;
  }
}

// An integer tensor to a number's power, as PyTorch's: not a negative one, and not one the
// dtype cannot hold (a wrapped exponent would be nonsense).
void check_int_exponent(DType t, double v) {
  DL_CHECK(!(v < 0), "pow: integers to negative integer powers are not allowed (got ", v, ")");
  DL_CHECK(holds_whole(t, v), "pow: the exponent ", v, " does not fit the tensor's dtype ", dtype_name(t));
}

// The ops that divide: an integer divisor of 0 is an error where they compute in an
// integer dtype (in a float one they give inf or NaN, as PyTorch's).
bool divides(Op op) { return op == Op::Mod || op == Op::Fmod || op == Op::Floor_divide; }

// b, a divisor of op computing in ct, holds no 0.
void check_int_divisor(Op op, DType ct, const Tensor& b) {
  if (!divides(op) || is_floating(ct)) return;
  Tensor zero = compare(Op::Eq, b, Scalar::integer(0));
  DL_CHECK(reduce(Op::Any, zero, {}, false).item() == 0, op_name(op),
           ": integer division by zero");
}

// Note [Small same-shape ops]
// A pointwise op on a few host floats is mostly front end: promotion, broadcasting,
// the backend's dispatch and its own layout checks were 450 of the 780 instructions of
// a 16-element product (callgrind, bench/cases.lua's chain, whose forward and backward
// passes are such ops). Operands of one float dtype and one shape, contiguous, on the
// host and at most kSmallElements long need none of it: the result has their shape and
// dtype (promotion and broadcasting change nothing), and dl::small's loop computes it as
// the cpu backend would (tensor/cpu/pointwise.cpp takes that loop for them too), so the
// bits are the same whichever path ran.
constexpr int64_t kSmallElements = sizes::kSmallElements;   // Note [The paths of a + b]

bool small_host_float(const Tensor& x) {
  return (x.dtype() == DType::Float32 || x.dtype() == DType::Float64) && x.numel() <= kSmallElements &&
         x.is_contiguous() && x.device().is_cpu();
}

}  // namespace

// ---- unary -------------------------------------------------------------------------

namespace {
Tensor unary_impl(Op op, const Tensor& x) {
  const OpInfo& info = op_info(op);
  DL_ASSERT(info.family == OpFamily::Unary);
  if (op != Op::Logical_not && small_host_float(x)) {
    Tensor out = empty_like(x, x.dtype());
    if (small::unary(op, x.dtype(), out.raw_data(), x.raw_data(), x.numel())) return out;
  }
  DType in = x.dtype();
  if (op == Op::Bitwise_not && in == DType::Bool) return unary_impl(Op::Logical_not, x);
  if (op == Op::Logical_not) {
    Tensor out = empty(x.shape(), DType::Bool, x.device(), info.lua_name);
    backend_for(x.device(), info.lua_name).unary(op, out, x);
    return out;
  }
  if (in == DType::Bool && !(info.flags & kFloatOnly))
    fail(ErrorKind::Type, info.lua_name, ": not supported for bool tensors");
  if ((info.flags & kIntOnly) && is_floating(in))
    fail(ErrorKind::Type, info.lua_name, ": expected integer or bool tensors, got ", dtype_name(in));
  DType ct = compute_dtype(op, in);
  Tensor xin = to_dtype(x, ct);
  Tensor out = empty(x.shape(), ct, x.device(), info.lua_name);
  backend_for(x.device(), info.lua_name).unary(op, out, xin);
  return stored(out, in);
}
}  // namespace

Tensor unary(Op op, const Tensor& x) {
  return observed([&] { return unary_impl(op, x); },
                  [&](Observed& o) { o.fn = Fn::Unary; o.op = op; o.in[0] = &x; o.nin = 1; });
}

// ---- binary ------------------------------------------------------------------------

namespace {
Tensor binary_impl(Op op, const Tensor& a, const Tensor& b) {
  const OpInfo& info = op_info(op);
  DL_ASSERT(info.family == OpFamily::Binary);
  if (a.dtype() == b.dtype() && a.shape() == b.shape() && small_host_float(a) && small_host_float(b)) {
    Tensor out = empty_like(a, a.dtype());
    if (small::binary(op, a.dtype(), out.raw_data(), a.raw_data(), 1, b.raw_data(), 1, a.numel()))
      return out;
  }
  check_same_device(a, b, info.lua_name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), info.lua_name);
  const DType rt = result_type(a, b);
  DType ct = compute_dtype(op, rt);
  check_int_divisor(op, ct, b);
  Tensor out = empty(shape, ct, a.device(), info.lua_name);
  backend_for(a.device(), info.lua_name).binary(op, out, to_dtype(a, ct), to_dtype(b, ct));
  return stored(out, rt);
}
}  // namespace

Tensor binary(Op op, const Tensor& a, const Tensor& b) {
  return observed([&] { return binary_impl(op, a, b); },
                  [&](Observed& o) { o.fn = Fn::Binary; o.op = op; o.in[0] = &a; o.in[1] = &b; o.nin = 2; });
}

namespace {
Tensor binary_scalar_impl(Op op, const Tensor& a, Scalar s, bool scalar_first) {
  const OpInfo& info = op_info(op);
  DL_ASSERT(info.family == OpFamily::Binary);
  if (small_host_float(a)) {
    Tensor out = empty_like(a, a.dtype());
    if (small::binary_scalar(op, a.dtype(), out.raw_data(), a.raw_data(), s.v, scalar_first, a.numel()))
      return out;
  }
  const DType rt = result_type(a, s);
  DType ct = compute_dtype(op, rt);
  if (divides(op) && !scalar_first && !is_floating(ct))
    DL_CHECK(!wraps_to_zero(ct, s.v), info.lua_name, ": integer division by zero");
  if (op == Op::Pow && !scalar_first && !is_floating(ct)) check_int_exponent(ct, s.v);
  if (scalar_first) check_int_divisor(op, ct, a);
  Tensor out = empty(a.shape(), ct, a.device(), info.lua_name);
  backend_for(a.device(), info.lua_name).binary_scalar(op, out, to_dtype(a, ct), s.v, scalar_first);
  return stored(out, rt);
}
}  // namespace

Tensor binary(Op op, const Tensor& a, Scalar s, bool scalar_first) {
  return observed([&] { return binary_scalar_impl(op, a, s, scalar_first); },
                  [&](Observed& o) { o.fn = Fn::BinaryScalar; o.op = op; o.in[0] = &a; o.nin = 1; o.s = s.v; o.skind = s.kind; o.first = scalar_first; });
}

// An in-place op's target must not have elements sharing memory (an expanded view: a
// dim of stride 0 and size > 1): each would be written once per element that reads it,
// x:expand(3, 2):mul_(2) multiplying by 8. PyTorch's check (has_internal_overlap) too.
static void check_no_overlap(const Tensor& t, const char* op, const char* suffix = "") {
  if (t.numel() == 0) return;
  for (int d = 0; d < t.dim(); ++d)
    DL_CHECK(t.stride(d) != 0 || t.size(d) <= 1, op, suffix, ": the in-place target has elements sharing memory "
             "(an expanded view, shape ", t.shape(), "); clone() it first");
}

void binary_(Op op, Tensor& a, const Tensor& b) {
  const OpInfo& info = op_info(op);
  check_no_overlap(a, info.lua_name, "_");
  observe_write(a);
  check_same_device(a, b, info.lua_name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), info.lua_name);
  DL_CHECK(shape == a.shape(), info.lua_name, "_: cannot broadcast shape ", b.shape(),
           " into the in-place target of shape ", a.shape());
  const DType rt = result_type(a, b);
  DType ct = compute_dtype(op, rt);
  DL_CHECK_KIND(Type, can_cast(is_half(rt) ? rt : ct, a.dtype()), info.lua_name, "_: result dtype ",
                dtype_name(is_half(rt) ? rt : ct), " cannot be stored in the in-place target of dtype ",
                dtype_name(a.dtype()));
  check_int_divisor(op, ct, b);
  if (is_half(a.dtype()) || compute_type(a.dtype()) != ct) {   // computed apart, then cast into a
    backend_for(a.device(), info.lua_name).copy(a, binary_impl(op, a, b));
  } else {
    backend_for(a.device(), info.lua_name).binary(op, a, a, to_dtype(b, ct));
  }
  a.storage().bump_version();
}

void binary_(Op op, Tensor& a, Scalar s) {
  const OpInfo& info = op_info(op);
  check_no_overlap(a, info.lua_name, "_");
  observe_write(a);
  const DType rt = result_type(a, s);
  DType ct = compute_dtype(op, rt);
  DL_CHECK_KIND(Type, can_cast(is_half(rt) ? rt : ct, a.dtype()), info.lua_name, "_: result dtype ",
                dtype_name(is_half(rt) ? rt : ct), " cannot be stored in the in-place target of dtype ",
                dtype_name(a.dtype()));
  if (divides(op) && !is_floating(ct)) DL_CHECK(!wraps_to_zero(ct, s.v), info.lua_name, ": integer division by zero");
  if (op == Op::Pow && !is_floating(ct)) check_int_exponent(ct, s.v);
  if (is_half(a.dtype()) || compute_type(a.dtype()) != ct) {
    backend_for(a.device(), info.lua_name).copy(a, binary_scalar_impl(op, a, s, false));
  } else {
    backend_for(a.device(), info.lua_name).binary_scalar(op, a, a, s.v, false);
  }
  a.storage().bump_version();
}

// ---- comparisons ---------------------------------------------------------------------

namespace {
Tensor compare_impl(Op op, const Tensor& a, const Tensor& b) {
  const OpInfo& info = op_info(op);
  DL_ASSERT(info.family == OpFamily::Compare);
  check_same_device(a, b, info.lua_name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), info.lua_name);
  DType ct = compute_type(result_type(a, b));
  Tensor out = empty(shape, DType::Bool, a.device(), info.lua_name);
  backend_for(a.device(), info.lua_name).binary(op, out, to_dtype(a, ct), to_dtype(b, ct));
  return out;
}
}  // namespace

Tensor compare(Op op, const Tensor& a, const Tensor& b) {
  return observed([&] { return compare_impl(op, a, b); },
                  [&](Observed& o) { o.fn = Fn::Compare; o.op = op; o.in[0] = &a; o.in[1] = &b; o.nin = 2; });
}

namespace {
Tensor compare_scalar_impl(Op op, const Tensor& a, Scalar s, bool scalar_first) {
  const OpInfo& info = op_info(op);
  DL_ASSERT(info.family == OpFamily::Compare);
  DType ct = compute_type(result_type(a, s));
  Tensor out = empty(a.shape(), DType::Bool, a.device(), info.lua_name);
  backend_for(a.device(), info.lua_name).binary_scalar(op, out, to_dtype(a, ct), s.v, scalar_first);
  return out;
}
}  // namespace

Tensor compare(Op op, const Tensor& a, Scalar s, bool scalar_first) {
  return observed([&] { return compare_scalar_impl(op, a, s, scalar_first); },
                  [&](Observed& o) { o.fn = Fn::CompareScalar; o.op = op; o.in[0] = &a; o.nin = 1; o.s = s.v; o.skind = s.kind; o.first = scalar_first; });
}

// ---- where, clamp, masked_fill ---------------------------------------------------------

static Tensor where_impl(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_device(cond, a, "where");
  check_same_device(a, b, "where");
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  const DType rt = result_type(a, b), ct = compute_type(rt);
  Tensor out = empty(shape, ct, a.device(), "where");
  backend_for(a.device(), "where").where(out, to_dtype(cond, DType::Bool), to_dtype(a, ct), to_dtype(b, ct));
  return stored(out, rt);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return observed_other("where", [&] { return where_impl(cond, a, b); },
                        [&](Observed& o, const Tensor&) { o.ins = {&cond, &a, &b}; });
}

static Tensor clamp_impl(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  DL_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  DL_CHECK_KIND(Type, x.dtype() != DType::Bool, "clamp: not supported for bool tensors");
  double l = lo ? *lo : -INFINITY, h = hi ? *hi : INFINITY;
  DType ct = compute_type(x.dtype());
  if (!is_floating(ct) && ((lo && *lo != std::floor(*lo)) || (hi && *hi != std::floor(*hi))))
    ct = default_float();
  Tensor out = empty(x.shape(), ct, x.device(), "clamp");
  backend_for(x.device(), "clamp").clamp(out, to_dtype(x, ct), l, h);
  return stored(out, x.dtype());
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  return observed_other("clamp", [&] { return clamp_impl(x, lo, hi); }, [&](Observed& o, const Tensor&) {
    o.ins = {&x};
    o.ints = {lo.has_value(), hi.has_value()};
    o.nums = {lo.value_or(0), hi.value_or(0)};
  });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  DL_CHECK_KIND(Type, mask.dtype() == DType::Bool, "masked_fill: expected a bool mask, got ",
                dtype_name(mask.dtype()));
  Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  DL_CHECK(shape == x.shape(), "masked_fill: mask of shape ", mask.shape(),
           " cannot be broadcast to the tensor's shape ", x.shape());
  check_fits("masked_fill", value.v, x.dtype());
  Tensor v = full(Shape{}, value, x.dtype(), x.device());
  return where(mask, v, x);
}

// ---- conversion and copies ----------------------------------------------------------------

namespace {
Tensor cast_impl(const Tensor& x, DType dtype, bool copy) {
  if (x.dtype() == dtype && !copy) return x;
  Tensor out = empty(x.shape(), dtype, x.device(), "to");
  backend_for(x.device(), "to").copy(out, x);
  return out;
}
}  // namespace

Tensor cast(const Tensor& x, DType dtype, bool copy) {
  return observed([&] { return cast_impl(x, dtype, copy); },
                  [&](Observed& o) { o.fn = copy ? Fn::Clone : Fn::Cast; o.in[0] = &x; o.nin = 1; o.dtype = dtype; });
}

void copy_(Tensor& dst, const Tensor& src) {
  check_no_overlap(dst, "copy_");
  observe_write(dst);
  Shape shape = broadcast_shapes(dst.shape(), src.shape(), "copy_");
  DL_CHECK(shape == dst.shape(), "copy_: cannot broadcast shape ", src.shape(),
           " into shape ", dst.shape());
  if (dst.device() != src.device()) {
    // Cross-device copies go through the non-cpu side's backend.
    Device d = dst.device().is_cpu() ? src.device() : dst.device();
    backend_for(d, "copy_").copy(dst, src);
  } else {
    backend_for(dst.device(), "copy_").copy(dst, src);
  }
  dst.storage().bump_version();
}

void check_fits(const char* op, double v, DType dtype) {
  bool ok = true;
  switch (dtype) {
    case DType::Bool:
    case DType::Float64: break;
    case DType::Float32: ok = !std::isfinite(v) || std::fabs(v) <= 3.4028234663852886e38; break;
    case DType::BFloat16: ok = !std::isfinite(v) || std::fabs(v) <= 3.3895313892515355e38; break;
    case DType::Float16: ok = !std::isfinite(v) || std::fabs(v) <= 65504.0; break;
    case DType::UInt8: ok = v >= -255.0 && v <= 255.0 && (v >= 0 || v == std::floor(v)); break;
    case DType::Int32: ok = v >= -2147483648.0 && v <= 2147483647.0; break;
    case DType::Int64: ok = v >= -9223372036854775808.0 && v < 9223372036854775808.0; break;
  }
  if (ok) return;
  std::ostringstream shown;
  if (std::isnan(v)) shown << "nan";
  else shown << std::setprecision(17) << v;
  fail(ErrorKind::Value, op, ": the value ", shown.str(), " cannot be converted to ", dtype_name(dtype),
       " without overflow");
}

void fill_(Tensor& dst, Scalar value) {
  check_fits("fill_", value.v, dst.dtype());
  observe_write(dst);
  backend_for(dst.device(), "fill_").fill(dst, value.v);
  dst.storage().bump_version();
}

Tensor contiguous(const Tensor& x) {
  return observed([&] { return x.is_contiguous() ? x : clone(x); },
                  [&](Observed& o) { o.fn = Fn::Contiguous; o.in[0] = &x; o.nin = 1; });
}

namespace {
Tensor clone_impl(const Tensor& x) {
  Tensor out = empty(x.shape(), x.dtype(), x.device(), "clone");
  backend_for(x.device(), "clone").copy(out, x);
  return out;
}
}  // namespace

Tensor clone(const Tensor& x) {
  return observed([&] { return clone_impl(x); },
                  [&](Observed& o) { o.fn = Fn::Clone; o.in[0] = &x; o.nin = 1; o.dtype = x.dtype(); });
}

}  // namespace dl

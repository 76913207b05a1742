// Front end of matmul: PyTorch's rank rules, promotion, batch broadcasting and the
// empty cases. The product itself is Backend::matmul (OpenBLAS on the CPU,
// tensor/cpu/matmul.cpp).
//
//   matmul(a (3,), b (3,))          -> ()          dot product
//   matmul(a (2, 3), b (3,))        -> (2,)        b is a column, then dropped
//   matmul(a (3,), b (3, 4))        -> (4,)        a is a row, then dropped
//   matmul(a (5, 1, 2, 3), b (4, 3, 6)) -> (5, 4, 2, 6)   batch dims broadcast
//
// Nothing is copied here for operands already in the compute dtype: 1-D operands
// become matrices by a view, and broadcast batch dims are left to the kernel, which
// reads them in place through a zero stride.
#include <algorithm>

#include "tensor/backend.h"
#include "tensor/observe.h"
#include "tensor/half_ops.h"

namespace dl {

namespace {
Tensor matmul_impl(const Tensor& a, const Tensor& b) {
  // Half operands multiply natively where the backend can (both of one half dtype),
  // else in float32 (Note [Half-precision storage]); under autocast, float32 operands
  // on such a backend become half (Note [Autocast] in tensor/half_ops.h).
  const bool native_half = !a.device().is_cpu() && a.device() == b.device() &&
                           backend_for(a.device(), "matmul").half_matmul;
  if (t_autocast.enabled && native_half && a.dtype() == DType::Float32 && b.dtype() == DType::Float32)
    return matmul_impl(cast(a, t_autocast.dtype), cast(b, t_autocast.dtype));
  if (any_half({&a, &b}) && !(native_half && a.dtype() == b.dtype()))
    return narrowed(matmul_impl(widened(a), widened(b)), storage_of({&a, &b}));
  DL_CHECK(a.device() == b.device(), "matmul: expected tensors on the same device, got ", a.device(),
           " and ", b.device());
  DL_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got shapes ",
           a.shape(), " and ", b.shape());
  DL_CHECK_KIND(Type, a.dtype() != DType::Bool && b.dtype() != DType::Bool,
                "matmul: not supported for bool tensors (got ", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()), ")");
  // result_type of two dimensioned tensors is plain promotion.
  const DType ct = promote(a.dtype(), b.dtype());
  const int da = a.dim(), db = b.dim();
  const int64_t M = da == 1 ? 1 : a.size(da - 2);
  const int64_t K = a.size(da - 1);
  const int64_t N = db == 1 ? 1 : b.size(db - 1);
  DL_CHECK(K == (db == 1 ? b.size(0) : b.size(db - 2)), "matmul: shapes ", a.shape(), " and ",
           b.shape(), " cannot be multiplied");

  // The batch dims of both, broadcast; `full` is (batch..., M, N), the result drops the
  // M of a 1-D a and the N of a 1-D b.
  const int na = std::max(da - 2, 0), nb = std::max(db - 2, 0), nbatch = std::max(na, nb);
  Shape full;
  for (int i = 0; i < nbatch; ++i) {
    int ia = i - (nbatch - na), ib = i - (nbatch - nb);
    int64_t sa = ia >= 0 ? a.size(ia) : 1, sb = ib >= 0 ? b.size(ib) : 1;
    DL_CHECK(sa == sb || sa == 1 || sb == 1, "matmul: the batch dimensions of shapes ", a.shape(),
             " and ", b.shape(), " cannot be broadcast");
    full.push_back(sa == 1 ? sb : sa);
  }
  Shape result = full;
  if (da >= 2) result.push_back(M);
  if (db >= 2) result.push_back(N);
  full.push_back(M);
  full.push_back(N);

  Tensor out = empty(result, ct, a.device(), "matmul");
  if (out.numel() == 0) return out;
  if (K == 0) {  // a sum of no products
    backend_for(out.device(), "matmul").fill(out, 0);
    return out;
  }
  const Backend& be = backend_for(a.device(), "matmul");
  DL_CHECK_KIND(NotImplemented, be.matmul != nullptr, "matmul: not implemented for ", be.name);

  // A 1-D a is the row (1, K), a 1-D b the column (K, 1); the unused stride of the
  // size-1 dim is chosen so that a contiguous vector stays a contiguous matrix.
  Tensor am = da == 1 ? make_view(a, Shape{1, K}, Shape{K * a.stride(0), a.stride(0)}, a.offset()) : a;
  Tensor bm = db == 1 ? make_view(b, Shape{K, 1}, Shape{b.stride(0), 1}, b.offset()) : b;
  if (am.dtype() != ct) am = cast(am, ct);
  if (bm.dtype() != ct) bm = cast(bm, ct);
  Tensor om = result.size() == full.size() ? out : make_view(out, full, contiguous_strides(full), 0);
  be.matmul(om, am, bm);
  return out;
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  return observed([&] { return matmul_impl(a, b); },
                  [&](Observed& o) { o.fn = Fn::MatMul; o.op = Op::MatMul; o.in[0] = &a; o.in[1] = &b; o.nin = 2; });
}

}  // namespace dl

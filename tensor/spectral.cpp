// The Fourier transform's front end (tensor/ops.h): Note [Complex values as pairs] in
// tensor/fft.h. Kernels: tensor/cpu/fft.cpp and gpu/fft.cu.
#include <string>

#include "tensor/backend.h"
#include "tensor/half_ops.h"
#include "tensor/observe.h"

namespace dl {

namespace {
Tensor fft_c2c_impl(const Tensor& x, bool inverse) {
  const char* name = "fft";
  if (x.dim() < 2 || x.size(x.dim() - 1) != 2)
    fail(ErrorKind::Value, name, ": expected complex values as (real, imaginary) pairs in a last dim of 2, got shape ",
         x.shape());
  if (!is_floating(x.dtype()))
    fail(ErrorKind::Type, name, ": expected a floating-point tensor of pairs, got ", dtype_name(x.dtype()));
  if (x.size(x.dim() - 2) == 0) fail(ErrorKind::Value, name, ": a transform of length 0 (the dim transformed is empty)");
  if (is_half(x.dtype())) return narrowed(fft_c2c_impl(widened(x), inverse), x.dtype());
  Tensor out = empty(x.shape(), x.dtype(), x.device(), name);
  if (x.numel() == 0) return out;
  kernel(x.device(), &Backend::fft_c2c, name)(out, contiguous(x), inverse);
  return out;
}
}  // namespace

Tensor fft_c2c(const Tensor& x, bool inverse) {
  return observed_other("fft_c2c", [&] { return fft_c2c_impl(x, inverse); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {inverse}; });
}

}  // namespace dl

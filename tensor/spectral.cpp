// The Fourier transform's front ends (tensor/ops.h): Note [Complex values as pairs] in
// tensor/fft.h. Kernels: tensor/cpu/fft.cpp and gpu/fft.cu.
#include <string>

#include "tensor/backend.h"
#include "tensor/half_ops.h"
#include "tensor/observe.h"

namespace dl {

namespace {
// A tensor of complex values: a last dim of 2 (real, imaginary), floating point.
void check_pairs(const char* name, const Tensor& z) {
  if (z.dim() < 2 || z.size(z.dim() - 1) != 2)
    fail(ErrorKind::Value, name, ": expected complex values as (real, imaginary) pairs in a last dim of 2, got shape ",
         z.shape());
  if (!is_floating(z.dtype()))
    fail(ErrorKind::Type, name, ": expected a floating-point tensor of pairs, got ", dtype_name(z.dtype()));
}

Tensor fft_c2c_impl(const Tensor& x, bool inverse) {
  const char* name = "fft";
  check_pairs(name, x);
  if (x.size(x.dim() - 2) == 0) fail(ErrorKind::Value, name, ": a transform of length 0 (the dim transformed is empty)");
  if (is_half(x.dtype())) return narrowed(fft_c2c_impl(widened(x), inverse), x.dtype());
  Tensor out = empty(x.shape(), x.dtype(), x.device(), name);
  if (x.numel() == 0) return out;
  kernel(x.device(), &Backend::fft_c2c, name)(out, contiguous(x), inverse);
  return out;
}
// A real signal's checks, and its bins' (the count given by n).
void check_weight(const char* name, int64_t weight) {
  if (weight != 1 && weight != 2) fail(ErrorKind::Value, name, ": the middle bins' weight must be 1 or 2, got ", weight);
}

Tensor r2c_impl(const Tensor& x, int64_t weight) {
  const char* name = "rfft";
  check_weight(name, weight);
  if (x.dim() < 1) fail(ErrorKind::Value, name, ": expected a signal of at least 1 dim, got a 0-dim tensor");
  if (!is_floating(x.dtype())) fail(ErrorKind::Type, name, ": expected a floating-point signal, got ", dtype_name(x.dtype()));
  const int64_t n = x.size(x.dim() - 1);
  if (n == 0) fail(ErrorKind::Value, name, ": a transform of length 0 (the dim transformed is empty)");
  if (is_half(x.dtype())) return narrowed(r2c_impl(widened(x), weight), x.dtype());
  Shape s = x.shape();
  s[s.size() - 1] = n / 2 + 1;
  s.push_back(2);
  Tensor out = empty(s, x.dtype(), x.device(), name);
  if (out.numel() == 0) return out;
  kernel(x.device(), &Backend::fft_r2c, name)(out, contiguous(x), weight);
  return out;
}

Tensor c2r_impl(const Tensor& y, int64_t n, int64_t weight) {
  const char* name = "irfft";
  check_weight(name, weight);
  check_pairs(name, y);
  if (n < 1) fail(ErrorKind::Value, name, ": the signal's length must be at least 1, got ", n);
  if (y.size(y.dim() - 2) != n / 2 + 1)
    fail(ErrorKind::Value, name, ": a signal of ", n, " values has ", n / 2 + 1, " bins, got ", y.size(y.dim() - 2));
  if (is_half(y.dtype())) return narrowed(c2r_impl(widened(y), n, weight), y.dtype());
  Shape s = y.shape();
  s.resize(s.size() - 1);
  s[s.size() - 1] = n;
  Tensor out = empty(s, y.dtype(), y.device(), name);
  if (out.numel() == 0) return out;
  kernel(y.device(), &Backend::fft_c2r, name)(out, contiguous(y), weight);
  return out;
}
}  // namespace

Tensor fft_r2c(const Tensor& x, int64_t weight) {
  return observed_other("fft_r2c", [&] { return r2c_impl(x, weight); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {weight}; });
}

Tensor fft_c2r(const Tensor& y, int64_t n, int64_t weight) {
  return observed_other("fft_c2r", [&] { return c2r_impl(y, n, weight); },
                        [&](Observed& o, const Tensor&) { o.ins = {&y}; o.ints = {n, weight}; });
}

Tensor fft_c2c(const Tensor& x, bool inverse) {
  return observed_other("fft_c2c", [&] { return fft_c2c_impl(x, inverse); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {inverse}; });
}

}  // namespace dl

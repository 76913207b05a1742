// Tensors made from nothing: constants, ranges, identity, host values, foreign memory.
#include <cmath>

#include "tensor/backend.h"
#include "tensor/cpu/loops.h"
#include "tensor/functors.h"
#include "tensor/observe.h"
#include "tensor/half.h"

namespace dl {

namespace {
Tensor zeros_impl(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device, "zeros");
  backend_for(device, "zeros").fill(t, 0);
  return t;
}
}  // namespace

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  return observed([&] { return zeros_impl(shape, dtype, device); },
                  [&](Observed& o) { o.fn = Fn::Full; o.s = 0; o.shape = shape; o.dtype = dtype; o.device = device; });
}

namespace {
Tensor ones_impl(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device, "ones");
  backend_for(device, "ones").fill(t, 1);
  return t;
}
}  // namespace

Tensor ones(const Shape& shape, DType dtype, Device device) {
  return observed([&] { return ones_impl(shape, dtype, device); },
                  [&](Observed& o) { o.fn = Fn::Full; o.s = 1; o.shape = shape; o.dtype = dtype; o.device = device; });
}

namespace {
Tensor full_impl(const Shape& shape, Scalar value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device, "full");
  backend_for(device, "full").fill(t, value.v);
  return t;
}
}  // namespace

Tensor full(const Shape& shape, Scalar value, DType dtype, Device device) {
  return observed([&] { return full_impl(shape, value, dtype, device); },
                  [&](Observed& o) { o.fn = Fn::Full; o.s = value.v; o.shape = shape; o.dtype = dtype; o.device = device; });
}

namespace {
// Fills a host tensor from index -> value, then moves it to `device`.
template <typename F>
Tensor generate(const Shape& shape, DType dtype, Device device, const char* op, F f) {
  Tensor t = empty(shape, dtype, Device{}, op);
  DL_DISPATCH_STORAGE(dtype, op, {
    scalar_t* p = t.data<scalar_t>();
    int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = fill_value<scalar_t>(f(i));
  });
  if (device.is_cpu()) return t;
  Tensor d = empty(shape, dtype, device, op);
  copy_(d, t);
  return d;
}
}  // namespace

static Tensor arange_impl(double start, double stop, double step, DType dtype, Device device) {
  DL_CHECK(step != 0 && std::isfinite(step), "arange: step must be non-zero and finite, got ", step);
  DL_CHECK(std::isfinite(start) && std::isfinite(stop), "arange: start and stop must be finite");
  if (is_integral(dtype)) {
    // As PyTorch's: an integer range takes its bounds and step in the dtype first (toward
    // zero), so that arange(-3.5, 2, 1) in int64 is -3 .. 1 with no value twice.
    const double whole = std::trunc(step);
    DL_CHECK(whole != 0, "arange: step ", step, " truncates to 0 in ", dtype_name(dtype), " (an integer range takes whole steps)");
    start = std::trunc(start), stop = std::trunc(stop), step = whole;
  }
  DL_CHECK((stop - start) / step >= 0 || start == stop, "arange: step ", step,
           " has the wrong sign for the range [", start, ", ", stop, ")");
  double count = std::ceil((stop - start) / step);
  DL_CHECK(count < 9e15, "arange: range [", start, ", ", stop, ") by ", step, " is too large");
  int64_t n = count > 0 ? int64_t(count) : 0;
  return generate(Shape{n}, dtype, device, "arange", [=](int64_t i) { return start + double(i) * step; });
}

Tensor arange(double start, double stop, double step, DType dtype, Device device) {
  return observed_other("constant", [&] { return arange_impl(start, stop, step, dtype, device); }, [](Observed&, const Tensor&) {});
}

static Tensor linspace_impl(double start, double stop, int64_t n, DType dtype, Device device) {
  DL_CHECK(n >= 0, "linspace: number of points must be non-negative, got ", n);
  if (is_integral(dtype)) {
    start = std::trunc(start), stop = std::trunc(stop);   // (PyTorch's, as arange)
    check_fits("linspace", start, dtype);                 // the points lie between the two
    check_fits("linspace", stop, dtype);
  }
  double step = n > 1 ? (stop - start) / double(n - 1) : 0;
  // Symmetric evaluation, as PyTorch does, so both ends are exact.
  return generate(Shape{n}, dtype, device, "linspace", [=](int64_t i) {
    if (n == 1) return start;
    return i < n / 2 ? start + step * double(i) : stop - step * double(n - 1 - i);
  });
}

Tensor linspace(double start, double stop, int64_t n, DType dtype, Device device) {
  return observed_other("constant", [&] { return linspace_impl(start, stop, n, dtype, device); }, [](Observed&, const Tensor&) {});
}

static Tensor eye_impl(int64_t n, int64_t m, DType dtype, Device device) {
  DL_CHECK(n >= 0 && m >= 0, "eye: sizes must be non-negative, got ", n, " and ", m);
  return generate(Shape{n, m}, dtype, device, "eye", [=](int64_t i) { return i / m == i % m ? 1.0 : 0.0; });
}

Tensor eye(int64_t n, int64_t m, DType dtype, Device device) {
  return observed_other("constant", [&] { return eye_impl(n, m, dtype, device); }, [](Observed&, const Tensor&) {});
}

static Tensor from_values_impl(const double* values, int64_t n, const Shape& shape, DType dtype, Device device) {
  int64_t numel = checked_numel(shape, "tensor");
  DL_CHECK(numel == n, "tensor: ", n, " values cannot fill shape ", shape);
  // A float past float32's range is inf there, as in PyTorch's torch.tensor; a number an
  // integer dtype cannot hold is refused.
  if (!is_floating(dtype))
    for (int64_t i = 0; i < n; ++i) check_fits("tensor", values[i], dtype);
  return generate(shape, dtype, device, "tensor", [=](int64_t i) { return values[i]; });
}

Tensor from_values(const double* values, int64_t n, const Shape& shape, DType dtype, Device device) {
  return observed_other("constant", [&] { return from_values_impl(values, n, shape, dtype, device); }, [](Observed&, const Tensor&) {});
}

Tensor from_blob(void* data, const Shape& shape, const Shape& strides, DType dtype,
                 Storage::FreeFn free_fn, void* ctx) {
  DL_CHECK(data != nullptr || checked_numel(shape, "from_blob") == 0, "from_blob: null data pointer");
  checked_numel(shape, "from_blob");
  Shape st = strides.empty() && !shape.empty() ? contiguous_strides(shape) : strides;
  DL_CHECK(st.size() == shape.size(), "from_blob: ", shape.size(), " sizes but ", st.size(), " strides");
  // Extent in elements of the furthest element reachable.
  int64_t extent = 1, span = 0, bytes = 0;
  for (int d = 0; d < shape.size(); ++d) {
    DL_CHECK(st[d] >= 0, "from_blob: negative stride ", st[d]);
    if (shape[d] == 0) { extent = 0; break; }
    DL_CHECK_KIND(Memory, !__builtin_mul_overflow(shape[d] - 1, st[d], &span) &&
                              !__builtin_add_overflow(extent, span, &extent),
                  "from_blob: shape ", shape, " with strides ", st, " reaches past 2^63 elements");
  }
  DL_CHECK_KIND(Memory, !__builtin_mul_overflow(extent, int64_t(itemsize(dtype)), &bytes), "from_blob: shape ",
                shape, " with strides ", st, " reaches past 2^63 bytes");
  auto storage = Storage::borrow(data, size_t(bytes), Device{}, free_fn, ctx);
  return Tensor(make_ref<TensorImpl>(std::move(storage), shape, st, 0, dtype));
}

}  // namespace dl

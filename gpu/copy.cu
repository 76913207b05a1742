// Copies: dtype conversion and broadcasting on a device (fn::convert in the grid-stride
// loop), copies between the host and a device or between two devices, and cat (one
// copy per input into its slice of the output).
#include <algorithm>

#include "gpu/loops.cuh"
#include "tensor/half.h"

namespace dl::gpu {

namespace {

template <typename To, typename From>
struct ConvertOp {
  __device__ void operator()(char* const (&p)[2], int64_t) const {
    store<To>(p[0], convert_element<To>(load<From>(p[1])));
  }
};

// Same dtype: the bytes, as an unsigned integer of the item size.
template <typename U>
struct MoveOp {
  __device__ void operator()(char* const (&p)[2], int64_t) const { store<U>(p[0], load<U>(p[1])); }
};

bool plain_copy(const Tensor& out, const Tensor& src) {
  return out.dtype() == src.dtype() && out.shape() == src.shape() && out.is_contiguous() &&
         src.is_contiguous();
}

// A contiguous host tensor of src's shape and dtype: src itself when it is one.
Tensor host_contiguous(const Tensor& src) {
  if (src.is_contiguous()) return src;
  Tensor t = empty(src.shape(), src.dtype(), Device{}, "copy_");
  cpu_backend().copy(t, src);
  return t;
}

// A contiguous tensor of src's shape and dtype on src's device: src itself when it is one.
Tensor device_contiguous(const Tensor& src, const char* op) {
  if (src.is_contiguous()) return src;
  Tensor t = empty(src.shape(), src.dtype(), src.device(), op);
  convert(t, src, op);
  return t;
}

size_t nbytes_of(const Tensor& t) { return size_t(t.numel()) * t.itemsize(); }

}  // namespace

void convert(const Tensor& out, const Tensor& src, const char* op) {
  if (out.numel() == 0) return;
  const DeviceContext& c = activate(out, op);
  const Geom<2> g = make_geom<2>({&out, &src});
  if (out.dtype() == src.dtype()) {
    if (g.ndim == 1 && g.strides[0][0] == int64_t(out.itemsize()) &&
        g.strides[1][0] == int64_t(out.itemsize())) {
      check_cuda(cudaMemcpyAsync(g.data[0], g.data[1], nbytes_of(out), cudaMemcpyDeviceToDevice, c.stream),
                 op, "a copy on the device");
      return;
    }
    switch (out.itemsize()) {
      case 1: launch_elementwise<2>(c, g, MoveOp<uint8_t>{}, op); return;
      case 4: launch_elementwise<2>(c, g, MoveOp<uint32_t>{}, op); return;
      default: launch_elementwise<2>(c, g, MoveOp<uint64_t>{}, op); return;
    }
  }
  DL_DISPATCH_STORAGE(src.dtype(), op, {
    using From = scalar_t;
    DL_DISPATCH_STORAGE(out.dtype(), op, launch_elementwise<2>(c, g, (ConvertOp<scalar_t, From>{}), op));
  });
}

void copy(const Tensor& out, const Tensor& src) {
  const char* op = "copy_";
  if (out.numel() == 0) return;
  const Device od = out.device(), sd = src.device();
  if (od.is_cuda() && sd.is_cuda()) {
    if (od.index == sd.index) {
      convert(out, src, op);
      return;
    }
    // Between two devices: src's elements, contiguous, moved to out's device, then
    // converted and broadcast there. The source's stream is drained first (its
    // producers), and the destination's after (the staging copy is freed here).
    Tensor s = device_contiguous(src, op);
    DeviceContext& sc = activate(s, op);
    check_cuda(cudaStreamSynchronize(sc.stream), op, "a copy between devices");
    Tensor t = plain_copy(out, s) ? out : empty(s.shape(), s.dtype(), od, op);
    DeviceContext& oc = activate(t, op);
    check_cuda(cudaMemcpyPeerAsync(t.raw_data(), od.index, s.raw_data(), sd.index, nbytes_of(s), oc.stream),
               op, "a copy between devices");
    if (!t.same_storage(out)) convert(out, t, op);
    check_cuda(cudaStreamSynchronize(oc.stream), op, "a copy between devices");
    return;
  }
  if (od.is_cuda()) {  // host to device
    Tensor h = host_contiguous(src);
    if (plain_copy(out, h)) {
      h2d(out.raw_data(), h.raw_data(), nbytes_of(h), od.index, op);
      return;
    }
    Tensor t = empty(h.shape(), h.dtype(), od, op);
    h2d(t.raw_data(), h.raw_data(), nbytes_of(h), od.index, op);
    convert(out, t, op);
    return;
  }
  // device to host
  Tensor d = device_contiguous(src, op);
  if (plain_copy(out, d)) {
    d2h(out.raw_data(), d.raw_data(), nbytes_of(d), sd.index, op);
    return;
  }
  Tensor h = empty(d.shape(), d.dtype(), Device{}, op);
  d2h(h.raw_data(), d.raw_data(), nbytes_of(d), sd.index, op);
  cpu_backend().copy(out, h);
}

void cat(const Tensor& out, const TensorList& xs, int dim) {
  int64_t at = 0;
  for (const Tensor& x : xs) {
    const int64_t len = x.size(dim);
    Shape st = out.strides();
    Shape sz = out.shape();
    sz[dim] = len;
    convert(make_view(out, sz, st, out.offset() + at * out.stride(dim)), x, "cat");
    at += len;
  }
}

}  // namespace dl::gpu

// Per-device kernel tables. The front ends in tensor/*.cpp check arguments, work out
// shapes and dtypes, allocate outputs, and then call the kernels of the device the
// tensors live on: tensor/cpu fills the CPU table, the CUDA plugin (gpu/) registers
// its own when loaded. A kernel receives outputs already allocated with the right
// shape and dtype, and inputs already converted to the dtype it computes in.
#pragma once
#include <optional>

#include "tensor/ops.h"

namespace dl {

struct Backend {
  const char* name;
  // memory
  void* (*alloc)(size_t nbytes, int device_index, const char* op);
  void (*free)(void* p, size_t nbytes, int device_index);
  // pointwise: `out` has the broadcast shape; inputs are in the compute dtype
  void (*unary)(Op op, const Tensor& out, const Tensor& x);
  void (*binary)(Op op, const Tensor& out, const Tensor& a, const Tensor& b);
  void (*binary_scalar)(Op op, const Tensor& out, const Tensor& a, double s, bool scalar_first);
  void (*where)(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
  void (*clamp)(const Tensor& out, const Tensor& x, double lo, double hi);
  // out = src converted to out's dtype, src broadcast to out's shape
  void (*copy)(const Tensor& out, const Tensor& src);
  void (*fill)(const Tensor& out, double value);
};

const Backend& cpu_backend();
// The backend for `d`; throws "op: not implemented for cuda" (or "cuda is not
// available") when no plugin provides it.
const Backend& backend_for(Device d, const char* op);
void register_backend(DeviceType type, const Backend* b);

}  // namespace dl

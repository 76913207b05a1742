// The front ends' side of Note [Half-precision storage] (tensor/half.h): an op given
// float16 or bfloat16 operands runs on float32 copies of them, and its floating results
// go back to the operands' dtype.
//
//   if (any_half({&x, &w})) return narrowed(conv2d_impl(widened(x), widened(w), o), storage_of({&x, &w}));
#pragma once
#include <initializer_list>
#include <utility>

#include "tensor/ops.h"

namespace dl {

inline bool any_half(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t && t->defined() && is_half(t->dtype())) return true;
  return false;
}

// The dtype the operands promote to (float16 with float16 stays float16; float16 with
// bfloat16 or float32 is float32); Float32 when none is defined.
inline DType storage_of(std::initializer_list<const Tensor*> ts) {
  bool first = true;
  DType d = DType::Float32;
  for (const Tensor* t : ts) {
    if (!t || !t->defined()) continue;
    d = first ? t->dtype() : promote(d, t->dtype());
    first = false;
  }
  return d;
}

// t in float32 when it is a half tensor, else t itself.
inline Tensor widened(const Tensor& t) {
  return t.defined() && is_half(t.dtype()) ? cast(t, DType::Float32) : t;
}
inline TensorList widened(const TensorList& ts) {
  TensorList out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(widened(t));
  return out;
}

// A float32 result back in `storage` when that is a half dtype; other results (indices,
// masks, a float64 result) as they are.
inline Tensor narrowed(const Tensor& r, DType storage) {
  return is_half(storage) && r.defined() && r.dtype() == DType::Float32 ? cast(r, storage) : r;
}
inline std::pair<Tensor, Tensor> narrowed(std::pair<Tensor, Tensor> r, DType storage) {
  return {narrowed(r.first, storage), narrowed(r.second, storage)};
}

// Note [Autocast]
// dl.autocast(f) runs f with the matrix products of float32 operands on a device whose
// backend multiplies half matrices natively (Backend::half_matmul: cuBLAS's GEMMs with
// float32 accumulation, tensor cores on recent GPUs) computed in `dtype` and returned
// in it, as PyTorch's autocast does for CUDA. Nothing else changes: elementwise ops,
// reductions and losses keep their dtypes, and the CPU computes in float32 anyway
// (there autocast changes nothing). Per thread, restored when f returns or fails.
struct AutocastMode {
  bool enabled = false;
  DType dtype = DType::Float16;
};
inline thread_local AutocastMode t_autocast;

}  // namespace dl

// CUDA kernels of the indexing ops: gather, scatter_add and index_select (cat is in
// gpu/copy.cu). Contracts in tensor/kernels.def; the CPU versions are tensor/cpu/index.cpp.
//
// Each runs over the index's shape with three operands viewed with that shape: the
// output, the index, and the tensor indexed into, whose stride along `dim` is replaced
// by 0 (the position along dim comes from the index value). A bad index is skipped and
// its element position recorded (gpu/loops.cuh, BadIndexCheck); the host then reads the
// first one and throws, naming the op, the index and the size, as the CPU does.
// scatter_add adds with atomics (compare-and-swap on the enclosing word for the 1-byte
// dtypes), so float sums may differ from the CPU's in the last bits.
#include "gpu/loops.cuh"

namespace dl::gpu {

namespace {

// `t` viewed with `shape` (its own strides), with a zero stride along `dim`.
// (An empty t, where every index is out of range, is never read: its strides, which may
// be huge, are left out.)
Tensor along(const Tensor& t, const Shape& shape, int dim) {
  Shape st = t.strides();
  st[dim] = 0;
  if (t.numel() == 0)
    for (int d = 0; d < st.size(); ++d) st[d] = 0;
  return make_view(t, shape, st, t.offset());
}

// Bytes between neighbours along dim, 0 where no step is ever taken (a size of 0 or 1,
// whose stride may be any value, e.g. a saturated one from unsqueeze).
int64_t step_along(const Tensor& t, int dim) {
  return t.size(dim) > 1 && t.numel() > 0 ? t.stride(dim) * int64_t(t.itemsize()) : 0;
}

template <typename U, typename I>
struct GatherOp {
  int64_t size;     // x's size along dim
  int64_t xstride;  // bytes between neighbours along dim in x
  BadIndexSlot bad;
  __device__ void operator()(char* const (&p)[3], int64_t i) const {
    const int64_t v = int64_t(load<I>(p[1]));
    if (v < 0 || v >= size) {
      bad.record(i);
      return;
    }
    store<U>(p[0], load<U>(p[2] + v * xstride));
  }
};

// out[v] += x for the dtypes with native atomics, or through the 32-bit word holding
// the byte (with fn::AddFn, so bool adds are "or" and uint8 adds wrap).
template <typename T>
__device__ __forceinline__ void atomic_add(T* at, T x) {
  if constexpr (sizeof(T) == 1) {
    auto* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(at) & ~uintptr_t(3));
    const unsigned shift = unsigned(reinterpret_cast<uintptr_t>(at) & 3) * 8;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      T cur;
      const unsigned char byte = (assumed >> shift) & 0xffu;
      memcpy(&cur, &byte, 1);
      const T sum = fn::AddFn{}(cur, x);
      unsigned char nb;
      memcpy(&nb, &sum, 1);
      const unsigned int next = (assumed & ~(0xffu << shift)) | (unsigned(nb) << shift);
      old = atomicCAS(word, assumed, next);
    } while (old != assumed);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(at), static_cast<unsigned long long>(x));
  } else {
    atomicAdd(at, x);
  }
}

template <typename T, typename I>
struct ScatterAddOp {
  int64_t size;
  int64_t ostride;
  BadIndexSlot bad;
  __device__ void operator()(char* const (&p)[3], int64_t i) const {
    const int64_t v = int64_t(load<I>(p[1]));
    if (v < 0 || v >= size) {
      bad.record(i);
      return;
    }
    atomic_add<T>(reinterpret_cast<T*>(p[0] + v * ostride), load<T>(p[2]));
  }
};

[[noreturn]] void out_of_range(const char* op, int64_t index, int dim, int64_t size) {
  fail(ErrorKind::Index, op, ": index ", pos(index), " is out of range for dimension ", pos(dim), " of size ",
       size);
}

void gather_named(const Tensor& out, const Tensor& x, int dim, const Tensor& index, const char* op) {
  const DeviceContext& c = activate(out, op);
  const int64_t size = x.size(dim);
  const int64_t xstride = step_along(x, dim);
  Tensor xv = along(x, index.shape(), dim);
  const Geom<3> g = make_geom<3>({&out, &index, &xv});
  BadIndexCheck check(c, op);
  DL_DISPATCH_INDEX(index.dtype(), {
    switch (x.itemsize()) {
      case 1: launch_elementwise<3>(c, g, GatherOp<uint8_t, index_t>{size, xstride, check.slot()}, op); break;
      case 4: launch_elementwise<3>(c, g, GatherOp<uint32_t, index_t>{size, xstride, check.slot()}, op); break;
      default: launch_elementwise<3>(c, g, GatherOp<uint64_t, index_t>{size, xstride, check.slot()}, op); break;
    }
  });
  const int64_t bad = check.first_bad();
  if (bad >= 0) out_of_range(op, index_value_at(index, bad, op), dim, size);
}

}  // namespace

int64_t index_value_at(const Tensor& index, int64_t pos, const char* op) {
  int64_t off = 0;
  for (int d = index.dim() - 1; d >= 0; --d) {
    const int64_t n = index.size(d);
    off += (pos % n) * index.stride(d);
    pos /= n;
  }
  const char* p = static_cast<const char*>(index.raw_data()) + off * int64_t(index.itemsize());
  if (index.dtype() == DType::Int32) {
    int32_t v = 0;
    d2h(&v, p, sizeof v, index.device().index, op);
    return v;
  }
  int64_t v = 0;
  d2h(&v, p, sizeof v, index.device().index, op);
  return v;
}

void gather(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  gather_named(out, x, dim, index, "gather");
}

void index_select(const Tensor& out, const Tensor& x, int dim, const Tensor& index) {
  // A gather through the index broadcast over the other dims.
  Shape st;
  st.resize(out.dim());
  st[dim] = index.dim() == 0 ? 0 : index.stride(0);
  gather_named(out, x, dim, make_view(index, out.shape(), st, index.offset()), "index_select");
}

void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  const DeviceContext& c = activate(out, op);
  const int64_t size = out.size(dim);
  const int64_t ostride = step_along(out, dim);
  Tensor ov = along(out, index.shape(), dim);
  // src is at least as large as the index along every dim: view it with the index's shape.
  Tensor sv = make_view(src, index.shape(), src.strides(), src.offset());
  const Geom<3> g = make_geom<3>({&ov, &index, &sv});
  BadIndexCheck check(c, op);
  DL_DISPATCH_ALL(out.dtype(), op, DL_DISPATCH_INDEX(index.dtype(),
      launch_elementwise<3>(c, g, (ScatterAddOp<scalar_t, index_t>{size, ostride, check.slot()}), op)));
  const int64_t bad = check.first_bad();
  if (bad >= 0) out_of_range(op, index_value_at(index, bad, op), dim, size);
}


}  // namespace dl::gpu

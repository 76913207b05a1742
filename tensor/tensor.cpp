#include "tensor/tensor.h"

#include <mutex>

#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/functors.h"
#include "tensor/observe.h"
#include "tensor/half.h"

namespace dl {

// ---- dtypes ----------------------------------------------------------------------

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

DType dtype_from_name(std::string_view n) {
  if (n == "float32" || n == "float") return DType::Float32;
  if (n == "float64" || n == "double") return DType::Float64;
  if (n == "int32" || n == "int") return DType::Int32;
  if (n == "int64" || n == "long") return DType::Int64;
  if (n == "uint8" || n == "byte") return DType::UInt8;
  if (n == "bool") return DType::Bool;
  if (n == "float16" || n == "half") return DType::Float16;
  if (n == "bfloat16") return DType::BFloat16;
  fail(ErrorKind::Type, "dtype: unknown dtype '", n,
       "' (expected float32, float64, float16, bfloat16, int32, int64, uint8 or bool)");
}

namespace {
std::atomic<DType> g_default_float{DType::Float32};
}
DType default_float() { return g_default_float.load(std::memory_order_relaxed); }
void set_default_float(DType t) {
  DL_CHECK_KIND(Type, t == DType::Float32 || t == DType::Float64,
                "set_default_dtype: expected float32 or float64, got ",
                dtype_name(t));
  g_default_float.store(t);
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (is_floating(a) || is_floating(b)) {
    if (!is_floating(a)) return b;
    if (!is_floating(b)) return a;
    // float16 with bfloat16: float32 (neither holds the other); a half with a wider
    // float: the wider one.
    if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
    return DType::Float32;
  }
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  // uint8 with a signed type: the signed one when it is wider (int32, int64).
  return static_cast<uint8_t>(a) > static_cast<uint8_t>(b) ? a : b;
}

// ---- storage ---------------------------------------------------------------------

// Note [Small storages inline]
// A host storage of at most kInlineBytes (16 float32) keeps its data in the Storage
// object itself, which comes from a per-thread pool (tensor/pool.h): a small tensor then
// costs two pooled objects and no trip to the caching allocator, whose lock and
// bookkeeping were 260 instructions of each tensor's life, 7% of a recorded 16-element
// op with its backward (bench/cases.lua's chain, callgrind: 1,059 to 986 million
// instructions). Such bytes are not counted in memory_stats() or the tensor memory limit,
// like the TensorImpl and Storage objects themselves (a few hundred bytes per tensor):
// the limit bounds tensor data, and a program holding many tiny tensors pays for their
// handles in its Lua heap, which a sandbox's memory limit bounds. The data is 16-byte
// aligned (the caching allocator's blocks are 64-byte aligned); no kernel relies on more.
Ref<Storage> Storage::allocate(size_t nbytes, Device device, const char* op) {
  Ref<Storage> s = Ref<Storage>(new Storage());
  s->nbytes_ = nbytes;
  s->device_ = device;
  if (device.is_cpu()) {
    s->data_ = nbytes <= kInlineBytes ? s->inline_ : host_allocator::allocate(nbytes, op);
  } else {
    const Backend& b = backend_for(device, op);
    s->data_ = b.alloc(nbytes, device.index, op);
  }
  return s;
}

Ref<Storage> Storage::borrow(void* data, size_t nbytes, Device device, FreeFn free_fn, void* ctx) {
  Ref<Storage> s = Ref<Storage>(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->free_fn_ = free_fn;
  s->ctx_ = ctx;
  s->borrowed_ = true;
  return s;
}

Storage::~Storage() {
  if (borrowed_) {
    if (free_fn_) free_fn_(ctx_, data_, nbytes_);
  } else if (device_.is_cpu()) {
    if (data_ != inline_) host_allocator::deallocate(data_, nbytes_);
  } else {
    try {
      backend_for(device_, "free").free(data_, nbytes_, device_.index);
    } catch (...) {
      // The plugin is gone only at process exit; nothing to give back then.
    }
  }
}

void Storage::throw_revoked() {
  fail(ErrorKind::Value, "tensor: its memory was revoked by the host (from_blob buffer released)");
}

// ---- tensors ----------------------------------------------------------------------

bool contiguous_layout(const Shape& sizes, const Shape& strides) {
  for (int64_t n : sizes)
    if (n == 0) return true;  // as contiguous_strides() lays out empty shapes
  int64_t expected = 1;
  for (int i = sizes.size() - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// Every shape reaching here went through checked_numel (creation, views), which is also
// the safety net: a shape whose element count overflows is refused, not wrapped.
TensorImpl::TensorImpl(Ref<Storage> st, const Shape& sz, const Shape& str, int64_t off, DType dt)
    : storage(std::move(st)), sizes(sz), strides(str), offset(off),
      numel(checked_numel(sz, "tensor")), dtype(dt), contiguous(contiguous_layout(sz, str)) {}

Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  auto impl = make_ref<TensorImpl>(base.impl()->storage, sizes, strides, offset, base.dtype());
  impl->view_base = base.impl()->view_base ? base.impl()->view_base : base.impl_ref();
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, DType dtype, Device device, const char* op) {
  int64_t n = checked_numel(shape, op);
  if (n > int64_t(1) << 56) fail(ErrorKind::Memory, op, ": shape ", shape, " is too large");
  observe_allocation(op);
  size_t nbytes = size_t(n) * itemsize(dtype);
  auto st = Storage::allocate(nbytes, device, op);
  return Tensor(make_ref<TensorImpl>(std::move(st), shape, contiguous_strides(shape), 0, dtype, n, true));
}

Tensor empty_like(const Tensor& x, DType dtype) {
  const int64_t n = x.numel();
  observe_allocation("empty");
  auto st = Storage::allocate(size_t(n) * itemsize(dtype), x.device(), "empty");
  return Tensor(make_ref<TensorImpl>(std::move(st), x.shape(), contiguous_strides(x.shape()), 0, dtype, n, true));
}

double Tensor::value_at(const int64_t* idx) const {
  DL_CHECK(device().is_cpu(), "item: tensor is on ", device(), ", move it to the cpu first");
  int64_t off = 0;
  for (int d = 0; d < dim(); ++d) off += idx[d] * stride(d);
  double v = 0;
  DL_DISPATCH_STORAGE(dtype(), "item", v = double(data<scalar_t>()[off]));
  return v;
}

double Tensor::item() const {
  DL_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape());
  if (!device().is_cpu()) {
    Tensor host = empty(Shape{}, dtype());
    backend_for(device(), "item").copy(host, *this);
    return host.item();
  }
  int64_t zeros[kMaxDims] = {};
  return value_at(zeros);
}

}  // namespace dl

// Tensor, TensorImpl and Storage: the engine's data model.
//
//   dl::Tensor x = dl::arange(0, 6, 1, dl::DType::Float32).view({2, 3});
//   dl::Tensor y = dl::transpose(x, 0, 1);      // a view: shares x's storage
//   float v = y.item_at<float>({2, 1});         // x[1][2] == 5
//
// A Storage owns (or borrows) one block of memory. A TensorImpl is a strided view of
// a storage: sizes, strides (in elements) and an offset, up to kMaxDims dims. Tensor
// is a cheap handle (one intrusive pointer). Views share the storage, and with it a
// version counter that every in-place write bumps (autograd checks it, see
// Note [Saved tensors and versions] in autograd/node.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/intrusive.h"
#include "tensor/pool.h"
#include "tensor/shape.h"
#include "tensor/small_sizes.h"

namespace dl {

class Storage : public RefCounted {
 public:
  // Host blocks up to this size live inside the Storage object itself (Note [Small
  // storages inline] in tensor.cpp; the size: tensor/small_sizes.h).
  static constexpr size_t kInlineBytes = size_t(sizes::kInlineBytes);
  using FreeFn = void (*)(void* ctx, void* data, size_t nbytes);

  // Memory from the host caching allocator (or a device allocator when `device` is not
  // the CPU), at least `nbytes` long; `op` names who asked, for the error message.
  static Ref<Storage> allocate(size_t nbytes, Device device, const char* op);
  // Borrowed memory (zero copy). `free_fn`, if given, is called when the last tensor
  // using it goes away.
  static Ref<Storage> borrow(void* data, size_t nbytes, Device device,
                             FreeFn free_fn = nullptr, void* ctx = nullptr);
  ~Storage() override;
  DL_POOLED(Storage)

  void* data() const {
    if (revoked_.load(std::memory_order_relaxed)) throw_revoked();
    return data_;
  }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool borrowed() const { return borrowed_; }
  // The host took its memory back (embedding API): every later access is an error.
  void revoke() { revoked_.store(true); }
  bool revoked() const { return revoked_.load(); }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Storage() = default;
  [[noreturn]] static void throw_revoked();

  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  FreeFn free_fn_ = nullptr;
  void* ctx_ = nullptr;
  bool borrowed_ = false;
  std::atomic<bool> revoked_{false};
  std::atomic<uint64_t> version_{0};
  alignas(16) unsigned char inline_[kInlineBytes];  // the data of a small host storage
};

// The autograd layer hangs its per-tensor data here; tensor/ never looks inside.
struct AutogradMetaBase : RefCounted {};

class TensorImpl : public RefCounted {
 public:
  TensorImpl(Ref<Storage> storage, const Shape& sizes, const Shape& strides, int64_t offset,
             DType dtype);
  // With the element count of `sizes` already checked by the caller (checked_numel)
  // and whether the layout is contiguous already known.
  TensorImpl(Ref<Storage> storage, const Shape& sizes, const Shape& strides, int64_t offset,
             DType dtype, int64_t numel, bool contiguous)
      : storage(std::move(storage)), sizes(sizes), strides(strides), offset(offset), numel(numel),
        dtype(dtype), contiguous(contiguous) {}
  DL_POOLED(TensorImpl)

  // The layout is fixed at construction (a view is a new TensorImpl), which is what
  // lets `contiguous` be worked out once instead of on every kernel call.
  Ref<Storage> storage;
  const Shape sizes;
  const Shape strides;
  const int64_t offset = 0;   // in elements
  const int64_t numel = 1;
  const DType dtype;
  const bool contiguous;
  // For views: the tensor that owns the storage (never itself a view). In-place
  // writes through a view use it to rewrite the base's history (autograd/).
  Ref<TensorImpl> view_base;

  // Owned by autograd/ and opaque here: the node that produced this tensor and which
  // of its outputs it is (kept inline so that recording an op allocates nothing but
  // the node), the storage version the node was recorded at, and rarer extras.
  Ref<RefCounted> grad_node;
  uint32_t grad_nr = 0;
  bool is_variable = false;
  bool frozen = false;   // a Variable left out of implicit gradients (v:requires_grad_(false))
  uint64_t grad_version = 0;
  Ref<AutogradMetaBase> autograd;

  bool is_contiguous() const { return contiguous; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Ref<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return bool(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const Ref<TensorImpl>& impl_ref() const { return impl_; }

  int dim() const { return impl_->sizes.size(); }
  const Shape& shape() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  int64_t size(int d) const { return impl_->sizes[d]; }
  int64_t stride(int d) const { return impl_->strides[d]; }
  int64_t numel() const { return impl_->numel; }
  int64_t offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  size_t itemsize() const { return dl::itemsize(impl_->dtype); }
  bool is_contiguous() const { return impl_->is_contiguous(); }
  bool is_floating() const { return dl::is_floating(impl_->dtype); }
  Storage& storage() const { return *impl_->storage; }
  bool same_storage(const Tensor& o) const { return impl_->storage == o.impl_->storage; }

  // Address of element 0 (after the offset). An empty view may keep an offset that
  // addresses nothing (moved_offset in view.cpp), whose bytes may not fit in int64: it
  // has no element to address, and gets the storage's start.
  void* raw_data() const {
    int64_t bytes = 0;
    if (__builtin_mul_overflow(impl_->offset, int64_t(itemsize()), &bytes)) return impl_->storage->data();
    return static_cast<char*>(impl_->storage->data()) + bytes;
  }
  template <typename T>
  T* data() const { return static_cast<T*>(raw_data()); }

  // The value of a one-element tensor as a double (any dtype, any device).
  double item() const;
  // Element at a 0-based multi-index, converted to double (host tensors).
  double value_at(const int64_t* idx) const;

 private:
  Ref<TensorImpl> impl_;
};

using TensorList = std::vector<Tensor>;

// A new tensor viewing `base`'s storage with another geometry.
Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);
// A new uninitialised contiguous tensor.
Tensor empty(const Shape& shape, DType dtype, Device device = Device{}, const char* op = "empty");
// A new uninitialised contiguous tensor of x's shape, on x's device (x's element count
// is taken as checked).
Tensor empty_like(const Tensor& x, DType dtype);

}  // namespace dl

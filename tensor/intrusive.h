// Intrusive reference counting (c10::intrusive_ptr style): the count lives in the
// object, so a handle is one pointer and no control block is allocated.
#pragma once
#include <atomic>
#include <cstdint>
#include <utility>

namespace dl {

class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;
  virtual ~RefCounted() = default;

  void retain() const noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  // Returns true when this was the last reference.
  bool release_ref() const noexcept {
    return refs_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
  uint32_t use_count() const noexcept { return refs_.load(std::memory_order_relaxed); }

 private:
  mutable std::atomic<uint32_t> refs_{0};
};

template <typename T>
class Ref {
 public:
  Ref() noexcept = default;
  Ref(std::nullptr_t) noexcept {}
  explicit Ref(T* p) noexcept : p_(p) { if (p_) p_->retain(); }
  Ref(const Ref& o) noexcept : p_(o.p_) { if (p_) p_->retain(); }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  template <typename U>
  Ref(const Ref<U>& o) noexcept : p_(o.get()) { if (p_) p_->retain(); }
  ~Ref() { reset(); }

  Ref& operator=(Ref o) noexcept { std::swap(p_, o.p_); return *this; }

  void reset() noexcept {
    if (p_ && p_->release_ref()) delete p_;
    p_ = nullptr;
  }
  // Gives up ownership without decrementing (for iterative teardown of long chains).
  T* release() noexcept { return std::exchange(p_, nullptr); }
  static Ref adopt(T* p) noexcept { Ref r; r.p_ = p; return r; }

  T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  bool operator==(const Ref& o) const noexcept { return p_ == o.p_; }

 private:
  T* p_ = nullptr;
};

template <typename T, typename... Args>
Ref<T> make_ref(Args&&... args) {
  return Ref<T>(new T(std::forward<Args>(args)...));
}

}  // namespace dl

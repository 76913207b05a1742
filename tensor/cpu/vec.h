// A GCC vector of VB bytes of T, and its loads and stores at any address: what the
// loops built for each vector width hold their values in (Note [Builds for each vector
// width] in tensor/cpu/loops.h). By value, so that no vector has its address taken.
#pragma once

namespace dl::cpu {

template <typename T, int VB>
struct Vec {
  typedef T V __attribute__((vector_size(VB)));
  // (loads and stores: the element's alignment, aliasing T)
  typedef T Unaligned __attribute__((vector_size(VB), aligned(alignof(T)), may_alias));
  static constexpr int kLanes = VB / int(sizeof(T));
};

template <int VB, typename T>
[[gnu::always_inline]] inline typename Vec<T, VB>::V load(const T* at) {
  return *reinterpret_cast<const typename Vec<T, VB>::Unaligned*>(at);
}
template <int VB, typename T>
[[gnu::always_inline]] inline void store(T* at, typename Vec<T, VB>::V v) {
  *reinterpret_cast<typename Vec<T, VB>::Unaligned*>(at) = v;
}

}  // namespace dl::cpu

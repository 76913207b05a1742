// The order of sorting and searching, written once for the CPU (tensor/cpu/sorting.cpp)
// and CUDA (gpu/sorting.cu) kernels: NaN is the largest value, as PyTorch orders it,
// so a sort puts NaNs last (first when descending) and a search finds them at the end.
#pragma once
#include <cstdint>
#include <type_traits>

#include "tensor/functors.h"

namespace dl::fn {

// a < b, with NaN above every number (and equal to another NaN).
template <typename T>
DL_HD bool less_nan_last(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a < b || (b != b && a == a);
  else return a < b;
}

// The number of elements of the ascending seq[0, n) below v (at or below v when
// `right`): where v would be inserted to keep the order (numpy's searchsorted).
template <typename T>
DL_HD int64_t insertion_point(const T* seq, int64_t n, T v, bool right) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const bool go_right = right ? !less_nan_last(v, seq[mid]) : less_nan_last(seq[mid], v);
    if (go_right) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

}  // namespace dl::fn

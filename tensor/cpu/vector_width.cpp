// The vector width the width-templated loops run at (Note [Builds for each vector width]
// in tensor/cpu/loops.h).
#include <algorithm>
#include <atomic>

#include "tensor/cpu/loops.h"

namespace dl::cpu {

namespace {

int machine_vector_bytes() {
#ifdef DL_WIDTH_BUILDS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 64;
  if (__builtin_cpu_supports("avx2")) return 32;
#endif
  return 16;
}

std::atomic<int> g_limit{64};

}  // namespace

int vector_bytes() {
  static const int machine = machine_vector_bytes();
  return std::min(machine, g_limit.load(std::memory_order_relaxed));
}

void limit_vector_bytes(int bytes) { g_limit.store(bytes == 0 ? 64 : std::clamp(bytes, 16, 64)); }

}  // namespace dl::cpu

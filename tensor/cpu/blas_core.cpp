// Which of OpenBLAS's kernel sets ("cores") runs dlua's matrix products, and choosing a
// better one when OpenBLAS falls back to a generic set on a CPU it does not recognise.
//
// Note [Choosing OpenBLAS's core]
// Debian's OpenBLAS is built with DYNAMIC_ARCH: when it loads, it reads the CPU's
// family and model and picks one of its kernel sets. A CPU newer than the library (an
// AMD EPYC under some hypervisors, for one) gets the generic Prescott set, which uses
// SSE3 only: GEMM runs 5 to 25 times slower than with the AVX2 or AVX-512 sets the CPU
// can run (bench/ref.c `sgemm`, docs/performance.md "OpenBLAS's kernels").
//
// So when the engine's image loads, it looks at the core OpenBLAS picked. When that is
// one of the pre-AVX sets (the fallbacks) while the CPU and the OS support AVX or more
// (libgcc's __builtin_cpu_supports reads XCR0, so a hypervisor that hides AVX-512 state
// is respected), it makes OpenBLAS pick again, the set for the best instruction set
// there is (SkylakeX for AVX-512, Haswell for AVX2, Sandybridge for AVX), with
// OPENBLAS_CORETYPE set for the duration of the call (gotoblas_dynamic_quit and
// gotoblas_dynamic_init, exported by every DYNAMIC_ARCH build; the environment is
// restored afterwards, so child processes see the user's own setting).
//
// It does not touch OpenBLAS:
//   - when the user named a core in OPENBLAS_CORETYPE (their choice stands);
//   - when OpenBLAS is not a DYNAMIC_ARCH build (it has one core, nothing to pick);
//   - when OpenBLAS was in the process before the engine's image (a host that uses
//     OpenBLAS itself and loaded dlua later, perhaps while other threads run products):
//     then it prints one warning that names the variable to set, once per process.
// The engine's image loads with its dependencies, before any code of the program or of
// Lua runs, so no product is in flight when the kernel table is swapped.
#include <cblas.h>
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tensor/backend.h"

// Present in DYNAMIC_ARCH builds of OpenBLAS only; weak, so any OpenBLAS links.
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace dl {

namespace {

// The instruction-set level of an OpenBLAS core name: 5 AVX-512, 4 AVX2, 3 AVX, 0 older.
int core_level(std::string_view core) {
  static const struct { const char* name; int level; } table[] = {
      {"SkylakeX", 5}, {"Cooperlake", 5}, {"SapphireRapids", 5},
      {"Haswell", 4},  {"Zen", 4},        {"Excavator", 4},
      {"Sandybridge", 3}, {"Bulldozer", 3}, {"Piledriver", 3}, {"Steamroller", 3},
  };
  for (const auto& row : table)
    if (core.size() == std::strlen(row.name) && strncasecmp(core.data(), row.name, core.size()) == 0)
      return row.level;
  return 0;
}

struct Choice {
  std::string detected;   // what OpenBLAS picked on its own
  std::string chosen_by;  // "openblas", "dlua", "OPENBLAS_CORETYPE" or "host"
};

Choice& choice() {
  static Choice c;
  return c;
}

// Whether the image holding `addr` comes before the one holding `other` in the
// dynamic linker's list (its load order). Unknown (either not found) counts as no.
bool loaded_before(const void* addr, const void* other) {
  struct Find {
    const void* a;
    const void* b;
    int index = 0, ia = -1, ib = -1;
  } find{addr, other};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* f = static_cast<Find*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          auto in = [&](const void* p) { return uintptr_t(p) >= lo && uintptr_t(p) < hi; };
          if (f->ia < 0 && in(f->a)) f->ia = f->index;
          if (f->ib < 0 && in(f->b)) f->ib = f->index;
        }
        ++f->index;
        return 0;
      },
      &find);
  return find.ia >= 0 && find.ib >= 0 && find.ia < find.ib;
}

void select_at_load() {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  Choice& c = choice();
  c.detected = openblas_get_corename();
  c.chosen_by = forced && *forced ? "OPENBLAS_CORETYPE" : "openblas";
  if (forced && *forced) return;
  const char* better = better_blas_core(c.detected, cpu_simd_level());
  if (!better) return;
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) return;
  if (loaded_before(reinterpret_cast<const void*>(&openblas_get_corename),
                    reinterpret_cast<const void*>(&select_at_load))) {
    std::fprintf(stderr,
                 "dlua: warning: OpenBLAS runs its generic %s kernels on this CPU, which can "
                 "run its %s kernels (matrix products several times faster). OpenBLAS was "
                 "loaded before dlua, so dlua leaves it as it is: set "
                 "OPENBLAS_CORETYPE=%s in the environment before the program starts.\n",
                 c.detected.c_str(), better, better);
    c.chosen_by = "host";
    return;
  }
  if (!select_blas_core(better)) return;
  c.chosen_by = "dlua";
}

}  // namespace

void select_blas_core_at_load() { select_at_load(); }

int cpu_simd_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return 5;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 4;
  if (__builtin_cpu_supports("avx")) return 3;
  return 0;
}

const char* better_blas_core(std::string_view detected, int cpu_level) {
  // Only a core older than AVX is a fallback: OpenBLAS picking an AVX2 core on an
  // AVX-512 CPU is its own decision (some CPUs run AVX-512 slowly), and stands.
  if (core_level(detected) > 0) return nullptr;
  switch (cpu_level) {
    case 5: return "SkylakeX";
    case 4: return "Haswell";
    case 3: return "Sandybridge";
    default: return nullptr;
  }
}

bool select_blas_core(const char* core) {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) return false;
  const char* old = std::getenv("OPENBLAS_CORETYPE");
  std::string saved = old ? old : "";
  setenv("OPENBLAS_CORETYPE", core, 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  if (old) setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else unsetenv("OPENBLAS_CORETYPE");
  return core_level(openblas_get_corename()) == core_level(core);
}

BlasInfo blas_info() {
  BlasInfo info;
  info.core = openblas_get_corename();
  info.detected = choice().detected.empty() ? info.core : choice().detected;
  info.chosen_by = choice().chosen_by.empty() ? "openblas" : choice().chosen_by;
  info.config = openblas_get_config();
  info.threads = openblas_get_num_threads();
  return info;
}

}  // namespace dl

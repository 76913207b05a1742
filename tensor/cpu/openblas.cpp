// OpenBLAS, loaded on first use, and choosing a better set of its kernels when it falls
// back to a generic one on a CPU it does not recognise.
//
// Note [Loading OpenBLAS on first use]
// The engine does not link OpenBLAS: the first matrix product that needs it (not the
// small ones: Note [Small products of matrices] in small_gemm.cpp), solve or decomposition
// loads it (dlopen, as the CUDA plugin is loaded) and looks up the functions of
// openblas.h's lists. Loading it costs more than anything else in starting a process:
// its relocations and libgfortran's, its CPU detection and the start of its threads
// were about half of `dlua -e ''` (docs/performance.md, "Measurements behind the
// code"). A script or an
// embedding host that never multiplies large matrices (pointwise work, a small model's
// products) never pays it; one that does pays it once, at its first product.
//   - The library is the one the build found (pkg-config's libdir for openblas), else
//     whatever the loader finds for libopenblas.so.0.
//   - When the process has OpenBLAS already (a host linked it), the engine uses that
//     copy and leaves its kernels alone (below).
//   - dl.set_num_threads before the first product is applied as OpenBLAS loads.
//   - dl.config() reports the BLAS, so it loads it.
// A missing library or function is an error of the op that needed it, naming the
// library; the next product tries again.
//
// Note [Choosing OpenBLAS's core]
// Debian's OpenBLAS is built with DYNAMIC_ARCH: when it loads, it reads the CPU's
// family and model and picks one of its kernel sets. A CPU newer than the library (an
// AMD server CPU under some hypervisors, for one) gets the generic Prescott set, which
// uses SSE3 only: GEMM runs several times slower than with the AVX2 or AVX-512 sets the
// CPU can run (bench/ref.c `sgemm`; docs/performance.md, "OpenBLAS's kernels").
//
// So when the engine loads OpenBLAS, it looks at the core OpenBLAS picked. When that is
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
//   - when OpenBLAS was in the process before the engine's first product (a host that
//     uses OpenBLAS itself, perhaps while other threads run products): then it prints
//     one warning that names the variable to set, once per process.
// The engine swaps the kernel table while it loads the library, before any product of
// its own, and no one else has it: no product is in flight.
#include "tensor/cpu/openblas.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tensor/backend.h"
#include "tensor/error.h"

#ifndef DL_OPENBLAS_LIBRARY
#define DL_OPENBLAS_LIBRARY "libopenblas.so.0"
#endif

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
  bool host = false;      // the process had OpenBLAS before the engine loaded it
};

Choice& choice() {
  static Choice c;
  return c;
}

std::atomic<bool> g_loaded{false};
std::atomic<int> g_pending_threads{0};   // openblas_set_threads before the load

#define DL_STR_(x) #x
#define DL_STR(x) DL_STR_(x)

cpu::OpenBlas load() {
  // Already in the process (its own handle, or the host's copy): RTLD_NOLOAD finds it
  // by path or by soname without loading anything.
  const char* names[] = {DL_OPENBLAS_LIBRARY, "libopenblas.so.0"};
  void* lib = nullptr;
  for (const char* n : names)
    if ((lib = dlopen(n, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD))) break;
  choice().host = lib != nullptr;
  std::string why;
  for (const char* n : names) {
    if (lib) break;
    lib = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (!lib) why += std::string(why.empty() ? "" : "; ") + dlerror();
  }
  if (!lib)
    fail(ErrorKind::Internal, "OpenBLAS could not be loaded, and matrix products, solves and "
         "decompositions need it (Debian: libopenblas0): ", why);
  cpu::OpenBlas ob;
  auto find = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (!fn) fail(ErrorKind::Internal, "the OpenBLAS loaded (", DL_OPENBLAS_LIBRARY,
                  ") has no function ", symbol, ", which the engine calls");
  };
#define DL_FIND_CBLAS(name) find(ob.name, #name);
#define DL_FIND_LAPACK(name) find(ob.name, DL_STR(LAPACK_##name));
#define DL_FIND_LAPACK_STRINGS(name) find(ob.name, DL_STR(LAPACK_##name##_base));
  DL_OPENBLAS_CBLAS(DL_FIND_CBLAS)
  DL_OPENBLAS_LAPACK(DL_FIND_LAPACK)
  DL_OPENBLAS_LAPACK_STRINGS(DL_FIND_LAPACK_STRINGS)
#undef DL_FIND_CBLAS
#undef DL_FIND_LAPACK
#undef DL_FIND_LAPACK_STRINGS
  ob.gotoblas_dynamic_init = reinterpret_cast<void (*)(void)>(dlsym(lib, "gotoblas_dynamic_init"));
  ob.gotoblas_dynamic_quit = reinterpret_cast<void (*)(void)>(dlsym(lib, "gotoblas_dynamic_quit"));
  return ob;
}

// select_blas_core on the library being loaded.
bool swap_core(const cpu::OpenBlas& ob, const char* core) {
  if (!ob.gotoblas_dynamic_init || !ob.gotoblas_dynamic_quit) return false;
  const char* old = std::getenv("OPENBLAS_CORETYPE");
  std::string saved = old ? old : "";
  setenv("OPENBLAS_CORETYPE", core, 1);
  ob.gotoblas_dynamic_quit();
  ob.gotoblas_dynamic_init();
  if (old) setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else unsetenv("OPENBLAS_CORETYPE");
  return core_level(ob.openblas_get_corename()) == core_level(core);
}

void select_at_load(const cpu::OpenBlas& ob) {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  Choice& c = choice();
  c.detected = ob.openblas_get_corename();
  c.chosen_by = forced && *forced ? "OPENBLAS_CORETYPE" : "openblas";
  if (forced && *forced) return;
  const char* better = better_blas_core(c.detected, cpu_simd_level());
  if (!better) return;
  if (!ob.gotoblas_dynamic_init || !ob.gotoblas_dynamic_quit) return;
  if (c.host) {
    std::fprintf(stderr,
                 "dlua: warning: OpenBLAS runs its generic %s kernels on this CPU, which can "
                 "run its %s kernels (matrix products several times faster). OpenBLAS was "
                 "loaded before dlua, so dlua leaves it as it is: set "
                 "OPENBLAS_CORETYPE=%s in the environment before the program starts.\n",
                 c.detected.c_str(), better, better);
    c.chosen_by = "host";
    return;
  }
  if (!swap_core(ob, better)) return;
  c.chosen_by = "dlua";
}

}  // namespace

namespace cpu {

const OpenBlas& openblas() {
  static const OpenBlas ob = [] {
    OpenBlas loaded = load();
    select_at_load(loaded);
    // Publish first, then read the pending count; openblas_set_threads stores first,
    // then reads the flag. With both pairs sequentially consistent, at least one side
    // sees the other's store, so a count set during the load is never lost (applying
    // it twice is harmless; a caller that sees the flag waits in openblas() for this
    // initialiser to finish).
    g_loaded.store(true);
    if (int n = g_pending_threads.load()) loaded.openblas_set_num_threads(n);
    return loaded;
  }();
  return ob;
}

bool openblas_loaded() noexcept { return g_loaded.load(); }

void openblas_set_threads(int n) {
  g_pending_threads.store(n);
  if (openblas_loaded()) openblas().openblas_set_num_threads(n);
}

}  // namespace cpu

void select_blas_core_at_load() { select_at_load(cpu::openblas()); }

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

bool select_blas_core(const char* core) { return swap_core(cpu::openblas(), core); }

BlasInfo blas_info() {
  const cpu::OpenBlas& ob = cpu::openblas();
  BlasInfo info;
  info.core = ob.openblas_get_corename();
  info.detected = choice().detected.empty() ? info.core : choice().detected;
  info.chosen_by = choice().chosen_by.empty() ? "openblas" : choice().chosen_by;
  info.config = ob.openblas_get_config();
  info.threads = ob.openblas_get_num_threads();
  return info;
}

}  // namespace dl

// OpenBLAS, loaded on the first matrix product, solve or decomposition instead of with
// the engine (Note [Loading OpenBLAS on first use] in openblas.cpp).
//
//   const OpenBlas& ob = openblas();            // loads it, or throws what went wrong
//   ob.cblas_sgemm(CblasRowMajor, ...);          // each member is the function of that name
//   ob.sgetrs("T", &n, &k, a, &n, ipiv, b, &n, &info, 1);   // LAPACK: trailing string lengths
#pragma once
#include <cblas.h>
#include <lapack.h>

// Each LAPACK routine taking characters takes their lengths after its arguments (the
// gfortran ABI); the calls in lapack.cpp pass them.
#ifndef LAPACK_FORTRAN_STRLEN_END
#error "lapack.h without LAPACK_FORTRAN_STRLEN_END: lapack.cpp passes the string lengths at the end"
#endif

namespace dl::cpu {

// Every function the engine calls: CBLAS and OpenBLAS's own by their names, LAPACK by
// the names of lapack.h's macros without the prefix: sgetrf is LAPACK_sgetrf (the Fortran
// symbol sgetrf_), and a routine taking characters, sgetrs, is LAPACK_sgetrs_base.
#define DL_OPENBLAS_CBLAS(X)                                                                  \
  X(cblas_sgemm) X(cblas_dgemm) X(cblas_sgemv) X(cblas_dgemv) X(cblas_sdot) X(cblas_ddot)    \
  X(cblas_strsm) X(cblas_dtrsm)                                                               \
  X(openblas_get_corename) X(openblas_get_config) X(openblas_get_num_threads)                 \
  X(openblas_set_num_threads)
#define DL_OPENBLAS_LAPACK(X) \
  X(sgetrf) X(dgetrf) X(sgeqrf) X(dgeqrf) X(sorgqr) X(dorgqr)
#define DL_OPENBLAS_LAPACK_STRINGS(X) \
  X(sgetrs) X(dgetrs) X(spotrf) X(dpotrf) X(ssyevd) X(dsyevd) X(sgesdd) X(dgesdd)

struct OpenBlas {
#define DL_CBLAS_MEMBER(name) decltype(&::name) name = nullptr;
#define DL_LAPACK_MEMBER(name) decltype(&::LAPACK_##name) name = nullptr;
#define DL_LAPACK_STRINGS_MEMBER(name) decltype(&::LAPACK_##name##_base) name = nullptr;
  DL_OPENBLAS_CBLAS(DL_CBLAS_MEMBER)
  DL_OPENBLAS_LAPACK(DL_LAPACK_MEMBER)
  DL_OPENBLAS_LAPACK_STRINGS(DL_LAPACK_STRINGS_MEMBER)
#undef DL_CBLAS_MEMBER
#undef DL_LAPACK_MEMBER
#undef DL_LAPACK_STRINGS_MEMBER
  // Present in DYNAMIC_ARCH builds only (Note [Choosing OpenBLAS's core]); else null.
  void (*gotoblas_dynamic_init)(void) = nullptr;
  void (*gotoblas_dynamic_quit)(void) = nullptr;
};

// The loaded library: the first call loads it (one thread does, the others wait) and
// picks its kernels; throws ErrorKind::Internal naming the library when it cannot be
// loaded, and the next call tries again.
const OpenBlas& openblas();
// Whether it is loaded (by this process's engine), without loading it.
bool openblas_loaded() noexcept;
// OpenBLAS's thread count for the largest products: now if it is loaded, else as it
// loads.
void openblas_set_threads(int n);

}  // namespace dl::cpu

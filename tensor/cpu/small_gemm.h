// The engine's own loop for small products of matrices (Note [Small products of
// matrices] in small_gemm.cpp), which tensor/cpu/matmul.cpp runs in place of OpenBLAS's
// gemm where small_gemm_takes() says so.
#pragma once

#include <cstdint>

namespace dl::cpu {

// Whether an m x k by k x n product of T (float or double) runs in the loop: it is small
// enough for this CPU's build (larger with AVX-512 where b's rows or columns are
// contiguous: bjs or bks, as below, is 1), and this CPU has a build of the loop (every
// x86-64 CPU with AVX2 and FMA).
template <typename T>
bool small_gemm_takes(int64_t m, int64_t n, int64_t k, int64_t bks, int64_t bjs);

// Where a product is cut into parts (rows or columns of c, each part a small_gemm call
// of its own), cuts at multiples of these keep every build's tiles whole.
constexpr int64_t kSmallGemmRowCut = 24, kSmallGemmColumnCut = 32;

// c (m x n, row-major, ld ldc) = a b, where a(i, p) = a[i ars + p aks] and
// b(p, j) = b[p bks + j bjs]. Only where small_gemm_takes(m, n, k, bks, bjs). Each element
// is the same chain of operations however the product is cut into parts.
void small_gemm(const float* a, int64_t ars, int64_t aks, const float* b, int64_t bks, int64_t bjs, float* c,
                int64_t ldc, int64_t m, int64_t n, int64_t k);
void small_gemm(const double* a, int64_t ars, int64_t aks, const double* b, int64_t bks, int64_t bjs, double* c,
                int64_t ldc, int64_t m, int64_t n, int64_t k);

}  // namespace dl::cpu

// The CUDA fft_c2c (tensor/kernels.def): each output frequency of each row summed
// directly over the row, n^2 work, with the CPU's twiddles (tensor/fft.h, Note [The
// CPU's transform]); in double for both dtypes, as the CPU's.
#include "gpu/common.h"
#include "gpu/loops.cuh"
#include "tensor/fft.h"

namespace dl::gpu {

namespace {

template <typename T>
__global__ void __launch_bounds__(kThreads)
dft_rows(const T* x, T* out, int64_t rows, int64_t n, bool inverse) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * n; t += stride) {
    const int64_t r = t / n, k = t % n;
    const T* in = x + r * 2 * n;
    double re = 0, im = 0;
    int64_t jk = 0;   // j k mod n, stepped without a product that could overflow
    for (int64_t j = 0; j < n; ++j) {
      const fft::Complex w = fft::twiddle(jk, n, inverse);
      const double a = double(in[2 * j]), b = double(in[2 * j + 1]);
      re += a * w.re - b * w.im;
      im += a * w.im + b * w.re;
      jk += k;
      if (jk >= n) jk -= n;
    }
    out[2 * t] = T(re);
    out[2 * t + 1] = T(im);
  }
}

}  // namespace

void fft_c2c(const Tensor& out, const Tensor& x, bool inverse) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && x.dim() >= 2 && x.size(x.dim() - 1) == 2);
  if (x.numel() == 0) return;
  const int64_t n = x.size(x.dim() - 2), rows = x.numel() / (2 * n);
  const DeviceContext& c = activate(x, "fft");
  DL_DISPATCH_FLOAT(x.dtype(), "fft", {
    dft_rows<scalar_t><<<grid_for(rows * n, c), kThreads, 0, c.stream>>>(x.data<scalar_t>(), out.data<scalar_t>(),
                                                                          rows, n, inverse);
  });
  check_launch("fft");
}

}  // namespace dl::gpu

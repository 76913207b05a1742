// The CUDA fft_c2c, fft_r2c and fft_c2r (tensor/kernels.def). Rows of up to kDirect
// values are summed directly, one thread an output, in double for both dtypes with the
// CPU's twiddles (tensor/fft.h); a longer row goes to cuFFT (batched plans, kept in a
// small cache per device, their work area from the device's caching allocator), and a
// pass over the bins gives the weights of Note [A real signal's transform] in
// tensor/cpu/fft.cpp. cuFFT computes in the data's precision: float32 rows longer than
// kDirect are not summed in double as the CPU's are, and agree with them to float32's
// rounding over log n stages, not bit for bit.
#include <cufft.h>

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

#include "gpu/common.h"
#include "gpu/loops.cuh"
#include "tensor/fft.h"

namespace dl::gpu {

namespace {

// sum_j x_j w^(+-jk) over a row of n complex pairs, or of n reals when `real`
template <typename T>
__device__ fft::Complex bin_sum(const T* in, int64_t n, int64_t k, bool inverse, bool real) {
  double re = 0, im = 0;
  int64_t jk = 0;   // j k mod n, stepped without a product that could overflow
  for (int64_t j = 0; j < n; ++j) {
    const fft::Complex w = fft::twiddle(jk, n, inverse);
    const double a = double(in[real ? j : 2 * j]), b = real ? 0.0 : double(in[2 * j + 1]);
    re += a * w.re - b * w.im;
    im += a * w.im + b * w.re;
    jk += k;
    if (jk >= n) jk -= n;
  }
  return {re, im};
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
dft_rows(const T* x, T* out, int64_t rows, int64_t n, bool inverse) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * n; t += stride) {
    const fft::Complex c = bin_sum(x + (t / n) * 2 * n, n, t % n, inverse, false);
    out[2 * t] = T(c.re);
    out[2 * t + 1] = T(c.im);
  }
}

// bin k of a real row, the bins strictly between 0 and n/2 times weight
template <typename T>
__global__ void __launch_bounds__(kThreads)
r2c_rows(const T* x, T* out, int64_t rows, int64_t n, double weight) {
  const int64_t bins = n / 2 + 1, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * bins; t += stride) {
    const int64_t k = t % bins;
    const fft::Complex c = bin_sum(x + (t / bins) * n, n, k, false, true);
    const bool edge = k == 0 || 2 * k == n;
    out[2 * t] = T(edge ? c.re : weight * c.re);
    out[2 * t + 1] = T(edge ? 0.0 : weight * c.im);
  }
}

// value j of the real signal of a row of bins: Re y_0 + weight sum_(0<k<n/2) Re(y_k w^-jk)
// + Re y_(n/2) (-1)^j
template <typename T>
__global__ void __launch_bounds__(kThreads)
c2r_rows(const T* y, T* out, int64_t rows, int64_t n, double weight) {
  const int64_t bins = n / 2 + 1, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * n; t += stride) {
    const int64_t r = t / n, j = t % n;
    const T* in = y + r * 2 * bins;
    double v = double(in[0]);
    int64_t jk = 0;
    for (int64_t k = 1; k < bins; ++k) {
      jk += j;
      if (jk >= n) jk -= n;
      const fft::Complex w = fft::twiddle(jk, n, true);
      const double term = double(in[2 * k]) * w.re - double(in[2 * k + 1]) * w.im;
      v += 2 * k == n ? double(in[2 * k]) * w.re : weight * term;
    }
    out[t] = T(v);
  }
}

// ---- cuFFT ------------------------------------------------------------------------------

// Rows this short are summed directly: n^2 work is no more than a cuFFT launch costs, and
// the sums are in double, as the CPU's.
constexpr int64_t kDirect = 16;

[[noreturn]] void throw_cufft(cufftResult r, const char* op, const char* what) {
  fail(r == CUFFT_ALLOC_FAILED ? ErrorKind::Memory : ErrorKind::Internal, op, ": cuFFT failed while ", what,
       " (status ", int(r), ")");
}
void check_cufft(cufftResult r, const char* op, const char* what) {
  if (r != CUFFT_SUCCESS) throw_cufft(r, op, what);
}

// A batched plan of `rows` transforms of length n, of one type: made without a work area
// of its own (cufftSetAutoAllocation 0), so that each run takes its work area from the
// caching allocator. Each device keeps the kPlans plans it used last; an older one is
// destroyed once the device's stream is idle.
struct Plan {
  int64_t n, rows;
  cufftType type;
  cufftHandle handle;
  size_t work;
};

class Plans {
 public:
  // Runs `exec(handle)` on the device's plan, made if missing, bound to the device's
  // stream and a work area; the lock is held while the transform is enqueued, as the
  // plan's work area and stream are set per run. (The device is current: activate.)
  template <typename Exec>
  void run(const DeviceContext& c, int64_t n, int64_t rows, cufftType type, const char* op, Exec exec) {
    std::lock_guard<std::mutex> g(mu_);
    Plan& p = find(c, n, rows, type, op);
    Scratch work(p.work ? p.work : 1, c.index, op);
    check_cufft(cufftSetStream(p.handle, c.stream), op, "binding its plan to the device's stream");
    check_cufft(cufftSetWorkArea(p.handle, work.as<void>()), op, "setting its plan's work area");
    check_cufft(exec(p.handle), op, "running the transform");
  }

 private:
  static constexpr size_t kPlans = 16;

  Plan& find(const DeviceContext& c, int64_t n, int64_t rows, cufftType type, const char* op) {
    if (by_device_.size() <= size_t(c.index)) by_device_.resize(size_t(c.index) + 1);
    std::list<Plan>& plans = by_device_[size_t(c.index)];
    for (auto it = plans.begin(); it != plans.end(); ++it)
      if (it->n == n && it->rows == rows && it->type == type) {
        plans.splice(plans.begin(), plans, it);   // most recent first
        return plans.front();
      }
    if (plans.size() == kPlans) {
      check_cuda(cudaStreamSynchronize(c.stream), op, "retiring an old transform plan");
      check_cufft(cufftDestroy(plans.back().handle), op, "destroying an old plan");
      plans.pop_back();
    }
    Plan p{n, rows, type, 0, 0};
    cufftResult r = make(p);
    if (r == CUFFT_ALLOC_FAILED) {   // (cuFFT's own tables: give it the cached blocks, once)
      empty_cache();
      r = make(p);
    }
    if (r != CUFFT_SUCCESS) throw_cufft(r, op, "making a plan");
    plans.push_front(p);
    return plans.front();
  }

  // (no embeddings: rows one after another, as the kernels' contracts)
  static cufftResult make(Plan& p) {
    cufftResult r = cufftCreate(&p.handle);
    if (r != CUFFT_SUCCESS) return r;
    long long len = p.n;
    r = cufftSetAutoAllocation(p.handle, 0);
    if (r == CUFFT_SUCCESS) r = cufftMakePlanMany64(p.handle, 1, &len, nullptr, 1, 0, nullptr, 1, 0, p.type, p.rows, &p.work);
    if (r != CUFFT_SUCCESS) cufftDestroy(p.handle);
    return r;
  }

  std::mutex mu_;
  std::vector<std::list<Plan>> by_device_;
};

Plans& plans() {
  static Plans* p = new Plans;   // never destroyed: plans outlive static destruction order
  return *p;
}

// cuFFT reads a complex or real row from an address aligned to a complex value (8 bytes
// for float32, 16 for float64); a view into a batch may start between (x:narrow(1, 2, k)
// of rows of odd length). Such an input is read from an aligned copy.
template <typename T>
const T* aligned(const DeviceContext& c, const T* data, size_t count, std::optional<Scratch>& copy, const char* op) {
  if (reinterpret_cast<uintptr_t>(data) % (2 * sizeof(T)) == 0) return data;
  copy.emplace(count * sizeof(T), c.index, op);
  check_cuda(cudaMemcpyAsync(copy->as<T>(), data, count * sizeof(T), cudaMemcpyDeviceToDevice, c.stream), op,
             "copying a misaligned input");
  return copy->as<T>();
}

template <typename T> constexpr bool kDouble = std::is_same_v<T, double>;
template <typename T> using Pair = std::conditional_t<kDouble<T>, cufftDoubleComplex, cufftComplex>;
template <typename T> using Real = std::conditional_t<kDouble<T>, cufftDoubleReal, cufftReal>;

// In place on rows of bins from cuFFT's R2C: the bins strictly between 0 and n/2 times 2,
// bin 0's and n/2's imaginary parts exactly 0.
template <typename T>
__global__ void __launch_bounds__(kThreads)
double_bins(T* z, int64_t rows, int64_t n) {
  const int64_t bins = n / 2 + 1, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * bins; t += stride) {
    const int64_t k = t % bins;
    if (k == 0 || 2 * k == n) z[2 * t + 1] = T(0);
    else z[2 * t] *= T(2), z[2 * t + 1] *= T(2);
  }
}

// The same for weight 1: only bin 0's and n/2's imaginary parts, a thread a row.
template <typename T>
__global__ void __launch_bounds__(kThreads)
real_edges(T* z, int64_t rows, int64_t n) {
  const int64_t bins = n / 2 + 1, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    z[2 * r * bins + 1] = T(0);
    if (n % 2 == 0) z[2 * (r * bins + bins - 1) + 1] = T(0);
  }
}

// y's bins into `to`, ready for cuFFT's C2R (which counts the bins between twice and
// overwrites its input): those bins times weight / 2, bin 0's and n/2's imaginary parts 0.
template <typename T>
__global__ void __launch_bounds__(kThreads)
halve_bins(const T* y, T* to, int64_t rows, int64_t n, T half_weight) {
  const int64_t bins = n / 2 + 1, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < rows * bins; t += stride) {
    const int64_t k = t % bins;
    const bool edge = k == 0 || 2 * k == n;
    to[2 * t] = edge ? y[2 * t] : y[2 * t] * half_weight;
    to[2 * t + 1] = edge ? T(0) : y[2 * t + 1] * half_weight;
  }
}

template <typename T>
void cufft_r2c(const DeviceContext& c, const Tensor& out, const Tensor& x, int64_t rows, int64_t n, int64_t weight) {
  std::optional<Scratch> copy;
  const T* data = aligned(c, x.data<T>(), size_t(rows * n), copy, "rfft");
  auto* in = const_cast<Real<T>*>(reinterpret_cast<const Real<T>*>(data));
  auto* bins = reinterpret_cast<Pair<T>*>(out.data<T>());
  plans().run(c, n, rows, kDouble<T> ? CUFFT_D2Z : CUFFT_R2C, "rfft", [&](cufftHandle h) {
    if constexpr (kDouble<T>) return cufftExecD2Z(h, in, bins);
    else return cufftExecR2C(h, in, bins);
  });
  if (weight == 2) double_bins<T><<<grid_for(rows * (n / 2 + 1), c), kThreads, 0, c.stream>>>(out.data<T>(), rows, n);
  else real_edges<T><<<grid_for(rows, c), kThreads, 0, c.stream>>>(out.data<T>(), rows, n);
}

template <typename T>
void cufft_c2r(const DeviceContext& c, const Tensor& out, const Tensor& y, int64_t rows, int64_t n, int64_t weight) {
  const int64_t bins = n / 2 + 1;
  Scratch copy(size_t(rows * bins) * 2 * sizeof(T), c.index, "irfft");
  halve_bins<T><<<grid_for(rows * bins, c), kThreads, 0, c.stream>>>(y.data<T>(), copy.as<T>(), rows, n,
                                                                      T(0.5 * double(weight)));
  check_launch("irfft");
  auto* in = copy.as<Pair<T>>();
  auto* signal = reinterpret_cast<Real<T>*>(out.data<T>());
  plans().run(c, n, rows, kDouble<T> ? CUFFT_Z2D : CUFFT_C2R, "irfft", [&](cufftHandle h) {
    if constexpr (kDouble<T>) return cufftExecZ2D(h, in, signal);
    else return cufftExecC2R(h, in, signal);
  });
}

template <typename T>
void cufft_c2c(const DeviceContext& c, const Tensor& out, const Tensor& x, int64_t rows, int64_t n, bool inverse) {
  std::optional<Scratch> copy;
  const T* data = aligned(c, x.data<T>(), size_t(rows * n * 2), copy, "fft");
  auto* in = const_cast<Pair<T>*>(reinterpret_cast<const Pair<T>*>(data));
  auto* to = reinterpret_cast<Pair<T>*>(out.data<T>());
  const int sign = inverse ? CUFFT_INVERSE : CUFFT_FORWARD;
  plans().run(c, n, rows, kDouble<T> ? CUFFT_Z2Z : CUFFT_C2C, "fft", [&](cufftHandle h) {
    if constexpr (kDouble<T>) return cufftExecZ2Z(h, in, to, sign);
    else return cufftExecC2C(h, in, to, sign);
  });
}

}  // namespace

void fft_r2c(const Tensor& out, const Tensor& x, int64_t weight) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && x.dim() >= 1 && (weight == 1 || weight == 2));
  if (x.numel() == 0) return;
  const int64_t n = x.size(x.dim() - 1), rows = x.numel() / n;
  const DeviceContext& c = activate(x, "rfft");
  DL_DISPATCH_FLOAT(x.dtype(), "rfft", {
    if (n > kDirect) cufft_r2c<scalar_t>(c, out, x, rows, n, weight);
    else r2c_rows<scalar_t><<<grid_for(rows * (n / 2 + 1), c), kThreads, 0, c.stream>>>(
        x.data<scalar_t>(), out.data<scalar_t>(), rows, n, double(weight));
  });
  check_launch("rfft");
}

void fft_c2r(const Tensor& out, const Tensor& y, int64_t weight) {
  DL_ASSERT(y.is_contiguous() && out.is_contiguous() && y.dim() >= 2 && (weight == 1 || weight == 2));
  if (out.numel() == 0) return;
  const int64_t n = out.size(out.dim() - 1), rows = out.numel() / n;
  const DeviceContext& c = activate(y, "irfft");
  DL_DISPATCH_FLOAT(y.dtype(), "irfft", {
    if (n > kDirect) cufft_c2r<scalar_t>(c, out, y, rows, n, weight);
    else c2r_rows<scalar_t><<<grid_for(rows * n, c), kThreads, 0, c.stream>>>(
        y.data<scalar_t>(), out.data<scalar_t>(), rows, n, double(weight));
  });
  check_launch("irfft");
}

void fft_c2c(const Tensor& out, const Tensor& x, bool inverse) {
  DL_ASSERT(x.is_contiguous() && out.is_contiguous() && x.dim() >= 2 && x.size(x.dim() - 1) == 2);
  if (x.numel() == 0) return;
  const int64_t n = x.size(x.dim() - 2), rows = x.numel() / (2 * n);
  const DeviceContext& c = activate(x, "fft");
  DL_DISPATCH_FLOAT(x.dtype(), "fft", {
    if (n > kDirect) cufft_c2c<scalar_t>(c, out, x, rows, n, inverse);
    else dft_rows<scalar_t><<<grid_for(rows * n, c), kThreads, 0, c.stream>>>(
        x.data<scalar_t>(), out.data<scalar_t>(), rows, n, inverse);
  });
  check_launch("fft");
}

}  // namespace dl::gpu

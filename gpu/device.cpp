// Devices, their streams and cuBLAS handles, and CUDA errors as dl::Errors.
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu/common.h"
#include "tensor/allocator.h"

namespace dl::gpu {

namespace {

struct Devices {
  int count = 0;
  std::unique_ptr<DeviceContext[]> ctx;
  std::unique_ptr<std::once_flag[]> once;
  std::unique_ptr<std::atomic<bool>[]> ready;
  std::unique_ptr<std::string[]> names;
  std::mutex blas_mu;
  std::vector<cublasHandle_t> blas;
};

Devices& devices() {
  static Devices* d = new Devices();  // leaked on purpose: tensors freed at exit use it
  return *d;
}

bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

int current_device() {
  int d = -1;
  return cudaGetDevice(&d) == cudaSuccess ? d : -1;
}

}  // namespace

std::string format_bytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(n));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

void throw_cuda(cudaError_t e, const char* op, const char* what) {
  const int dev = current_device();
  cudaGetLastError();  // clears the error unless it is sticky
  std::string where = dev >= 0 ? " on cuda:" + std::to_string(dev) : std::string();
  std::string msg = std::string(op) + ": CUDA error" + where + " during " + what + ": " +
                    cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
  if (is_sticky(e)) msg += "; the CUDA context is unusable now, restart the process";
  throw Error(e == cudaErrorMemoryAllocation ? ErrorKind::Memory : ErrorKind::Internal, msg);
}

void check_launch(const char* op) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, op, "a kernel launch");
}

void throw_cublas(cublasStatus_t s, const char* op, const char* what) {
  const int dev = current_device();
  fail(s == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::Memory : ErrorKind::Internal, op,
       ": cuBLAS error on cuda:", dev, " during ", what, ": ", cublasGetStatusString(s), " (",
       cublasGetStatusName(s), ")");
}

void init_devices(int n) {
  Devices& d = devices();
  d.count = n;
  d.ctx.reset(new DeviceContext[size_t(n)]);
  d.once.reset(new std::once_flag[size_t(n)]);
  d.ready.reset(new std::atomic<bool>[size_t(n)]);
  d.names.reset(new std::string[size_t(n)]);
  d.blas.assign(size_t(n), nullptr);
  int64_t smallest = 0;   // the smallest device memory, for the collector's pace
  for (int i = 0; i < n; ++i) {
    d.ready[i].store(false);
    cudaDeviceProp prop{};
    const bool known = cudaGetDeviceProperties(&prop, i) == cudaSuccess;
    d.names[i] = known ? std::string(prop.name) : "CUDA device " + std::to_string(i);
    if (known && (smallest == 0 || int64_t(prop.totalGlobalMem) < smallest)) smallest = int64_t(prop.totalGlobalMem);
  }
  device_memory::set_device_memory(smallest);   // Note [Device bytes and the collector]
}

int device_count() { return devices().count; }

DeviceContext& activate(int device, const char* op) {
  Devices& d = devices();
  DL_CHECK(device >= 0 && device < d.count, op, ": device cuda:", device, " is not available (",
           d.count, " CUDA device", d.count == 1 ? "" : "s", ")");
  if (current_device() != device) check_cuda(cudaSetDevice(device), op, "selecting the device");
  std::call_once(d.once[device], [&] {
    DeviceContext& c = d.ctx[device];
    c.index = device;
    c.name = d.names[device];
    check_cuda(cudaDeviceGetAttribute(&c.sm_count, cudaDevAttrMultiProcessorCount, device), op,
               "querying the device");
    if (c.sm_count < 1) c.sm_count = 1;
    check_cuda(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), op, "creating the device's stream");
    d.ready[device].store(true, std::memory_order_release);
  });
  return d.ctx[device];
}

cudaStream_t device_stream(int device) noexcept {
  Devices& d = devices();
  if (device < 0 || device >= d.count || !d.ready[device].load(std::memory_order_acquire)) return nullptr;
  return d.ctx[device].stream;
}

cublasHandle_t cublas(const DeviceContext& c, const char* op) {
  Devices& d = devices();
  std::lock_guard<std::mutex> g(d.blas_mu);
  cublasHandle_t& h = d.blas[size_t(c.index)];
  if (!h) {
    cublasHandle_t fresh = nullptr;
    check_cublas(cublasCreate(&fresh), op, "creating the cuBLAS handle");
    cublasStatus_t s = cublasSetStream(fresh, c.stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(fresh);
      throw_cublas(s, op, "binding cuBLAS to the device's stream");
    }
    // A workspace of the size cuBLAS's reference recommends (cublasSetWorkspace: 32 MiB
    // on Hopper and later, 4 MiB before), which some of its GEMM kernels need; without
    // one it uses a default pool. Kept for the handle's life, outside the tensor cache
    // and its statistics; where it cannot be had, the default pool stays.
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c.index) != cudaSuccess) cudaGetLastError();
    const size_t bytes = size_t(major >= 9 ? 32 : 4) << 20;
    void* ws = nullptr;
    if (cudaMalloc(&ws, bytes) == cudaSuccess) {
      if (cublasSetWorkspace(fresh, ws, bytes) != CUBLAS_STATUS_SUCCESS) cudaFree(ws);
    } else {
      cudaGetLastError();
    }
    h = fresh;
  }
  return h;
}

unsigned grid_for(int64_t n, const DeviceContext& c, int threads) {
  const int64_t want = n / threads + (n % threads != 0);  // (n + threads - 1) overflows near 2^63
  const int64_t cap = int64_t(c.sm_count) * (2048 / threads) * 4;
  const int64_t g = want < cap ? want : cap;
  return unsigned(g < 1 ? 1 : g);
}

void synchronize(int device) {
  Devices& d = devices();
  for (int i = 0; i < d.count; ++i) {
    if ((device >= 0 && i != device) || !d.ready[i].load(std::memory_order_acquire)) continue;
    DeviceContext& c = activate(i, "cuda.synchronize");
    check_cuda(cudaStreamSynchronize(c.stream), "cuda.synchronize", "waiting for the device");
  }
}

const char* device_name(int device) {
  Devices& d = devices();
  DL_CHECK(device >= 0 && device < d.count, "cuda.get_device_name: device cuda:", device,
           " is not available");
  return d.names[device].c_str();
}

}  // namespace dl::gpu

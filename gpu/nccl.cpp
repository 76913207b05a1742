// dl.dist's NCCL backend (gpu/nccl.h): one communicator per process, on one device,
// its collectives on that device's stream.
//
// Failure: NCCL's collectives never return an error for a peer that does not come;
// they wait on the device. So dln_wait records an event after the enqueued work and
// polls it, and the communicator's asynchronous error (ncclCommGetAsyncError), every
// millisecond; at the deadline, or on an error, it aborts the communicator
// (ncclCommAbort, which ends the kernels waiting for peers), as PyTorch's NCCL
// watchdog does, and fails naming the collective. The communicator is made
// non-blocking (ncclCommInitRankConfig with blocking = 0) so that init, too, can be
// abandoned at a deadline rather than hang on a rank that never joins.
#include "gpu/nccl.h"

#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "gpu/common.h"

namespace {

struct Comm {
  ncclComm_t comm = nullptr;
  int device = -1;
  int rank = 0, size = 1;
  double timeout_s = 0;  // dist.init's: bounds init and every call that NCCL is still launching
  cudaEvent_t done = nullptr;
};
Comm g;
thread_local std::string t_error;

int fail(std::string msg) {
  t_error = std::move(msg);
  return -1;
}

bool check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return true;
  fail(std::string(what) + ": NCCL: " + ncclGetErrorString(r) +
       (g.comm ? std::string(" (") + ncclGetLastError(g.comm) + ")" : std::string()));
  return false;
}

bool check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  fail(std::string(what) + ": CUDA: " + cudaGetErrorString(e));
  return false;
}

bool nccl_type(int dtype, ncclDataType_t* out, const char* what) {
  switch (dl::DType(dtype)) {
    case dl::DType::Bool: case dl::DType::UInt8: *out = ncclUint8; return true;
    case dl::DType::Int32: *out = ncclInt32; return true;
    case dl::DType::Int64: *out = ncclInt64; return true;
    case dl::DType::Float32: *out = ncclFloat32; return true;
    case dl::DType::Float64: *out = ncclFloat64; return true;
    case dl::DType::Float16: *out = ncclFloat16; return true;
    case dl::DType::BFloat16: *out = ncclBfloat16; return true;
  }
  fail(std::string(what) + ": unknown dtype code " + std::to_string(dtype));
  return false;
}

// The device's stream, current on this thread (made on first use by the engine).
bool stream(cudaStream_t* s, const char* what) {
  if (!g.comm) {
    fail(std::string(what) + ": the NCCL backend is not initialised");
    return false;
  }
  if (!check_cuda(cudaSetDevice(g.device), what)) return false;
  try {
    *s = dl::gpu::activate(g.device, what).stream;
  } catch (const std::exception& e) {
    fail(e.what());
    return false;
  }
  return true;
}

// Waits for a non-blocking communicator's pending call until g.timeout_s has passed (no
// limit when 0). On a non-blocking communicator every call may return ncclInProgress
// (init while the ranks meet, a collective while NCCL is still launching it), and the
// next call may be made only once the communicator's state is ncclSuccess again.
bool settle(const char* what, const char* late) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(g.comm, &state) != ncclSuccess) return check(ncclInternalError, what);
    if (state == ncclSuccess) return true;
    if (state != ncclInProgress) return check(state, what);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (g.timeout_s > 0 && waited > g.timeout_s) {
      fail(std::string(what) + ": " + late + " within " + std::to_string(int(g.timeout_s)) + " s");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// A collective's return: enqueued (0), or an error (-1, the communicator aborted when it
// is NCCL's own state that failed, so that no later call waits on it).
int launched(ncclResult_t r, const char* what) {
  if (!check(r, what)) return -1;
  if (r == ncclInProgress && !settle(what, "NCCL did not finish launching it")) {
    ncclCommAbort(g.comm);
    g.comm = nullptr;
    return -1;
  }
  return 0;
}

}  // namespace

extern "C" {

const char* dln_cdef(void) {
  return
#include "nccl_cdef.inc"
      ;
}

const char* dln_error(void) { return t_error.c_str(); }

int dln_version(void) {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : -1;
}

int dln_unique_id(unsigned char* id, int64_t len) {
  ncclUniqueId u;
  if (len != int64_t(sizeof u.internal)) return fail("dist: an NCCL id has " + std::to_string(sizeof u.internal) + " bytes");
  if (!check(ncclGetUniqueId(&u), "dist.init")) return -1;
  std::memcpy(id, u.internal, sizeof u.internal);
  return 0;
}

int dln_init(const unsigned char* id, int64_t len, int rank, int size, int device, double timeout_s) {
  if (g.comm) return fail("dist: the NCCL backend is already initialised (on cuda:" + std::to_string(g.device) + ")");
  ncclUniqueId u;
  if (len != int64_t(sizeof u.internal)) return fail("dist: an NCCL id has " + std::to_string(sizeof u.internal) + " bytes");
  std::memcpy(u.internal, id, sizeof u.internal);
  if (!check_cuda(cudaSetDevice(device), "dist.init")) return -1;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (!check(ncclCommInitRankConfig(&g.comm, size, u, rank, &config), "dist.init")) {
    g.comm = nullptr;
    return -1;
  }
  g.device = device;
  g.rank = rank;
  g.size = size;
  g.timeout_s = timeout_s;
  if (!settle("dist.init", "the other ranks did not join the NCCL communicator") ||
      !check_cuda(cudaEventCreateWithFlags(&g.done, cudaEventDisableTiming), "dist.init")) {
    ncclCommAbort(g.comm);
    g.comm = nullptr;
    return -1;
  }
  return 0;
}

int dln_initialized(void) { return g.comm ? 1 : 0; }

int dln_allreduce(void* buf, int64_t count, int dtype, int op, const char* what) {
  ncclDataType_t t;
  cudaStream_t s;
  if (!nccl_type(dtype, &t, what) || !stream(&s, what)) return -1;
  static const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclMin, ncclProd, ncclAvg};
  if (op < 0 || op > 4) return fail(std::string(what) + ": unknown reduction code " + std::to_string(op));
  if (dtype == int(dl::DType::Bool) && op != 1 && op != 2)
    return fail(std::string(what) + ": cannot sum bool tensors (use max or min: any, all)");
  return launched(ncclAllReduce(buf, buf, size_t(count), t, ops[op], g.comm, s), what);
}

int dln_broadcast(void* buf, int64_t count, int dtype, int root, const char* what) {
  ncclDataType_t t;
  cudaStream_t s;
  if (!nccl_type(dtype, &t, what) || !stream(&s, what)) return -1;
  if (root < 0 || root >= g.size) return fail(std::string(what) + ": root " + std::to_string(root) + " is not a rank");
  return launched(ncclBroadcast(buf, buf, size_t(count), t, root, g.comm, s), what);
}

int dln_allgather(const void* send, void* recv, int64_t count, int dtype, const char* what) {
  ncclDataType_t t;
  cudaStream_t s;
  if (!nccl_type(dtype, &t, what) || !stream(&s, what)) return -1;
  return launched(ncclAllGather(send, recv, size_t(count), t, g.comm, s), what);
}

int dln_wait(double timeout_s, const char* what) {
  cudaStream_t s;
  if (!stream(&s, what) || !check_cuda(cudaEventRecord(g.done, s), what)) return -1;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaEventQuery(g.done);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorNotReady) return check_cuda(e, what) ? 0 : -1;
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(g.comm, &state);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if ((state != ncclSuccess && state != ncclInProgress) || (timeout_s > 0 && waited > timeout_s)) {
      const std::string why = state != ncclSuccess && state != ncclInProgress
                                  ? std::string("NCCL: ") + ncclGetErrorString(state)
                                  : "a rank did not reach it within " + std::to_string(int(timeout_s)) + " s";
      ncclCommAbort(g.comm);
      g.comm = nullptr;
      return fail(std::string(what) + ": " + why + "; the NCCL communicator was aborted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void dln_abort(void) {
  if (!g.comm) return;
  ncclCommAbort(g.comm);
  g.comm = nullptr;
}

int dln_finalize(void) {
  if (!g.comm) return 0;
  const int waited = dln_wait(0, "dist.finalize");
  if (!g.comm) return waited;
  const bool ok = check(ncclCommDestroy(g.comm), "dist.finalize");
  g.comm = nullptr;
  if (g.done) cudaEventDestroy(g.done);
  g.done = nullptr;
  return ok && waited == 0 ? 0 : -1;
}

}  // extern "C"

/* dl.dist's NCCL backend: collectives on CUDA tensors, inside the CUDA plugin
 * (libdlua_cuda.so, built with it where the CUDA Toolkit has NCCL). scripts/dlua/dist.lua
 * finds these functions in the plugin the engine loaded, declares them from this
 * header's text (dln_cdef), and keeps MPI (libdlua_dist) as the control plane: rank 0's
 * NCCL id travels by an MPI broadcast, and the ranks and their order are MPI's.
 *
 * Every collective is enqueued on the device's stream (gpu/common.h: the stream every
 * kernel of that device runs on), so it follows the work that made its buffer and
 * precedes the work that reads it, with no synchronisation. dln_wait bounds a wait by a
 * deadline: past it the communicator is aborted (ncclCommAbort) and the call fails
 * with a message naming the collective, instead of a hang. Every call returns a
 * negative value on error, with the message in dln_error(). Unverified on a device in
 * this repository's CI (docs/gpu.md). */
#ifndef DLUA_GPU_NCCL_H
#define DLUA_GPU_NCCL_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dl:cdef-begin */

const char* dln_cdef(void);
const char* dln_error(void);
/* NCCL's version code (NCCL_VERSION_CODE of the library loaded: 22809 for 2.28.9). */
int dln_version(void);
/* Rank 0 makes the job's id (128 bytes) and sends it to the others over MPI. */
int dln_unique_id(unsigned char* id, int64_t len);
/* Joins the communicator of `size` ranks on CUDA device `device`; 0, or -1 when a rank
   has not joined within timeout_s seconds (0: no limit), or on an error. */
int dln_init(const unsigned char* id, int64_t len, int rank, int size, int device, double timeout_s);
int dln_initialized(void);
/* Enqueued on the device's stream, in place. dtype: tensor/dtype.h's codes; op: 0 sum,
   1 max, 2 min, 3 product, 4 mean (NCCL's average). */
int dln_allreduce(void* buf, int64_t count, int dtype, int op, const char* what);
int dln_broadcast(void* buf, int64_t count, int dtype, int root, const char* what);
/* Every rank sends `count` elements; recv holds size * count, in rank order. */
int dln_allgather(const void* send, void* recv, int64_t count, int dtype, const char* what);
/* Waits for the collectives enqueued so far, at most timeout_s seconds (0: no limit). */
int dln_wait(double timeout_s, const char* what);
/* ncclCommAbort: collectives in flight end; the communicator is gone. */
void dln_abort(void);
/* ncclCommDestroy after the enqueued work; 0, or -1. */
int dln_finalize(void);

/* dl:cdef-end */

#ifdef __cplusplus
}
#endif
#endif

/* libdlua_dist: dl.dist's communication plugin (docs/design.md, "Plugins load on first
 * use": the core and every program that does not train across processes load no MPI).
 * scripts/dlua/dist.lua loads it with LuaJIT's FFI when dist.init() finds itself under
 * mpirun, and declares these functions from this header's text (dld_cdef).
 *
 *   dld_init(...)                  MPI_Init_thread (SERIALIZED at least) and a duplicate
 *                                  of the world communicator for every collective
 *   dld_allreduce(buf, n, dtype, op, 0, "dist.allreduce", seq, "train.lua:37")
 *                                  a collective, watched against its deadlines
 *
 * Every call returns a negative value (or NULL) on error, with the message in
 * dld_error(). Buffers are host memory of a dlua dtype (tensor/dtype.h's codes); the
 * caller keeps them alive until the work is waited for. Ranks are 0-based, as mpirun
 * numbers them. Calls come from one thread at a time (MPI_THREAD_SERIALIZED). */
#ifndef DLUA_DIST_H
#define DLUA_DIST_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dl:cdef-begin */

const char* dld_cdef(void);
const char* dld_error(void);

/* 0 started (or already running: 1), -1 error. */
int dld_init(void);
int dld_initialized(void);
int dld_rank(void);
int dld_size(void);
int dld_local_rank(void);
int dld_local_size(void);
/* MPI_Finalize, after every work is waited for; 0, or -1. */
int dld_finalize(void);
/* MPI_Abort on the job's communicator: ends every rank. Does not return. */
void dld_abort(int code);
/* The MPI library's version line. */
const char* dld_library_version(void);

/* Every collective below is made by the calling thread and watched (Note [Stalls] in
   dist/mpi.cpp): `what` names it in the messages of a stall ("dist.allreduce"), with its
   sequence number `seq` and, when not NULL, the script's `site` ("train.lua:37"). A
   rank waiting longer than warn_s says so on stderr; one waiting longer than abort_s
   says so and exits with code 1 (mpirun then ends the job). */
void dld_set_deadlines(double warn_s, double abort_s);

/* With async = 0 the collective is done when the call returns 0; with async = 1 the
   call returns a work id (> 0) that dld_wait finishes. -1: error. Reduction ops: 0 sum,
   1 max, 2 min, 3 product. */
int64_t dld_allreduce(void* buf, int64_t count, int dtype, int op, int async, const char* what, int64_t seq,
                      const char* site);
int64_t dld_broadcast(void* buf, int64_t count, int dtype, int root, int async, const char* what,
                      int64_t seq, const char* site);
/* Each rank sends `count` elements; recv holds the sum of counts[] (every rank's count,
   known to all, see dld_allgather_i64) in rank order. */
int64_t dld_allgatherv(const void* send, int64_t count, void* recv, const int64_t* counts, int dtype,
                       int async, const char* what, int64_t seq, const char* site);
int64_t dld_barrier(int async, const char* what, int64_t seq, const char* site);
/* Blocking: every rank's `mine` into all[size]. */
int dld_allgather_i64(int64_t mine, int64_t* all, const char* what, int64_t seq, const char* site);

/* Finishes an asynchronous collective: 0, or -1 on error. */
int dld_wait(int64_t work, const char* what, int64_t seq, const char* site);
/* 1 done (and forgotten), 0 pending, -1 error. */
int dld_test(int64_t work);

/* Reduces n buffers of one dtype as one (op as dld_allreduce): src[i] is read, dst[i]
   receives the result (it may be src[i]). The buffers are copied into buckets of about
   bucket_bytes (the last buffer first, as a backward pass makes them; the first
   bucket at most first_bytes), each bucket reduced with one MPI_Allreduce, then copied
   out, multiplied by `scale` when it is not 1. A buffer of 64 KiB or more (or of a
   bucket's size) is reduced in its dst, without a copy. 0, or -1 on error. */
int dld_allreduce_many(const void* const* src, void* const* dst, const int64_t* counts, int n,
                       int dtype, int op, double scale, int64_t bucket_bytes, int64_t first_bytes,
                       const char* what, int64_t seq, const char* site);

/* Compares `desc` (lines, one per source) across ranks (watched as the collective
   `what` `seq` `site` that it precedes): 0 the same on every rank, 1 not
   (the message, naming the first line that differs and the ranks, in dld_error()), -1
   error. */
int dld_check_same(const char* desc, int64_t len, const char* what, int64_t seq, const char* site);

/* Reduction overlapped with the backward pass (Note [Overlap] in dist/mpi.cpp): the
   struct dl_grad_hook (bindings/capi.h) to give dl_grad_hook_arm. The pass that takes
   it reduces every gradient as dld_allreduce_many would (op as dld_allreduce, results
   multiplied by scale, in the gradients' own memory), each bucket started on a
   communication thread as soon as its gradients are final. NULL on error. */
const void* dld_reducer(int op, double scale, int64_t bucket_bytes, int64_t first_bytes, const char* what,
                        int64_t seq, const char* site);
/* After the pass: 1 its gradients were reduced; 0 no pass took the hook, or the pass
   declined it (the ranks' inputs differ, or are not all in host memory, or cannot be
   reduced with this op): reduce them with dld_allreduce_many, whose checks say why;
   -1 error (dld_error). */
int dld_reducer_result(void);
/* Since dld_init: out[0] passes reduced by the hook, out[1] their buckets, out[2]
   seconds spent in the buckets' collectives, out[3] seconds the passes' ends waited
   for them (the communication the backward pass did not hide). */
void dld_reducer_stats(double* out);

/* dl:cdef-end */

#ifdef __cplusplus
}
#endif
#endif

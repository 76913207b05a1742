/* The C ABI of the dlua engine, called by the Lua module (scripts/dlua/) through the
 * LuaJIT FFI.
 *
 *   uint64_t x = dl_full(shape, 2, 1.0, dl_default_dtype(), NULL);  // ones(2, 3)
 *   struct dl_tensor tx = {x}, y;
 *   int st = dl_binary_scalar(dl_op_id("add"), &tx, 1.0, 0, &y);    // x + 1
 *   if (st < 0) fprintf(stderr, "%s\n", dl_last_error());
 *   if (st == 1) dl_release(&y);                                     // y was a handle
 *   dl_release_id(x);
 *
 * Conventions (Note [The C ABI]):
 * - A tensor is a handle: a uint64_t id, (generation << 32 | slot) into a handle table
 *   of engine tensors, below 2^53 so that it survives a trip through a Lua number. 0 is
 *   never a valid id. Every call validates its ids: a released, stale or forged id is
 *   the error "op: invalid tensor", never a crash. The hot entry points (metadata,
 *   elements, the pointwise and reduction families) take a struct dl_tensor instead,
 *   which is a handle or a small tensor held inline by the caller (see below).
 * - No C++ exception crosses this ABI. A function returning a handle returns 0 on
 *   failure; a function returning int returns 0 on success and -1 on failure; then
 *   dl_last_error() (thread-local) holds the message, which starts with the op's name
 *   and names the shapes/dtypes, and dl_last_error_kind() its dl::ErrorKind.
 * - Dims and indices are given in the Lua convention and converted here: 1-based, and
 *   negative counts from the end (-1 is the last). Where a dim is optional, 0 means
 *   "none". Index tensors (index_select, gather, scatter_add) hold 1-based indices;
 *   argmax/argmin and max/min over a dim return 1-based indices.
 * - Sizes and counts that come back to Lua come back as doubles (exact below 2^53),
 *   so the interpreter boxes no 64-bit integer.
 * - Ops go through the recording layer (autograd/autograd.h, dl::ag), so gradients
 *   are taken of whatever a script computes.
 * - Nothing here calls back into Lua (docs/design.md, "C++ never calls Lua").
 * - dtype codes are dl::DType's values (bool 0, uint8 1, int32 2, int64 3, float32 4,
 *   float64 5); a device is a string ("cpu", "cuda", "cuda:1") or NULL for the cpu.
 *
 * The text between the cdef markers is plain C that LuaJIT's ffi.cdef parses: the
 * build copies it into dl_cdef(), so the Lua side declares exactly this header.
 */
#ifndef DLUA_BINDINGS_CAPI_H
#define DLUA_BINDINGS_CAPI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The declarations below, as one string for ffi.cdef (generated at build time). */
const char* dl_cdef(void);

/* dl:cdef-begin */
/* A tensor on the Lua side (docs/design.md, "Tensors are FFI struct values"): a struct value of
   const scalars, never an array (an array field would be indexable past its end). Either a handle
   (id != 0), or a small host tensor whose value lives inline (id == 0, Note [Small tensors inline]
   in bindings/value.cpp): its dtype code, ndim, numel, the sizes one byte each (sizes >> 8*d for
   dim d) and up to 64 bytes of elements, row-major, from inl_v0 on. An inline tensor is an
   immutable value that nothing else refers to, collected by Lua with nothing to release; whatever
   needs its identity (a view, an in-place write, a gradient) first makes it a handle in place with
   dl_promote. A small recorded value also names where its history is kept while its gradient is
   taken (inl_arena != 0, slot inl_slot; Note [Recorded values in arenas] in bindings/arenas.cpp);
   once that arena is discarded it is a plain value. A host passes only values the engine wrote (a
   malformed header is refused, but a bool element must hold 0 or 1, as in dl_from_ptr). */
struct dl_tensor {
  const uint64_t id;
  const uint8_t inl_dtype, inl_ndim, inl_numel, inl_pad8;
  const uint32_t inl_slot;
  const uint64_t inl_sizes;
  const uint64_t inl_arena;
  const uint64_t inl_v0, inl_v1, inl_v2, inl_v3, inl_v4, inl_v5, inl_v6, inl_v7;
};

/* Everything about a tensor in one call. */
typedef struct dl_meta {
  int32_t ndim;
  int32_t dtype;
  int32_t device_type;   /* 0 cpu, 1 cuda */
  int32_t device_index;
  int32_t contiguous;
  int32_t requires_grad;
  double numel;
  double offset;         /* in elements */
  double sizes[8];
  double strides[8];     /* in elements */
} dl_meta;

/* ---- errors, version ---- */
int dl_abi_version(void);
const char* dl_last_error(void);
int dl_last_error_kind(void);

/* ---- the op table (tensor/ops.def), queried once at load time ---- */
int dl_op_count(void);
const char* dl_op_name(int op);      /* Lua name: "add", "log_softmax" */
int dl_op_family(int op);            /* 0 unary, 1 binary, 2 compare, 3 reduce, 4 other */
int dl_op_arity(int op);
unsigned dl_op_flags(int op);        /* 1 differentiable, 2 float only, 4 no bool, 8 int exact */
int dl_op_id(const char* lua_name);  /* -1 when unknown */

/* ---- dtypes, devices, random numbers ---- */
int dl_dtype_count(void);
const char* dl_dtype_name(int dtype);
int dl_dtype_code(const char* name);         /* accepts aliases ("float", "long"); -1: error */
int dl_dtype_size(int dtype);
int dl_default_dtype(void);
int dl_set_default_dtype(int dtype);
/* PyTorch's promotion: the dtype of a (op) b for tensors a and b, or for a and the number
 * s when b is 0 (-1: error); the promotion of two dtypes; whether a result of dtype `from`
 * may be written into a tensor of dtype `to` (1 or 0). */
int dl_result_type(uint64_t a, uint64_t b, double s);
int dl_promote_types(int a, int b);
int dl_can_cast(int from, int to);
/* 0 when a tensor of `dtype` can hold the number v (a fill's check, tensor/ops.h check_fits);
 * -1 with op's error otherwise. */
int dl_check_fits(const char* op, double v, int dtype);
int dl_check_device(const char* device);     /* 0 when the name parses */
int dl_cuda_available(void);                /* loads the CUDA plugin on first use */
int dl_cuda_device_count(void);
const char* dl_cuda_status(void);            /* why CUDA is not available, or what is used */
int dl_cuda_synchronize(int device);         /* device -1: every device */
/* in_use, cached, peak_in_use, device_free, device_total */
int dl_cuda_memory_stats(int device, double* out5);
int dl_cuda_device_name(int device, char* out, int size);
void dl_cuda_empty_cache(void);              /* cached device blocks back to the driver */
/* Where creation ops put tensors when given no device (dl.device("cuda", f)). */
int dl_set_default_device(const char* device);
const char* dl_default_device(void);
double dl_device_bytes_in_use(void);         /* device tensors, for the collector */
void dl_manual_seed(double seed);
double dl_initial_seed(void);
void dl_rng_state(double* out2);                     /* seed, offset (blocks read so far) */
int dl_set_rng_state(double seed, double offset);

/* ---- handles and memory ---- */
void dl_release(const struct dl_tensor* t);  /* releases t's handle (nothing for inline t) */
void dl_release_id(uint64_t id);             /* what the Lua side's sweep calls for a dead value */
int dl_valid(uint64_t id);                   /* 1 for a live handle */
uint64_t dl_alias(uint64_t id);              /* a second handle to the same tensor */
/* Makes t a handle in place (when it is inline) and returns its id, 0 on error. */
uint64_t dl_promote(struct dl_tensor* t);
/* Hands the tensor of handle `id` to Lua in *out: inline when it is small, plain and
   unaliased (the handle is released; returns 0), else as the handle itself (1); -1 when
   id is not a live handle. Ops that return a struct dl_tensor do the same for their
   results: 0 inline, 1 a handle that must be released once its value dies, -1 error. */
int dl_deliver(uint64_t id, struct dl_tensor* out);
double dl_live_handles(void);
/* Bytes the engine has allocated since the process started, updated as handles are
   made: the Lua wrapper reads it to step its collector (docs/design.md, "Tensor memory
   and Lua's collector"). */
const double* dl_allocated_total(void);
/* in_use, cached, peak_in_use, limit, live handles */
void dl_memory_stats(double* out5);
void dl_set_memory_limit(double bytes);      /* 0: none */
int dl_set_num_threads(int n);               /* CPU threads of this thread's ops, n >= 1 */
int dl_get_num_threads(void);
/* OpenBLAS's kernels: field 0 the core running, 1 the one OpenBLAS detected, 2 who chose
   ("openblas", "dlua", "OPENBLAS_CORETYPE", "host"), 3 its build configuration, 4 its
   thread count, as text (tensor/cpu/openblas.cpp); NULL for another field. */
const char* dl_blas_info(int field);
/* Autocast of this thread (Note [Autocast] in tensor/half_ops.h): sets it, and returns
   the previous state as enabled * 256 + dtype code; -1 on error (a dtype that is not
   float16 or bfloat16). */
int dl_set_autocast(int enabled, int dtype);
const char* dl_engine_dir(void);             /* where the engine library lies, "/" ended ("" unknown) */
void dl_empty_cache(void);
void dl_trim_idle_cache(void);

/* ---- metadata and elements ---- */
int dl_meta_get(const struct dl_tensor* x, dl_meta* out);
int dl_ndim(const struct dl_tensor* x);                    /* -1 on error */
double dl_numel(const struct dl_tensor* x);                /* -1 on error */
int dl_dtype(const struct dl_tensor* x);                   /* -1 on error */
int dl_item(const struct dl_tensor* x, double* out);       /* one-element tensors, any dtype */
/* x[i] and x[i] = v for a 1-D tensor (i 1-based): 0 done, 2 done and the dtype is bool,
   1 not done, no error: not a 1-D tensor, or (dl_get1) one being differentiated, whose
   x[i] must stay a tensor; -1 error. */
int dl_get1(const struct dl_tensor* x, int64_t i, double* out);
int dl_set1(uint64_t id, int64_t i, double v);
int dl_read(const struct dl_tensor* x, double* out, int64_t n);  /* all values, row-major */
int dl_read_at(const struct dl_tensor* x, const int64_t* idx0, double* out); /* 0-based multi-index */
int dl_data_ptr(uint64_t id, double* out);   /* address of element 0, as a number */
/* The memory behind dl_data_ptr was written from outside the engine: values recorded
   for a gradient from it are stale now (its storage's version moves on). */
int dl_mark_written(uint64_t id);

/* ---- creation ---- */
uint64_t dl_empty(const int64_t* shape, int ndim, int dtype, const char* device);
uint64_t dl_zeros(const int64_t* shape, int ndim, int dtype, const char* device);
uint64_t dl_ones(const int64_t* shape, int ndim, int dtype, const char* device);
uint64_t dl_full(const int64_t* shape, int ndim, double value, int dtype, const char* device);
uint64_t dl_arange(double start, double stop, double step, int dtype, const char* device);
uint64_t dl_linspace(double start, double stop, int64_t n, int dtype, const char* device);
uint64_t dl_eye(int64_t n, int64_t m, int dtype, const char* device);
uint64_t dl_rand(const int64_t* shape, int ndim, int dtype, const char* device);
uint64_t dl_randn(const int64_t* shape, int ndim, int dtype, const char* device);
uint64_t dl_randint(double lo, double hi, const int64_t* shape, int ndim, int dtype,
                    const char* device);
uint64_t dl_randperm(int64_t n, int dtype);
uint64_t dl_from_values(const double* values, int64_t n, const int64_t* shape, int ndim,
                        int dtype, const char* device);
/* Zero-copy view of foreign host memory; strides in elements (NULL: row-major). The
   memory must cover every element, and a bool tensor's bytes must each be 0 or 1. */
uint64_t dl_from_ptr(void* data, const int64_t* shape, int ndim, const int64_t* strides,
                     int dtype);

/* ---- the op families of tensor/ops.def ---- */
/* Results in *out, as dl_deliver: 0 inline, 1 a handle, -1 error. */
int dl_unary(int op, const struct dl_tensor* x, struct dl_tensor* out);
int dl_binary(int op, const struct dl_tensor* a, const struct dl_tensor* b,
              struct dl_tensor* out);
int dl_binary_scalar(int op, const struct dl_tensor* a, double s, int scalar_first,
                     struct dl_tensor* out);
int dl_binary_(int op, uint64_t a, uint64_t b);               /* a = a op b */
int dl_binary_scalar_(int op, uint64_t a, double s);          /* a = a op s */
int dl_compare(int op, const struct dl_tensor* a, const struct dl_tensor* b,
               struct dl_tensor* out);
int dl_compare_scalar(int op, const struct dl_tensor* a, double s, int scalar_first,
                      struct dl_tensor* out);
/* dims: 1-based, ndims 0 for every dim; correction for var/std, p for norm. */
int dl_reduce(int op, const struct dl_tensor* x, const int32_t* dims, int ndims, int keepdim,
              double correction, double p, struct dl_tensor* out);

/* ---- the other ops, one entry each ---- */
int dl_max_dim(uint64_t x, int dim, int keepdim, uint64_t* out2);   /* values, indices */
int dl_min_dim(uint64_t x, int dim, int keepdim, uint64_t* out2);
uint64_t dl_argmax(uint64_t x, int dim, int keepdim);               /* dim 0: flattened */
uint64_t dl_argmin(uint64_t x, int dim, int keepdim);
uint64_t dl_cumsum(uint64_t x, int dim);    /* dim 1-based (negative from the end) */
uint64_t dl_cumprod(uint64_t x, int dim);
uint64_t dl_fft_c2c(uint64_t x, int inverse);   /* x (..., n, 2) pairs, along dim -2, unnormalised */
uint64_t dl_fft_r2c(uint64_t x, int weight);    /* real x (..., n) -> bins (..., n/2 + 1, 2) */
uint64_t dl_fft_c2r(uint64_t y, int64_t n, int weight);   /* bins (..., n/2 + 1, 2) -> (..., n) */
int dl_sort(uint64_t x, int dim, int descending, uint64_t* out2);   /* values, 1-based indices */
uint64_t dl_nonzero(uint64_t x);            /* (count, ndim) 1-based positions */
uint64_t dl_searchsorted(uint64_t seq, uint64_t values, int right);   /* in [1, n + 1] */
uint64_t dl_softmax(uint64_t x, int dim);
uint64_t dl_log_softmax(uint64_t x, int dim);
/* softmax (log = 0) or log_softmax (log = 1) of a value along dim (1-based, or negative
   from the end), into *out: deferred inside a compiled call (dl.compile). */
int dl_softmax_value(const struct dl_tensor* x, int dim, int log, struct dl_tensor* out);
/* A view in a compiled call (dl.compile), of a promised result or of a tensor held by a
   handle, deferred as a step of the call: which 0 reshape, 1 view (shape, n), 2
   transpose (d1, d2), 3 squeeze (d1, 0 for every dim of size 1), 4 unsqueeze (d1), dims
   1-based or negative. 2 or 3 with the promise in *out, -1 on error, -2 when not
   deferred (then dl_view and the others). */
int dl_view_value(const struct dl_tensor* x, int which, const int64_t* shape, int n, int d1, int d2,
                  struct dl_tensor* out);
uint64_t dl_where(uint64_t cond, uint64_t a, uint64_t b);
uint64_t dl_clamp(uint64_t x, double lo, double hi, int has_lo, int has_hi);
uint64_t dl_masked_fill(uint64_t x, uint64_t mask, double value);
uint64_t dl_matmul(uint64_t a, uint64_t b);
/* decompositions and solves (dl.linalg), batched over leading dims; results fill
   out2/out3 in order, all or none */
uint64_t dl_linalg_solve(uint64_t a, uint64_t b);
uint64_t dl_solve_triangular(uint64_t a, uint64_t b, int upper, int unitriangular);
uint64_t dl_cholesky(uint64_t a);
int dl_qr(uint64_t a, int complete, uint64_t* out2);           /* Q, R */
int dl_eigh(uint64_t a, uint64_t* out2);                       /* eigenvalues, eigenvectors */
int dl_svd(uint64_t a, int full_matrices, uint64_t* out3);     /* U, S, Vh */
int dl_slogdet(uint64_t a, uint64_t* out2);                    /* sign, log|det| */
/* matmul of two values (inline or handles; never a view of either), delivered as
   dl_unary's results; what the Lua side calls. */
int dl_matmul_value(const struct dl_tensor* a, const struct dl_tensor* b, struct dl_tensor* out);
uint64_t dl_to(uint64_t x, int dtype);
uint64_t dl_to_device(uint64_t x, const char* device);
uint64_t dl_contiguous(uint64_t x);
uint64_t dl_clone(uint64_t x);
uint64_t dl_view(uint64_t x, const int64_t* shape, int ndim);
uint64_t dl_reshape(uint64_t x, const int64_t* shape, int ndim);
uint64_t dl_transpose(uint64_t x, int d1, int d2);
uint64_t dl_permute(uint64_t x, const int32_t* dims, int ndims);
uint64_t dl_narrow(uint64_t x, int dim, int64_t start, int64_t length);
/* start..stop by step, stop inclusive; both clamped to the dim as Python slices are. */
uint64_t dl_slice(uint64_t x, int dim, int64_t start, int64_t stop, int64_t step);
uint64_t dl_select(uint64_t x, int dim, int64_t index);
uint64_t dl_expand(uint64_t x, const int64_t* shape, int ndim);
uint64_t dl_squeeze(uint64_t x, int dim);                           /* dim 0: every size-1 dim */
uint64_t dl_unsqueeze(uint64_t x, int dim);
uint64_t dl_flatten(uint64_t x, int start_dim, int end_dim);
uint64_t dl_cat(const uint64_t* xs, int n, int dim);
uint64_t dl_stack(const uint64_t* xs, int n, int dim);
uint64_t dl_index_select(uint64_t x, int dim, uint64_t index);
uint64_t dl_gather(uint64_t x, int dim, uint64_t index);
uint64_t dl_scatter_add(uint64_t x, int dim, uint64_t index, uint64_t src);
int dl_copy_(uint64_t dst, uint64_t src);
int dl_set_(uint64_t x, uint64_t source);   /* x becomes source (its storage, view and history), in place */
int dl_fill_(uint64_t x, double value);
/* ---- autograd (bindings/capi_autograd.cpp; the Lua side is scripts/dlua/autograd.lua) ---- */
/* A gradient scope; each opens an arena for the small values recorded in it (Note
   [Recorded values in arenas] in bindings/arenas.cpp). Closing the outermost leaves its
   arena pending: dl_arena_done discards it once the gradient is taken. dl_arena_hold holds
   the arena closed last for the caller (a GradientTape's record) until
   dl_arena_free(serial) (0: nothing to hold). */
int dl_grad_enter(void);
int dl_grad_exit(void);
void dl_arena_done(void);
double dl_arena_hold(void);
void dl_arena_free(double serial);
double dl_arena_values(void);
int dl_no_grad_enter(void);
int dl_no_grad_exit(void);
/* Recording back on inside dl_no_grad_enter's scope (torch.enable_grad); every
   dl_grad_enter opens one too. */
int dl_enable_grad_enter(void);
int dl_enable_grad_exit(void);
int dl_is_recording(void);
uint64_t dl_watch(uint64_t x);
/* dl_watch for a value: the watched alias of an inline x is a value in the arena (its
   memory is no script-visible tensor's); of a handle, a handle. 0, 1 or -1 as
   dl_unary. */
int dl_watch_value(const struct dl_tensor* x, struct dl_tensor* out);
uint64_t dl_detach(uint64_t x);
int dl_requires_grad(uint64_t x);
int dl_mark_variable(uint64_t x);
int dl_is_variable(uint64_t x);
int dl_set_frozen(uint64_t x, int frozen);   /* v:requires_grad_(false): no implicit gradient */
int dl_varlog_push(void);
int dl_varlog_probe(void);   /* dl_varlog_push's log, for asking which Variables a call used (it collects nothing) */
int dl_varlog_count(void);
int dl_varlog_depth(void);   /* 1 while a collecting log (dl_varlog_push's) is open on this thread, else 0 */
uint64_t dl_varlog_get(int i);
int dl_varlog_pop(void);
int dl_backward_begin(const uint64_t* outs, int nout, const uint64_t* grad_outs,
                      const uint64_t* ins, int nin, int create_graph, int retain_graph);
int dl_backward_run(int task);
double dl_backward_custom_ref(int task);
int dl_backward_pending(int task, uint64_t* out, int n);
int dl_backward_supply(int task, const uint64_t* grads, int n);
int dl_backward_results(int task, uint64_t* out, int n);
void dl_backward_free(int task);
/* The whole backward pass in one call (begin with create_graph while recording, run,
   results, free): 1 with the gradients' handles in res[0..nin-1]; 0 when the graph holds
   a custom gradient, the task then left in *task for the calls above to drive; -1 on error
   (no task left). */
int dl_backward_once(const uint64_t* outs, int nout, const uint64_t* grad_outs,
                     const uint64_t* ins, int nin, int retain_graph, uint64_t* res, int* task);
/* dl_backward_once for one output and one input given as values: 0 or 1 with the
   gradient in *out (inline or a handle), 2 when a custom gradient left *task to drive
   (dl_backward_results then gives the gradient), -1 on error. */
int dl_backward_one(const struct dl_tensor* y, const struct dl_tensor* x, struct dl_tensor* out,
                    int* task);
/* dl_backward_one for n inputs inside a compiled call (dl.compile), where the scope's
   pass may run from its recorded plan: 4 with a promised gradient in each outs[k], 1
   with handles, 2 when a custom gradient left *task to drive, -1 on error, -2 when it
   is not the call's (or no call is in progress): then dl_backward_once. */
int dl_backward_many(const struct dl_tensor* y, const struct dl_tensor* const* xs, int n,
                     struct dl_tensor* const* outs, int* task);
int dl_custom_record(const uint64_t* ins, int nin, uint64_t* outs, int nout, double ref);
/* A gradient-ready hook (Note [Gradient-ready hook] in bindings/capi_autograd.cpp): the
   next backward pass on this thread that records nothing (create_graph off) takes it.
   begin(ctx, n, numels, dtypes, host) describes the pass's n inputs (host: 1 for host
   memory); a nonzero return declines the hook. Then ready(ctx, k, data, numel, dtype)
   once per input k (0-based) when its gradient is final, in contiguous memory that the
   gradient result alone owns and that the hook may write until end(ctx, ok) returns;
   end is called before the results are handed out (ok = 0: the pass failed), and a
   negative return fails the pass. The hook's functions never call into dlua. */
struct dl_grad_hook {
  void* ctx;
  int (*begin)(void* ctx, int n, const int64_t* numels, const int* dtypes, const int* host);
  void (*ready)(void* ctx, int k, void* data, int64_t numel, int dtype);
  int (*end)(void* ctx, int ok);
};
void dl_grad_hook_arm(const struct dl_grad_hook* h);
/* Disarms it: 1 when a pass took it (begin accepted), else 0. */
int dl_grad_hook_disarm(void);
int dl_dead_custom_refs(double* out, int n);
int dl_watch_inplace(uint64_t x);            /* GradientTape.watch: x itself becomes differentiable */
int dl_watch_done(uint64_t x);               /* its tape's recording ended: x may be written in place again */
double dl_tensor_key(uint64_t x);            /* the same number for every handle of one tensor */
/* ---- files (bindings/capi_io.cpp; the Lua side is scripts/dlua/io.lua, checkpoint.lua,
   summary.lua, progress.lua) ---- */
/* A loaded file or a summary writer: an id in a table of its own (not a tensor id). */
struct dl_io_object { const uint64_t id; };
void dl_io_release(struct dl_io_object o);   /* the ffi.gc finalizer; closes a writer */
void dl_io_release_id(uint64_t id);
/* safetensors (io/safetensors.h), written atomically; strings as (pointer, length). */
int dl_save_safetensors(const char* path, int n, const char* const* names,
                        const int64_t* name_lens, const uint64_t* tensors, int nmeta,
                        const char* const* meta_keys, const int64_t* key_lens,
                        const char* const* meta_values, const int64_t* value_lens);
uint64_t dl_load_safetensors(const char* path);        /* a loaded file: all or nothing */
/* images: uint8 (C, H, W) from a file's bytes (channels 0: as stored); and back to PNG or
   JPEG bytes, valid until the thread's next dl_image_encode (NULL on failure) */
uint64_t dl_image_decode(const void* data, uint64_t n, int channels, const char* name);
const char* dl_image_encode(uint64_t x, const char* format, int quality, const char* name, uint64_t* n);
int dl_loaded_counts(uint64_t file, double* out2);     /* tensors, metadata entries */
const char* dl_loaded_name(uint64_t file, int i, double* len);     /* i 0-based */
uint64_t dl_loaded_tensor(uint64_t file, int i);
const char* dl_loaded_meta(uint64_t file, int i, int value, double* len);  /* key, or value */
uint64_t dl_load_idx(const char* path);                /* MNIST format, plain or gzip */
uint64_t dl_load_idx_ubyte_as_float(const char* path, double divisor);  /* float32 = ubyte / divisor */
int dl_write_file_atomic(const char* path, const char* data, int64_t n);
/* Exported graphs (export/model.h), loaded to run from Lua (dl.export.load). */
uint64_t dl_graph_load(const char* path);              /* a loaded graph: all or nothing */
int dl_graph_counts(uint64_t g, double* out3);         /* inputs, outputs, nodes */
const char* dl_graph_input_name(uint64_t g, int i);    /* i 0-based */
int dl_graph_run(uint64_t g, const uint64_t* ins, int nin, uint64_t* outs, int nout);
int dl_make_dirs(const char* path);                    /* mkdir -p */
/* TensorBoard event files (io/events.h). */
uint64_t dl_summary_open(const char* logdir, const char* suffix);
const char* dl_summary_path(uint64_t w);
int dl_summary_scalar(uint64_t w, const char* tag, int64_t tag_len, double value, int64_t step);
int dl_summary_histogram(uint64_t w, const char* tag, int64_t tag_len, uint64_t values,
                         int64_t step, int buckets);
int dl_summary_flush(uint64_t w);
int dl_summary_close(uint64_t w);                      /* flushes; a second close does nothing */
/* The terminal and clocks, for progress bars. */
int dl_isatty(int fd);
int dl_terminal_columns(int fd);                       /* 0 when unknown */
double dl_monotonic_time(void);                        /* seconds */
double dl_wall_time(void);                             /* seconds since the Unix epoch */
/* ---- neural networks (bindings/capi_nn.cpp; tensor/nn.h) ---- */
/* Images are NCHW (or CHW for one image), conv weights OIHW; (h, w) pairs are passed
   as two ints; an optional tensor is 0 when absent. */
uint64_t dl_conv2d(uint64_t x, uint64_t weight, uint64_t bias, int stride_h, int stride_w,
                   int pad_h, int pad_w, int dilation_h, int dilation_w, int groups);
/* The gradients of conv2d for its input and its weight, as ops of their own. */
uint64_t dl_conv2d_input_grad(uint64_t grad, uint64_t weight, const int64_t* input_shape,
                              int ndim, int stride_h, int stride_w, int pad_h, int pad_w,
                              int dilation_h, int dilation_w, int groups);
uint64_t dl_conv2d_weight_grad(uint64_t x, uint64_t grad, const int64_t* weight_shape, int ndim,
                               int stride_h, int stride_w, int pad_h, int pad_w, int dilation_h,
                               int dilation_w, int groups);
/* weight (in_channels, out_channels / groups, kH, kW); out_pad smaller than the stride. */
uint64_t dl_conv_transpose2d(uint64_t x, uint64_t weight, uint64_t bias, int stride_h,
                             int stride_w, int pad_h, int pad_w, int out_pad_h, int out_pad_w,
                             int dilation_h, int dilation_w, int groups);
/* Pools: stride 0 means the kernel size; padding at most half the kernel. max_pool2d's
   indices are 1-based positions h * W + w + 1 within each (H, W) plane. */
int dl_max_pool2d(uint64_t x, int kernel_h, int kernel_w, int stride_h, int stride_w,
                  int pad_h, int pad_w, int ceil_mode, uint64_t* out2);  /* values, indices */
/* The maxima alone: faster when no gradient is taken (the indices are made only then). */
uint64_t dl_max_pool2d_values(uint64_t x, int kernel_h, int kernel_w, int stride_h,
                              int stride_w, int pad_h, int pad_w, int ceil_mode);
uint64_t dl_max_pool2d_backward(uint64_t grad, uint64_t indices, const int64_t* input_shape,
                                int ndim);
uint64_t dl_avg_pool2d(uint64_t x, int kernel_h, int kernel_w, int stride_h, int stride_w,
                       int pad_h, int pad_w, int ceil_mode, int count_include_pad);
uint64_t dl_avg_pool2d_backward(uint64_t grad, const int64_t* input_shape, int ndim,
                                int kernel_h, int kernel_w, int stride_h, int stride_w,
                                int pad_h, int pad_w, int ceil_mode, int count_include_pad);
uint64_t dl_global_avg_pool2d(uint64_t x, int keepdim);        /* mean over H and W */
/* training 0 (evaluation) or p 0: x itself, under a new handle. */
uint64_t dl_dropout(uint64_t x, double p, int training);
/* weight, bias, running_mean, running_var: 0 for none. Training normalises by the batch
   statistics and updates the running ones in place; evaluation uses the running ones. */
uint64_t dl_batch_norm(uint64_t x, uint64_t weight, uint64_t bias, uint64_t running_mean,
                       uint64_t running_var, int training, double momentum, double eps);
/* Each row over the last `normalized` dims normalised, then times weight plus bias (0: none). */
uint64_t dl_layer_norm(uint64_t x, int normalized, uint64_t weight, uint64_t bias, double eps);
/* An LSTM step's pointwise half: gates (..., 4H), the pre-activations in PyTorch's order
   i, f, g, o, and the cell state c (..., H) give h' and c'. */
int dl_lstm_gates(uint64_t gates, uint64_t c, uint64_t* out2);   /* h', c' */
/* indices: 1-based rows of weight; padding_idx: 1-based (negative from the end), 0: none. */
uint64_t dl_embedding(uint64_t weight, uint64_t indices, int64_t padding_idx);
/* logits (N, C), target (N) of 1-based class labels; reduction 0 none, 1 mean, 2 sum; with
   has_ignore, rows whose label equals ignore_index count for nothing. */
uint64_t dl_cross_entropy(uint64_t logits, uint64_t target, int reduction, int has_ignore,
                          int64_t ignore_index);
/* The same over values (the result in *out: 0 inline, 1 a handle, 2 or 3 a compiled call's
   proxy, -1 error), deferred in a compiled call when there is no ignore_index. */
int dl_cross_entropy_value(const struct dl_tensor* logits, const struct dl_tensor* target, int reduction,
                           int has_ignore, int64_t ignore_index, struct dl_tensor* out);

/* ---- fused optimizer updates (tensor/optim.h), in place; not recorded ---- */
/* buf: the momentum buffer (0 when momentum is 0); first: buf is written, not read. */
int dl_sgd_step_(uint64_t p, uint64_t g, uint64_t buf, double lr, double momentum, double dampening,
                 double weight_decay, int nesterov, int first);
/* vmax: the amsgrad maximum, 0 without amsgrad; step: 1-based, after this update. */
int dl_adam_step_(uint64_t p, uint64_t g, uint64_t m, uint64_t v, uint64_t vmax, double lr,
                  double beta1, double beta2, double eps, double weight_decay, int decoupled,
                  double step);
/* ---- dl.compile (bindings/capi_compile.cpp; the Lua side is scripts/dlua/compile.lua) ---- */
/* While a compiled call is in progress, the op families above may return 2 instead of
   0 or 1: *out is then a proxy, the promise of a deferred result (Note [Proxies]), and
   3 is the same for an op just recorded into the trace. The Lua side keeps every proxy
   referenced until the call ends, then settles each. */
struct dl_compiled { const uint64_t id; };
/* A compiled function's id; 0 on error. defer_small: ops on small tensors held by
   handles are deferred too (Note [Small handles run at once] in bindings/compile.h). */
uint64_t dl_compile_new(const char* name, int defer_small);
void dl_compile_release(struct dl_compiled f);      /* the ffi.gc finalizer of its object */
int dl_compile_begin(uint64_t f);                   /* starts the thread's call of f */
int dl_compile_active(void);                        /* 1 while a call is in progress */
int dl_compile_return(const struct dl_tensor* x);   /* the call returns x (a proxy) */
/* Runs what the call still defers (every result when keep_all, as after an error): 1
   when the call recorded ops (Lua then marks what outlived it: dl_compile_keep,
   dl_compile_analysed), 0, -1 on error. */
int dl_compile_finish(int keep_all);
/* A proxy of the call becomes its value in place: 0 (inline, or expired: its result was
   never written), 1 (a handle, to be tracked), 2 (not a proxy of the call), -1 error. */
int dl_compile_settle(struct dl_tensor* x);
void dl_compile_keep(uint32_t pos);                 /* op pos's result outlived the call */
void dl_compile_analysed(void);
void dl_compile_line(uint32_t pos, const char* where);   /* "chunk:line" of a recorded op */
const char* dl_compile_end(void);                   /* ends the call: a warning to print, or NULL */
const char* dl_compile_report(uint64_t f);          /* what dl.compile.explain shows */
/* Ends the thread's compiled call, if one is left in progress by an error that unwound
   through it (its proxies become errors when read); the runtime calls it after a failed
   call, the Lua side before a call finds one it did not start. */
void dl_compile_abandon(void);
/* Sets the thread's compiled call aside (its pending steps run first) so that ops run
   eagerly until dl_compile_resume, as dl.vmap's inside a compiled function (Note
   [Suspended calls] in compile/trace.h): 1 if one was set aside, 0 if none is in
   progress, -1 on error (a pending step's). */
int dl_compile_suspend(void);
void dl_compile_resume(void);                       /* takes the call set aside up again */
/* ---- dl.export (bindings/capi_export.cpp; the Lua side is scripts/dlua/export.lua) ---- */
/* A capture of the ops this thread runs (Note [Strict capture] in export/capture.cpp):
   begin with the inputs, run the function, name its results, end. Captures are kept,
   numbered from 0, until dl_export_clear. While one runs, reading a tensor's values into
   Lua (item, comparisons, x[i] of a 1-D tensor) is an error that starts "export:". */
int dl_export_begin(const uint64_t* xs, const char* const* names, int n);
int dl_export_output(uint64_t y);
int dl_export_end(void);                  /* the capture's number, or -1 */
void dl_export_abort(void);               /* ends a capture an error left in progress */
int dl_export_active(void);               /* 1 while this thread captures (and is not paused) */
/* dl.while_loop inside a capture (Note [Loops] in export/capture.cpp): its condition,
   then its body, each captured as a graph of its own on the state xs (sub_begin, the
   function, sub_output per result, sub_end); then the loop runs eagerly while the
   capture is paused (pause 1, then 0); dl_export_loop adds the loop node, from the
   state before and after. */
int dl_export_sub_begin(const uint64_t* xs, int n);
int dl_export_sub_output(uint64_t y);
int dl_export_sub_end(void);
int dl_export_pause(int pause);
int dl_export_loop(const uint64_t* init, const uint64_t* final, int n);
int dl_export_symbols(int capture, const char* const* names, int n);
/* Capture `first` ran with the symbols' values base[0..n), `second` with at[0..n),
   which differ in symbol sym alone (0-based; -1: none). 0, or -1 when the captures
   disagree (dl_last_error). */
int dl_export_unify(int first, int second, int sym, const double* base, const double* at, int n);
int dl_export_name(int capture, uint64_t x, const char* name);   /* the constant made from x */
int dl_export_save(int capture, const char* path, const char* const* meta, int nmeta);
/* Its JSON, its summary as text (each valid until the next call of either). */
const char* dl_export_graph(int capture);
const char* dl_export_describe(int capture);
void dl_export_clear(void);
/* dl.vmap (scripts/dlua/vmap.lua, export/vmap.h): a capture begun with dl_vmap_begin
   (its messages start "vmap:") on one example, ended with dl_export_end, then run on
   a batch: input i is batched[i] (its examples along dim 0, `batch` of them) or shared.
   The number of results (their handles in out, out_batched[k] 1 where a result is
   batched), or -1. dl_vmap_looped(k): the k-th op (0-based) of the last run that had
   no batching rule and ran once per example, or NULL. */
int dl_vmap_begin(const uint64_t* xs, int n);
int dl_vmap_run(int capture, const uint64_t* xs, const int* batched, int n, int64_t batch, uint64_t* out,
                int* out_batched, int nout);
const char* dl_vmap_looped(int k);
/* dl.export.onnx: the graph of the .dlg file `dlg` as an ONNX model (opset 17) */
int dl_export_onnx(const char* dlg, const char* onnx_path, int opset);
/* ---- background jobs (Dataset:prefetch; bindings/capi_jobs.cpp) ---- */
/* Each starts engine work on the worker thread and returns its job id (0 on error). */
uint64_t dl_job_index_select(uint64_t x, int dim, uint64_t index);  /* dim 0-based */
uint64_t dl_job_narrow(uint64_t x, int64_t start, int64_t length);   /* rows, 0-based, contiguous copy */
uint64_t dl_job_image_decode(const void* data, uint64_t n, int channels, const char* name);
uint64_t dl_job_wait(uint64_t job);    /* the job's tensor as a new handle, 0 on its error */
int dl_job_drop(uint64_t job);         /* waits and discards the result */
/* dl:cdef-end */

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* DLUA_BINDINGS_CAPI_H */

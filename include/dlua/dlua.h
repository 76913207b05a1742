/* dlua embedding API for C: the C++ API of <dlua/dlua.hpp> with status codes.
 *
 *   #include <dlua/dlua.h>
 *
 *   float pos[256] = {0};
 *   dlua_options o; dlua_options_init(&o);
 *   o.sandbox = 1; o.time_limit = 0.05;
 *   dlua_runtime* rt;
 *   if (dlua_open(&o, &rt) != DLUA_OK) { fputs(dlua_open_error(), stderr); return 1; }
 *   dlua_run_string(rt, "function step(p, dt) p:add_(dt) return p:sum():item() end");
 *   int64_t shape[1] = {256};
 *   dlua_tensor* p; dlua_tensor_from_blob(pos, shape, 1, DLUA_FLOAT32, &p);
 *   dlua_value args[2] = {dlua_tensor_value(p), dlua_number(0.5)}, total;
 *   if (dlua_call(rt, "step", args, 2, &total, 1) != DLUA_OK)
 *     fprintf(stderr, "%s\n%s\n", dlua_errmsg(rt), dlua_traceback(rt));
 *   dlua_tensor_release(p);   (take the buffer back: the script's tensor is revoked)
 *   dlua_tensor_free(p);
 *   dlua_close(rt);
 *
 * Every function returns a status (DLUA_OK is 0); on failure dlua_errmsg(rt) and
 * dlua_traceback(rt) describe the last error of that runtime, and functions without a
 * runtime (tensors) put it in dlua_last_error(), per thread. No C++ exception and no
 * Lua error ever crosses this API.
 *
 * Ownership: a dlua_tensor* is a reference; each one you get (from_blob, new, results
 * of dlua_call/dlua_get_global) is freed with dlua_tensor_free. Strings in results
 * stay valid until the next call on the same runtime.
 */
#ifndef DLUA_DLUA_H
#define DLUA_DLUA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlua_status {
  DLUA_OK = 0,
  DLUA_ERR_RUNTIME = 1,      /* a script error */
  DLUA_ERR_SYNTAX = 2,
  DLUA_ERR_MEMORY = 3,       /* Lua heap limit (the state was replaced by a fresh one) */
  DLUA_ERR_TIMEOUT = 4,      /* time limit (the state was replaced by a fresh one) */
  DLUA_ERR_INTERRUPTED = 5,
  DLUA_ERR_TYPE = 6,         /* a value cannot cross the boundary as asked */
  DLUA_ERR_FILE = 7,
  DLUA_ERR_ARG = 8           /* a bad argument to this API (NULL runtime ...) */
} dlua_status;

typedef enum dlua_dtype {
  DLUA_BOOL = 0, DLUA_UINT8 = 1, DLUA_INT32 = 2, DLUA_INT64 = 3,
  DLUA_FLOAT32 = 4, DLUA_FLOAT64 = 5
} dlua_dtype;

typedef struct dlua_runtime dlua_runtime;
typedef struct dlua_tensor dlua_tensor;

typedef struct dlua_options {
  int sandbox;                 /* untrusted scripts (see dlua.hpp's Options) */
  double time_limit;           /* seconds per call into Lua; 0: none */
  size_t lua_memory_limit;     /* bytes; 0: none */
  size_t tensor_memory_limit;  /* bytes, process-wide; 0: none */
  int preload_dl;              /* a global `dl` (default 1) */
  int jit;                     /* default 1; off anyway with sandbox or time_limit */
  /* print() goes here, one call per print (no trailing newline); stdout when NULL. */
  void (*print)(void* ud, const char* text, size_t len);
  void* print_ud;
} dlua_options;

typedef enum dlua_type {
  DLUA_TNIL = 0, DLUA_TBOOLEAN, DLUA_TNUMBER, DLUA_TSTRING, DLUA_TTENSOR,
  DLUA_TOTHER  /* cannot cross (a function ...): `string` names its Lua type */
} dlua_type;

typedef struct dlua_value {
  dlua_type type;
  int boolean;
  double number;
  const char* string;   /* NUL-terminated; `length` bytes (may contain NULs) */
  size_t length;
  dlua_tensor* tensor;  /* borrowed in arguments; a new reference in results */
} dlua_value;

const char* dlua_version(void);
void dlua_options_init(dlua_options* o);

int dlua_open(const dlua_options* o, dlua_runtime** out);   /* o may be NULL */
const char* dlua_open_error(void);                          /* why dlua_open failed */
void dlua_close(dlua_runtime* rt);

int dlua_run_string(dlua_runtime* rt, const char* code);
int dlua_run_file(dlua_runtime* rt, const char* path);
/* Calls global `fn` ("step" or "game.step"). Up to `nresults` results are stored
   (missing ones are nil); results may be NULL when nresults is 0. */
int dlua_call(dlua_runtime* rt, const char* fn, const dlua_value* args, int nargs,
              dlua_value* results, int nresults);
int dlua_set_global(dlua_runtime* rt, const char* name, const dlua_value* v);
int dlua_get_global(dlua_runtime* rt, const char* name, dlua_value* out);
void dlua_interrupt(dlua_runtime* rt);      /* any thread, or a signal handler */
const char* dlua_errmsg(const dlua_runtime* rt);
const char* dlua_traceback(const dlua_runtime* rt);

/* Values. */
dlua_value dlua_nil(void);
dlua_value dlua_boolean(int b);
dlua_value dlua_number(double x);
dlua_value dlua_string(const char* s);
dlua_value dlua_tensor_value(dlua_tensor* t);
/* Frees what a result owns (a tensor reference); safe on any value. */
void dlua_value_free(dlua_value* v);

/* Tensors. strides may be NULL (row-major), in elements. */
int dlua_tensor_from_blob(void* data, const int64_t* shape, int ndim, dlua_dtype dtype,
                          const int64_t* strides, dlua_tensor** out);
int dlua_tensor_zeros(const int64_t* shape, int ndim, dlua_dtype dtype, dlua_tensor** out);
void dlua_tensor_free(dlua_tensor* t);
/* Takes a from_blob buffer back: scripts holding it get "revoked" errors from now on. */
int dlua_tensor_release(dlua_tensor* t);
int dlua_tensor_ndim(const dlua_tensor* t);
int64_t dlua_tensor_size(const dlua_tensor* t, int dim);    /* 0-based dim */
int64_t dlua_tensor_stride(const dlua_tensor* t, int dim);  /* in elements */
int64_t dlua_tensor_numel(const dlua_tensor* t);
dlua_dtype dlua_tensor_dtype(const dlua_tensor* t);
int dlua_tensor_is_contiguous(const dlua_tensor* t);
/* Element 0, or NULL (then see dlua_last_error) for released or GPU tensors. */
void* dlua_tensor_data(const dlua_tensor* t);
const char* dlua_last_error(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* DLUA_DLUA_H */

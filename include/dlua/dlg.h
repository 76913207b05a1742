/* libdlua_run: runs a graph exported by dl.export (a .dlg file) from C, with no Lua.
 *
 *   #include <dlua/dlg.h>
 *
 *   dlg_error err;
 *   dlg_model* m = dlg_load("mlp.dlg", &err);
 *   if (!m) { fprintf(stderr, "%s\n", err.message); return 1; }
 *   float x[784] = {0};
 *   dlg_tensor in = {x, DLG_FLOAT32, 2, {1, 784}};
 *   dlg_tensor out = {0};                     (data NULL: the runner allocates it)
 *   if (dlg_run(m, &in, 1, &out, 1, &err) != DLG_OK) fprintf(stderr, "%s\n", err.message);
 *   else printf("class 0: %f\n", ((float*)out.data)[0]);
 *   dlg_free_data(out.data);
 *   dlg_free(m);
 *
 * Every function returns a status (DLG_OK is 0) or NULL, and fills *err (when not NULL)
 * with the code and a message that names what was wrong: no exception and no abort ever
 * crosses this API, whatever the file holds (it is treated as hostile). A model is
 * immutable once loaded: dlg_run may be called on one model from several threads at
 * once. Results equal dlua's eager results bit for bit on the CPU.
 *
 * Memory: inputs are read where they are (no copy; row-major, contiguous). An output
 * whose data is NULL receives memory of the runner's own, written by the last op that
 * made it (no copy), which the caller gives back with dlg_free_data; an output whose
 * data is set receives a copy there, after its dtype and shape are checked against
 * what the caller put in the struct.
 */
#ifndef DLUA_DLG_H
#define DLUA_DLG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlg_status {
  DLG_OK = 0,
  DLG_ERR_FILE = 1,       /* the file cannot be read */
  DLG_ERR_FORMAT = 2,     /* not a graph this runner reads (damaged, or newer) */
  DLG_ERR_INPUT = 3,      /* inputs of the wrong number, dtype or shape */
  DLG_ERR_RUN = 4,        /* an op failed (an index out of range ...) */
  DLG_ERR_MEMORY = 5,
  DLG_ERR_ARG = 6         /* a bad argument to this API (NULL model ...) */
} dlg_status;

typedef enum dlg_dtype {
  DLG_BOOL = 0, DLG_UINT8 = 1, DLG_INT32 = 2, DLG_INT64 = 3, DLG_FLOAT32 = 4, DLG_FLOAT64 = 5
} dlg_dtype;

#define DLG_MAX_DIMS 8

typedef struct dlg_error {
  int code;               /* a dlg_status */
  char message[512];
} dlg_error;

typedef struct dlg_tensor {
  void* data;             /* host memory, row-major and contiguous */
  int dtype;              /* a dlg_dtype */
  int ndim;
  int64_t shape[DLG_MAX_DIMS];
} dlg_tensor;

typedef struct dlg_model dlg_model;

dlg_model* dlg_load(const char* path, dlg_error* err);
/* A file held in memory (copied as needed: the buffer may go once this returns). */
dlg_model* dlg_load_memory(const void* data, size_t size, dlg_error* err);
void dlg_free(dlg_model* m);

/* At most max_iterations iterations of any loop of the graph per run (0: no limit, the
   default); a run that goes past fails with DLG_ERR_RUN. A host that runs files it does
   not trust sets it: a loop in a file runs until its condition fails. */
int dlg_set_loop_limit(const dlg_model* m, int64_t max_iterations);

int dlg_num_inputs(const dlg_model* m);
int dlg_num_outputs(const dlg_model* m);
/* The name of input i (0-based), or NULL. */
const char* dlg_input_name(const dlg_model* m, int i);
/* Input i's dtype and shape, a symbolic size (one the graph lets vary) as -1. */
int dlg_input_info(const dlg_model* m, int i, dlg_tensor* info, dlg_error* err);

int dlg_run(const dlg_model* m, const dlg_tensor* inputs, int n_in, dlg_tensor* outputs, int n_out,
            dlg_error* err);
/* Gives back the memory of an output the runner allocated (NULL: nothing). */
void dlg_free_data(void* data);

/* "0.1.0" */
const char* dlg_version(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* DLUA_DLG_H */

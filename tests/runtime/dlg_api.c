/* libdlua_run's C API (include/dlua/dlg.h) on its error paths, with the models that
 * tests/runtime/dlg_models.lua writes into <dir>:
 *
 *   dlg_api_test <dir>
 *
 * Every status code a host can meet, each with a message that says what was wrong:
 * DLG_ERR_FILE (a missing file), DLG_ERR_FORMAT (a file damaged in each of its parts,
 * from memory and from disk), DLG_ERR_INPUT (inputs of the wrong number, dtype, rank or
 * size), DLG_ERR_RUN (an index out of range, a loop past its limit), DLG_ERR_MEMORY (a
 * result larger than the machine; not under AddressSanitizer, which stops the process at
 * such an allocation instead of failing it) and DLG_ERR_ARG (NULL models and buffers,
 * negative indices), and a caller's output buffer that does not fit. After each failure
 * the same model still runs and gives the right answer: nothing is left half-done. No
 * exception crosses the C ABI: one would end the process here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlua/dlg.h"

static int failures = 0;

#define CHECK(cond, ...)                        \
  do {                                          \
    if (!(cond)) {                              \
      fprintf(stderr, "FAILED line %d: ", __LINE__); \
      fprintf(stderr, __VA_ARGS__);             \
      fprintf(stderr, "\n");                    \
      ++failures;                               \
    }                                           \
  } while (0)

/* A status and the message's words: the code must be `want` and the message must hold
 * `words`. */
static void expect(int got, const dlg_error* err, int want, const char* words, const char* what) {
  CHECK(got == want, "%s: status %d, expected %d (%s)", what, got, want, err ? err->message : "");
  if (err) {
    CHECK(err->code == want, "%s: err.code %d, expected %d", what, err->code, want);
    CHECK(strstr(err->message, words) != NULL, "%s: message '%s' does not say '%s'", what, err->message, words);
  }
}

static char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc((size_t)n);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return buf;
}

/* y = 2 x + 1 on a (2, 3) input: the model's right answer. */
static void affine_runs(const dlg_model* m, const char* what) {
  float x[6] = {0, 1, 2, 3, 4, 5};
  dlg_tensor in = {x, DLG_FLOAT32, 2, {2, 3}}, out = {0};
  dlg_error err;
  int rc = dlg_run(m, &in, 1, &out, 1, &err);
  CHECK(rc == DLG_OK, "%s: a good run failed: %s", what, err.message);
  if (rc == DLG_OK) {
    CHECK(out.dtype == DLG_FLOAT32 && out.ndim == 2 && out.shape[0] == 2 && out.shape[1] == 3, "%s: output shape",
          what);
    for (int i = 0; i < 6; ++i) CHECK(((float*)out.data)[i] == 2 * x[i] + 1, "%s: element %d", what, i);
  }
  dlg_free_data(out.data);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: dlg_api_test <dir of dlg_models.lua's files>\n");
    return 2;
  }
  char path[4096];
  dlg_error err;

  /* ---- loading ---- */
  snprintf(path, sizeof path, "%s/missing.dlg", argv[1]);
  CHECK(dlg_load(path, &err) == NULL, "a missing file loaded");
  expect(err.code, &err, DLG_ERR_FILE, "missing.dlg", "missing file");
  CHECK(dlg_load(path, NULL) == NULL, "a missing file loaded (no error struct)");
  CHECK(dlg_load(NULL, &err) == NULL && err.code == DLG_ERR_ARG, "dlg_load(NULL)");
  CHECK(dlg_load_memory(NULL, 10, &err) == NULL && err.code == DLG_ERR_ARG, "dlg_load_memory(NULL)");

  snprintf(path, sizeof path, "%s/affine.dlg", argv[1]);
  size_t size = 0;
  char* bytes = read_file(path, &size);
  CHECK(bytes != NULL && size > 16, "cannot read %s", path);
  if (!bytes) return 1;
  dlg_model* m = dlg_load_memory(bytes, size, &err);
  CHECK(m != NULL, "dlg_load_memory of a good file: %s", err.message);
  if (!m) return 1;
  /* the buffer may go once dlg_load_memory returns */
  memset(bytes, 0, size);
  affine_runs(m, "from memory");

  /* damaged copies: every one refused with DLG_ERR_FORMAT, never a crash */
  char* bad = malloc(size);
  const struct { const char* what; size_t keep; int flip; } damage[] = {
      {"empty", 0, -1}, {"header length only", 8, -1}, {"half the header", 24, -1},
      {"truncated data", 0, -1}, {"header length past the end", 0, 0}, {"JSON damaged", 0, 20},
      {"JSON damaged further on", 0, 60},
  };
  char* good = read_file(path, &size);
  for (size_t k = 0; k < sizeof damage / sizeof damage[0]; ++k) {
    memcpy(bad, good, size);
    size_t n = damage[k].keep ? damage[k].keep : size;
    if (strcmp(damage[k].what, "truncated data") == 0) n = size - 5;
    if (strcmp(damage[k].what, "empty") == 0) n = 0;
    if (damage[k].flip == 0) bad[7] = 0x7f;               /* the 8-byte length, little-endian: huge */
    else if (damage[k].flip > 0) bad[damage[k].flip] = '#';
    dlg_model* d = dlg_load_memory(n ? bad : good, n, &err);
    CHECK(d == NULL, "%s: loaded", damage[k].what);
    if (d) dlg_free(d);
    CHECK(err.code == DLG_ERR_FORMAT || (n == 0 && err.code == DLG_ERR_ARG), "%s: code %d (%s)", damage[k].what,
          err.code, err.message);
    CHECK(err.message[0] != 0, "%s: no message", damage[k].what);
  }
  /* and from a file on disk */
  snprintf(path, sizeof path, "%s/damaged.dlg", argv[1]);
  FILE* f = fopen(path, "wb");
  fwrite(good, 1, size / 2, f);
  fclose(f);
  CHECK(dlg_load(path, &err) == NULL, "a damaged file loaded");
  expect(err.code, &err, DLG_ERR_FORMAT, "", "damaged file");
  remove(path);

  /* ---- inputs ---- */
  float x[12] = {0};
  double xd[6] = {0};
  dlg_tensor out = {0};   /* data NULL: the runner allocates each output */
  dlg_tensor in = {x, DLG_FLOAT32, 2, {2, 3}};
  expect(dlg_run(m, &in, 0, &out, 1, &err), &err, DLG_ERR_INPUT, "1", "no inputs");
  dlg_tensor two[2] = {in, in};
  expect(dlg_run(m, two, 2, &out, 1, &err), &err, DLG_ERR_INPUT, "2", "two inputs");
  dlg_tensor wrong_dtype = {xd, DLG_FLOAT64, 2, {2, 3}};
  expect(dlg_run(m, &wrong_dtype, 1, &out, 1, &err), &err, DLG_ERR_INPUT, "float64", "a float64 input");
  dlg_tensor wrong_rank = {x, DLG_FLOAT32, 1, {6}};
  expect(dlg_run(m, &wrong_rank, 1, &out, 1, &err), &err, DLG_ERR_INPUT, "(6,)", "a 1-D input");
  dlg_tensor wrong_size = {x, DLG_FLOAT32, 2, {3, 4}};
  expect(dlg_run(m, &wrong_size, 1, &out, 1, &err), &err, DLG_ERR_INPUT, "(3, 4)", "a (3, 4) input");
  dlg_tensor no_data = {NULL, DLG_FLOAT32, 2, {2, 3}};
  int rc = dlg_run(m, &no_data, 1, &out, 1, &err);
  CHECK(rc == DLG_ERR_ARG || rc == DLG_ERR_INPUT, "an input without data: %d", rc);
  expect(dlg_run(NULL, &in, 1, &out, 1, &err), &err, DLG_ERR_ARG, "", "a NULL model");
  CHECK(dlg_run(m, &in, 1, NULL, 1, &err) == DLG_ERR_ARG, "NULL outputs");
  CHECK(dlg_run(m, &in, 1, &out, 0, &err) != DLG_OK, "room for no output");
  CHECK(dlg_input_info(m, 5, &out, &err) == DLG_ERR_ARG && dlg_input_info(m, -1, &out, &err) == DLG_ERR_ARG,
        "input_info out of range");
  CHECK(dlg_input_name(m, 3) == NULL && dlg_input_name(NULL, 0) == NULL, "input_name out of range");
  CHECK(dlg_num_inputs(NULL) < 0 || dlg_num_inputs(NULL) == 0, "num_inputs(NULL)");
  affine_runs(m, "after the refused runs");   /* nothing was left half-done */
  /* an output buffer of the caller's that does not fit is refused, not written past */
  float small_out[2];
  dlg_tensor given = {small_out, DLG_FLOAT32, 2, {1, 2}};
  expect(dlg_run(m, &in, 1, &given, 1, &err), &err, DLG_ERR_INPUT, "buffer", "an output buffer too small");
  dlg_free(m);
  dlg_free(NULL);

  /* ---- runs that fail ---- */
  snprintf(path, sizeof path, "%s/gather.dlg", argv[1]);
  m = dlg_load(path, &err);
  CHECK(m != NULL, "gather.dlg: %s", err.message);
  if (m) {
    float rows[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    long long idx[2] = {4, 9};
    dlg_tensor ins[2] = {{rows, DLG_FLOAT32, 2, {4, 2}}, {idx, DLG_INT64, 1, {2}}};
    /* positions from 1, as the script's: the 9 given, of dimension 1 */
    expect(dlg_run(m, ins, 2, &out, 1, &err), &err, DLG_ERR_RUN, "index 9 is out of range for dimension 1 of size 4",
           "an index out of range");
    idx[1] = 1;
    out = (dlg_tensor){0};
    rc = dlg_run(m, ins, 2, &out, 1, &err);
    CHECK(rc == DLG_OK && ((float*)out.data)[0] == 6 && ((float*)out.data)[3] == 1, "gather after the error: %s",
          err.message);
    dlg_free_data(out.data);
    dlg_free(m);
  }

  snprintf(path, sizeof path, "%s/loop.dlg", argv[1]);
  m = dlg_load(path, &err);
  CHECK(m != NULL, "loop.dlg: %s", err.message);
  if (m) {
    long long n = 100;
    dlg_tensor nin = {&n, DLG_INT64, 1, {1}};
    CHECK(dlg_set_loop_limit(m, 10) == DLG_OK, "set_loop_limit");
    out = (dlg_tensor){0};
    expect(dlg_run(m, &nin, 1, &out, 1, &err), &err, DLG_ERR_RUN, "10", "a loop past its limit");
    n = 5;
    out = (dlg_tensor){0};
    rc = dlg_run(m, &nin, 1, &out, 1, &err);
    CHECK(rc == DLG_OK && ((long long*)out.data)[0] == 10, "the loop within its limit: %s", err.message);
    dlg_free_data(out.data);
    CHECK(dlg_set_loop_limit(m, -1) == DLG_ERR_ARG, "a negative loop limit");
    dlg_free(m);
  }

#if !defined(__SANITIZE_ADDRESS__)
  snprintf(path, sizeof path, "%s/outer.dlg", argv[1]);
  m = dlg_load(path, &err);
  CHECK(m != NULL, "outer.dlg: %s", err.message);
  if (m) {
    /* 2^22 floats in, 2^44 (64 TB) out */
    const long long n = 1LL << 22;
    float* big = calloc((size_t)n, sizeof(float));
    dlg_tensor bin = {big, DLG_FLOAT32, 1, {n}};
    out = (dlg_tensor){0};
    expect(dlg_run(m, &bin, 1, &out, 1, &err), &err, DLG_ERR_MEMORY, "", "a result larger than the machine");
    free(big);
    float small[2] = {2, 3};
    dlg_tensor sin = {small, DLG_FLOAT32, 1, {2}};
    out = (dlg_tensor){0};
    rc = dlg_run(m, &sin, 1, &out, 1, &err);
    CHECK(rc == DLG_OK && ((float*)out.data)[1] == 6 && ((float*)out.data)[3] == 9, "outer after the error: %s",
          err.message);
    dlg_free_data(out.data);
    dlg_free(m);
  }
#endif

  free(bad);
  free(good);
  free(bytes);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("dlg_api: every status and message as documented\n");
  return 0;
}

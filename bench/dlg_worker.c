/* The C host side of bench/run.lua's export rows: a program with libdlua_run and no Lua.
 *
 *   dlua_bench_dlg --first model.dlg   loads the model, runs one batch-1 inference on
 *                                      zeros, exits (the start-up rows time the process)
 *   dlua_bench_dlg                     a worker, as bench/ref.c is:
 *     info                      -> "ok libdlua_run <version>"
 *     infer <model.dlg> <iters> -> "ok <seconds per call>": batch-1 inferences on zeros
 *                                  (a symbolic size is 1), after two untimed ones
 *     quit
 */
#define _POSIX_C_SOURCE 200809L
#include <dlua/dlg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The model's first input, zeros of its declared shape with free sizes 1. */
static int make_input(const dlg_model* m, dlg_tensor* in, dlg_error* err) {
  if (dlg_input_info(m, 0, in, err) != DLG_OK) return 0;
  size_t n = 1;
  for (int d = 0; d < in->ndim; ++d) {
    if (in->shape[d] < 0) in->shape[d] = 1;
    n *= (size_t)in->shape[d];
  }
  in->data = calloc(n ? n : 1, 8);
  return in->data != NULL;
}

static int run_once(const dlg_model* m, const dlg_tensor* in, dlg_error* err) {
  dlg_tensor out = {0};
  const int st = dlg_run(m, in, 1, &out, 1, err);
  dlg_free_data(out.data);
  return st == DLG_OK;
}

int main(int argc, char** argv) {
  dlg_error err;
  if (argc == 3 && strcmp(argv[1], "--first") == 0) {
    dlg_model* m = dlg_load(argv[2], &err);
    dlg_tensor in = {0};
    if (!m || !make_input(m, &in, &err) || !run_once(m, &in, &err)) {
      fprintf(stderr, "dlua_bench_dlg: %s\n", err.message);
      return 1;
    }
    return 0;
  }
  char line[4096], cmd[64], path[4000];
  while (fgets(line, sizeof line, stdin)) {
    long iters = 0;
    if (sscanf(line, "%63s", cmd) != 1) continue;
    if (strcmp(cmd, "quit") == 0) break;
    if (strcmp(cmd, "info") == 0) {
      printf("ok libdlua_run %s\n", dlg_version());
    } else if (strcmp(cmd, "infer") == 0 && sscanf(line, "%*s %3999s %ld", path, &iters) == 2 && iters > 0) {
      dlg_model* m = dlg_load(path, &err);
      dlg_tensor in = {0};
      if (!m || !make_input(m, &in, &err) || !run_once(m, &in, &err) || !run_once(m, &in, &err)) {
        printf("err %s\n", err.message);
      } else {
        const double t0 = now();
        int ok = 1;
        for (long i = 0; i < iters && ok; ++i) ok = run_once(m, &in, &err);
        const double t = now() - t0;
        if (ok) printf("ok %.9g\n", t / (double)iters);
        else printf("err %s\n", err.message);
      }
      free(in.data);
      dlg_free(m);
    } else {
      printf("err unknown command %s\n", cmd);
    }
    fflush(stdout);
  }
  return 0;
}

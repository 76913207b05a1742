/* libdlua_run from C, built with pkg-config's dlua_run flags (the install test). */
#include <dlua/dlg.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  dlg_error err;
  dlg_model* m = dlg_load(argv[1], &err);
  if (!m) {
    fprintf(stderr, "%s\n", err.message);
    return 1;
  }
  float x[3] = {1, 2, 3};
  dlg_tensor in = {x, DLG_FLOAT32, 2, {1, 3}}, out = {0};
  float sum = -1;
  if (dlg_run(m, &in, 1, &out, 1, &err) == DLG_OK) sum = ((float*)out.data)[0];
  else fprintf(stderr, "%s\n", err.message);
  printf("consumer_run_pc: %g\n", sum);
  dlg_free_data(out.data);
  dlg_free(m);
  return sum == 12 ? 0 : 1;   /* (1 + 2 + 3) * 2 */
}

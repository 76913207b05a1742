/* The game host of game_host.cpp, in C: particles whose state the host owns are
 * stepped by a script each frame, zero copy, through <dlua/dlua.h>. Run by ctest.
 *
 *   game_host_c [particles.lua]
 */
#include <dlua/dlua.h>

#include <math.h>
#include <stdio.h>

#ifndef PARTICLES_SCRIPT
#define PARTICLES_SCRIPT "particles.lua"
#endif

#define N 100
#define FRAMES 300

static int fail(dlua_runtime* rt, const char* what) {
  fprintf(stderr, "FAILED: %s: %s\n%s\n", what, dlua_errmsg(rt), dlua_traceback(rt));
  return 1;
}

int main(int argc, char** argv) {
  const char* script = argc > 1 ? argv[1] : PARTICLES_SCRIPT;
  static float pos[N][2], vel[N][2];
  for (int i = 0; i < N; ++i) {
    pos[i][0] = (float)i;
    pos[i][1] = 1.0f + (float)(i % 10);
    vel[i][0] = 0.0f;
    vel[i][1] = 0.0f;
  }

  dlua_options o;
  dlua_options_init(&o);
  o.sandbox = 1;
  o.time_limit = 1.0;
  dlua_runtime* rt;
  if (dlua_open(&o, &rt) != DLUA_OK) {
    fprintf(stderr, "dlua_open: %s\n", dlua_open_error());
    return 1;
  }
  if (dlua_run_file(rt, script) != DLUA_OK) return fail(rt, "loading the script");

  int64_t shape[2] = {N, 2};
  dlua_tensor *p, *v;
  if (dlua_tensor_from_blob(pos, shape, 2, DLUA_FLOAT32, NULL, &p) != DLUA_OK ||
      dlua_tensor_from_blob(vel, shape, 2, DLUA_FLOAT32, NULL, &v) != DLUA_OK) {
    fprintf(stderr, "from_blob: %s\n", dlua_last_error());
    return 1;
  }
  dlua_value args[3] = {dlua_tensor_value(p), dlua_tensor_value(v), dlua_number(1.0 / 60)};
  double bounces = 0;
  for (int frame = 0; frame < FRAMES; ++frame) {
    dlua_value touched;
    if (dlua_call(rt, "step", args, 3, &touched, 1) != DLUA_OK) return fail(rt, "step");
    bounces += touched.number;
    dlua_value_free(&touched);
  }

  int failures = 0;
  for (int i = 0; i < N; ++i) {
    if (!(pos[i][1] >= 0.0f) || !isfinite(vel[i][1])) ++failures;   /* never below the floor */
    if (pos[i][0] != (float)i) ++failures;                           /* x never moves */
  }
  if (bounces < N) ++failures;                                       /* every particle bounced */
  dlua_tensor_release(p);
  dlua_tensor_release(v);
  if (dlua_call(rt, "step", args, 3, NULL, 0) != DLUA_ERR_RUNTIME) ++failures;  /* revoked */
  dlua_tensor_free(p);
  dlua_tensor_free(v);
  dlua_close(rt);
  printf("%d particles, %d frames, %.0f bounces%s\n", N, FRAMES, bounces, failures ? "" : " (ok)");
  return failures ? 1 : 0;
}

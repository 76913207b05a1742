/* A program without Lua that runs the classifier examples/export_classifier.lua trained
 * and exported, through libdlua_run (<dlua/dlg.h>), and checks its answers against
 * eager dlua's, bit for bit: the batch, each image alone, into a buffer of its own, and
 * from four threads at once.
 *
 *   dlua examples/export_classifier.lua out/
 *   classifier_host out/classifier.dlg out/classifier_check.bin
 */
#include <dlua/dlg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char* bytes;     /* the whole file; the arrays below point into it */
  int n;
  float* pixels;   /* n x 28 x 28 */
  int* labels;     /* n */
  float* batch;    /* n x 10: the probabilities of the batch */
  float* alone;    /* n x 10: of each image alone */
} check_data;

static int fail(const char* what, const dlg_error* err) {
  fprintf(stderr, "classifier_host: %s%s%s\n", what, err ? ": " : "", err ? err->message : "");
  return 1;
}

static void* read_all(const char* path, long* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *size = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* p = malloc((size_t)*size);
  if (p && fread(p, 1, (size_t)*size, f) != (size_t)*size) {
    free(p);
    p = NULL;
  }
  fclose(f);
  return p;
}

static int read_check(const char* path, check_data* c) {
  long size = 0;
  char* p = read_all(path, &size);
  c->bytes = p;
  if (!p || size < 12 || memcmp(p, "DLGCHECK", 8) != 0) return 0;
  memcpy(&c->n, p + 8, 4);
  const long n = c->n;
  if (n <= 0 || size != 12 + 4 * (n * 784 + n + 2 * n * 10)) return 0;
  char* at = p + 12;
  c->pixels = (float*)at;
  at += 4 * n * 784;
  c->labels = (int*)at;
  at += 4 * n;
  c->batch = (float*)at;
  at += 4 * n * 10;
  c->alone = (float*)at;
  return 1;
}

static dlg_tensor images(float* pixels, int n) {
  dlg_tensor t = {pixels, DLG_FLOAT32, 3, {n, 28, 28}};
  return t;
}

typedef struct {
  const dlg_model* m;
  const check_data* c;
  int mismatches;
} worker;

/* Runs the batch 20 times and counts the results that differ from eager's. */
static void* work(void* arg) {
  worker* w = arg;
  for (int r = 0; r < 20; ++r) {
    dlg_tensor in = images(w->c->pixels, w->c->n), out = {0};
    dlg_error err;
    if (dlg_run(w->m, &in, 1, &out, 1, &err) != DLG_OK ||
        memcmp(out.data, w->c->batch, sizeof(float) * (size_t)w->c->n * 10) != 0)
      ++w->mismatches;
    dlg_free_data(out.data);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: classifier_host classifier.dlg classifier_check.bin\n");
    return 2;
  }
  dlg_error err;
  dlg_model* m = dlg_load(argv[1], &err);
  if (!m) return fail("loading the model", &err);
  /* A host running files it does not trust bounds their loops (this model has none). */
  if (dlg_set_loop_limit(m, 100000) != DLG_OK || dlg_set_loop_limit(NULL, 1) != DLG_ERR_ARG)
    return fail("dlg_set_loop_limit", NULL);
  check_data c;
  if (!read_check(argv[2], &c)) return fail("reading the answers file", NULL);
  printf("model %s (libdlua_run %s): %d input (%s), %d output\n", argv[1], dlg_version(), dlg_num_inputs(m),
         dlg_input_name(m, 0), dlg_num_outputs(m));
  dlg_tensor info;
  if (dlg_input_info(m, 0, &info, &err) != DLG_OK || info.shape[0] != -1 || info.shape[1] != 28)
    return fail("the input should be (batch, 28, 28) with the batch free", &err);

  /* The whole batch, in memory the runner allocates. */
  dlg_tensor in = images(c.pixels, c.n), out = {0};
  if (dlg_run(m, &in, 1, &out, 1, &err) != DLG_OK) return fail("running the batch", &err);
  if (out.ndim != 2 || out.shape[0] != c.n || out.shape[1] != 10 || out.dtype != DLG_FLOAT32)
    return fail("the output should be (n, 10) float32", NULL);
  if (memcmp(out.data, c.batch, sizeof(float) * (size_t)c.n * 10) != 0)
    return fail("the batch's probabilities differ from eager dlua's", NULL);
  int right = 0;
  for (int i = 0; i < c.n; ++i) {
    const float* p = (const float*)out.data + 10 * i;
    int best = 0;
    for (int k = 1; k < 10; ++k)
      if (p[k] > p[best]) best = k;
    right += best == c.labels[i];
  }
  dlg_free_data(out.data);

  /* Each image alone, into a buffer of our own. */
  for (int i = 0; i < c.n; ++i) {
    float probs[10];
    dlg_tensor one = images(c.pixels + 784 * i, 1), mine = {probs, DLG_FLOAT32, 2, {1, 10}};
    if (dlg_run(m, &one, 1, &mine, 1, &err) != DLG_OK) return fail("running one image", &err);
    if (memcmp(probs, c.alone + 10 * i, sizeof probs) != 0) return fail("an image's probabilities differ", NULL);
  }

  /* Four threads on the one model. */
  pthread_t threads[4];
  worker w[4];
  for (int t = 0; t < 4; ++t) {
    w[t] = (worker){m, &c, 0};
    pthread_create(&threads[t], NULL, work, &w[t]);
  }
  int mismatches = 0;
  for (int t = 0; t < 4; ++t) {
    pthread_join(threads[t], NULL);
    mismatches += w[t].mismatches;
  }
  if (mismatches) return fail("threads got results that differ from eager dlua's", NULL);

  /* Bad input is an error with a message, and the model stays usable. */
  dlg_tensor wrong = {c.pixels, DLG_FLOAT32, 2, {c.n, 784}};
  out = (dlg_tensor){0};
  if (dlg_run(m, &wrong, 1, &out, 1, &err) != DLG_ERR_INPUT || !strstr(err.message, "(batch, 28, 28)"))
    return fail("a wrong shape should be refused", &err);
  if (dlg_load("/nonexistent/model.dlg", &err) != NULL || err.code != DLG_ERR_FILE)
    return fail("a missing file should be DLG_ERR_FILE", &err);

  printf("%d of %d test images right; every answer equals eager dlua's (batch, alone, 4 threads)\n", right, c.n);
  dlg_free(m);
  free(c.bytes);
  return 0;
}

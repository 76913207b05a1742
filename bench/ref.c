/* The C references of bench/run.lua: raw cblas_sgemm on the same OpenBLAS the engine
 * links, and plain OpenMP loops for memory bandwidth.
 *
 * A worker: it reads one command a line on stdin and answers one line on stdout, so
 * that the harness can alternate it with its own measurement in the same run.
 *   info                      -> "ok <compiler> | <openblas config> | <core> | <threads>"
 *   sgemm <n> <iters>         -> "ok <seconds per call>"   C = A B, n x n float32, row-major
 *   sgemm <m> <iters> <n> <k> <ops>                           C (m x n) = op(A) op(B) over k, each op
 *                                                           n (as stored) or t (read transposed):
 *                                                           ops nn, nt, tn or tt
 *   sgemv <m> <iters> <k>     -> "ok <seconds per call>"   y = A x, A m x k float32, row-major
 *   add <n> <iters>           -> "ok <seconds per call>"   c[i] = a[i] + b[i]
 *   sum <n> <iters>           -> "ok <seconds per call>"   s = sum of a[i]
 *   pw8 <n> <iters>           -> "ok <seconds per call>"   c[i] = bench/cases.lua's pw8_fn(a[i]),
 *                                                           one read and one write an element
 *   sgesv <n> <iters> <batch> -> "ok <seconds per call>"   a batch of n x n float32 systems A x = b,
 *                                                           each A and b copied first (sgesv
 *                                                           overwrites them, as a solve must not)
 *   mlpgemm <images> <batch>  -> "ok <seconds>"   the products of one epoch of the MLP
 *                                                   784-256-10 (forward and backward) alone
 *   cnnpeak <images>          -> "ok <seconds>"   one epoch of the conv net's convolution
 *                                                   FLOPs at this machine's sgemm rate
 *   mlpinfer <iters>          -> "ok <seconds per call>"   the MLP 784-256-10's inference on
 *                                                   one image as a C program would write it:
 *                                                   two cblas_sgemv, the biases and the ReLU
 *   quit
 * Buffers are allocated and touched once per command, outside the timed loop: this is
 * the best case (no allocation, no page faults) that the engine is measured against.
 * Loops run on OpenMP's default thread count, the same pool size as the engine's. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <lapack.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_num_threads(void);

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float* fresh(size_t n, float v) {
  float* p = NULL;
  if (posix_memalign((void**)&p, 64, n * sizeof(float) + 64) != 0) return NULL;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < (long)n; ++i) p[i] = v + (float)(i % 7) * 0.125f;
  return p;
}

static volatile float g_sink;

static double run_sgemm(long m, long n, long k, const char* ops, long iters) {
  const int ta = ops[0] == 't', tb = ops[1] == 't';
  const int lda = ta ? (int)m : (int)k, ldb = tb ? (int)k : (int)n;
  const CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
  float *a = fresh((size_t)(m * k), 0.5f), *b = fresh((size_t)(k * n), 0.25f), *c = fresh((size_t)(m * n), 0);
  if (!a || !b || !c) return -1;
  cblas_sgemm(CblasRowMajor, oa, ob, (int)m, (int)n, (int)k, 1.0f, a, lda, b, ldb, 0.0f, c, (int)n);
  double t0 = now();
  for (long it = 0; it < iters; ++it)
    cblas_sgemm(CblasRowMajor, oa, ob, (int)m, (int)n, (int)k, 1.0f, a, lda, b, ldb, 0.0f, c, (int)n);
  double t = (now() - t0) / (double)iters;
  g_sink = c[m * n / 2];
  free(a), free(b), free(c);
  return t;
}

static double run_sgemv(long m, long iters, long k) {
  float *a = fresh((size_t)(m * k), 0.5f), *x = fresh((size_t)k, 0.25f), *y = fresh((size_t)m, 0);
  if (!a || !x || !y) return -1;
  cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, 1.0f, a, (int)k, x, 1, 0.0f, y, 1);
  double t0 = now();
  for (long it = 0; it < iters; ++it)
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, 1.0f, a, (int)k, x, 1, 0.0f, y, 1);
  double t = (now() - t0) / (double)iters;
  g_sink = y[m / 2];
  free(a), free(x), free(y);
  return t;
}

static double run_sgesv(long n, long iters, long batch) {
  const size_t nn = (size_t)(n * n);
  float *a = fresh(nn * (size_t)batch, 0.5f), *b = fresh((size_t)(n * batch), 0.25f);
  float *lu = fresh(nn, 0), *x = fresh((size_t)(n * batch), 0);
  lapack_int* ipiv = malloc(sizeof(lapack_int) * (size_t)n);
  if (!a || !b || !lu || !x || !ipiv) return -1;
  for (long k = 0; k < batch; ++k)   /* a dominant diagonal keeps each A regular */
    for (long i = 0; i < n; ++i) a[(size_t)k * nn + (size_t)(i * n + i)] += (float)n;
  const lapack_int ln = (lapack_int)n, one = 1;
  double t0 = 0;
  for (long it = -1; it < iters; ++it) {   /* iteration -1 warms up */
    if (it == 0) t0 = now();
    for (long k = 0; k < batch; ++k) {
      lapack_int info = 0;
      memcpy(lu, a + (size_t)k * nn, nn * sizeof(float));
      memcpy(x + k * n, b + k * n, (size_t)n * sizeof(float));
      LAPACK_sgesv(&ln, &one, lu, &ln, ipiv, x + k * n, &ln, &info);
      if (info != 0) return -1;
    }
  }
  double t = (now() - t0) / (double)iters;
  g_sink = x[n / 2];
  free(a), free(b), free(lu), free(x), free(ipiv);
  return t;
}

/* The floor of an MLP epoch (bench/cases.lua's "mlp": 784-256-10, nn.Linear's y = x W^T
 * + b): its five products a batch, with their shapes and transposes, on hot buffers. The
 * first layer's input gradient is not needed, as in the model. */
static double run_mlpgemm(long images, long batch) {
  const int ni = 784, nh = 256, no = 10, nb = (int)batch;   /* not I: complex.h defines it */
  float *x = fresh((size_t)nb * ni, 0.5f), *w1 = fresh((size_t)nh * ni, 0.01f), *h = fresh((size_t)nb * nh, 0);
  float *w2 = fresh((size_t)no * nh, 0.01f), *y = fresh((size_t)nb * no, 0), *gy = fresh((size_t)nb * no, 0.1f);
  float *gh = fresh((size_t)nb * nh, 0), *dw1 = fresh((size_t)nh * ni, 0), *dw2 = fresh((size_t)no * nh, 0);
  if (!x || !w1 || !h || !w2 || !y || !gy || !gh || !dw1 || !dw2) return -1;
  double t0 = 0;
  for (int pass = 0; pass < 2; ++pass) {   /* pass 0 warms up */
    if (pass == 1) t0 = now();
    for (long done = 0; done < images; done += batch) {
      const int m = (int)(images - done < batch ? images - done : batch);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nh, ni, 1.0f, x, ni, w1, ni, 0.0f, h, nh);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, no, nh, 1.0f, h, nh, w2, nh, 0.0f, y, no);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, no, nh, m, 1.0f, gy, no, h, nh, 0.0f, dw2, nh);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, nh, no, 1.0f, gy, no, w2, nh, 0.0f, gh, nh);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nh, ni, m, 1.0f, gh, nh, x, ni, 0.0f, dw1, ni);
      if (pass == 0 && done >= 16 * batch) break;
    }
  }
  double t = now() - t0;
  g_sink = dw1[ni / 2] + y[1];
  free(x), free(w1), free(h), free(w2), free(y), free(gy), free(gh), free(dw1), free(dw2);
  return t;
}

/* The floor of bench/run.lua's "runinfer": a batch-1 inference of the MLP, the weights
 * (out, in) as Linear keeps them, y = W2 relu(W1 x + b1) + b2. */
static double run_mlpinfer(long iters) {
  const int ni = 784, nh = 256, no = 10;
  float *x = fresh(ni, 0), *w1 = fresh((size_t)nh * ni, 0.01f), *b1 = fresh(nh, 0.1f), *h = fresh(nh, 0);
  float *w2 = fresh((size_t)no * nh, 0.01f), *b2 = fresh(no, 0.1f), *y = fresh(no, 0);
  if (!x || !w1 || !b1 || !h || !w2 || !b2 || !y) return -1;
  double t0 = 0;
  for (int pass = 0; pass < 2; ++pass) {   /* pass 0 warms up */
    if (pass == 1) t0 = now();
    for (long it = 0; it < (pass == 0 ? 64 : iters); ++it) {
      memcpy(h, b1, nh * sizeof(float));
      cblas_sgemv(CblasRowMajor, CblasNoTrans, nh, ni, 1.0f, w1, ni, x, 1, 1.0f, h, 1);
      for (int i = 0; i < nh; ++i) h[i] = h[i] > 0 ? h[i] : 0;
      memcpy(y, b2, no * sizeof(float));
      cblas_sgemv(CblasRowMajor, CblasNoTrans, no, nh, 1.0f, w2, nh, h, 1, 1.0f, y, 1);
    }
  }
  double t = (now() - t0) / (double)iters;
  g_sink = y[1];
  free(x), free(w1), free(b1), free(h), free(w2), free(b2), free(y);
  return t;
}

/* The floor of a conv net epoch (bench/cases.lua's "cnn": Conv2d(1, 16, 3), Conv2d(16,
 * 16, 3) on 28 x 28 images, global average pooling, Linear(16, 10)): its multiply-adds
 * at the rate cblas_sgemm reaches on 1024 x 1024 here, the machine's best case. Per
 * image, each convolution's forward is 2 Ho Wo O C kh kw flops and so is each of its
 * gradients (the weight's for both, the input's for the second only). */
static double run_cnnpeak(long images) {
  const double conv1 = 2.0 * 26 * 26 * 16 * 1 * 9, conv2 = 2.0 * 24 * 24 * 16 * 16 * 9, linear = 2.0 * 16 * 10;
  const double flops = (double)images * (2 * conv1 + 3 * conv2 + 3 * linear);
  const long n = 1024, iters = 8;
  double t = run_sgemm(n, n, n, "nn", iters);
  if (t <= 0) return -1;
  for (int k = 0; k < 2; ++k) {   /* the best of three: a floor */
    double u = run_sgemm(n, n, n, "nn", iters);
    if (u > 0 && u < t) t = u;
  }
  return flops / (2.0 * (double)n * (double)n * (double)n / t);
}

static double run_add(long n, long iters) {
  float *a = fresh((size_t)n, 0.5f), *b = fresh((size_t)n, 0.25f), *c = fresh((size_t)n, 0);
  if (!a || !b || !c) return -1;
  double t0 = 0;
  for (long it = -1; it < iters; ++it) {  /* it == -1: warm-up */
    if (it == 0) t0 = now();
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; ++i) c[i] = a[i] + b[i];
  }
  double t = (now() - t0) / (double)iters;
  g_sink = c[n / 2];
  free(a), free(b), free(c);
  return t;
}

static double run_sum(long n, long iters) {
  float* a = fresh((size_t)n, 0.5f);
  if (!a) return -1;
  double t0 = 0;
  for (long it = -1; it < iters; ++it) {
    if (it == 0) t0 = now();
    float s = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
    for (long i = 0; i < n; ++i) s += a[i];
    g_sink = s;
  }
  double t = (now() - t0) / (double)iters;
  free(a);
  return t;
}

static double run_pw8(long n, long iters) {
  float *a = fresh((size_t)n, 0.5f), *c = fresh((size_t)n, 0);
  if (!a || !c) return -1;
  double t0 = 0;
  for (long it = -1; it < iters; ++it) {
    if (it == 0) t0 = now();
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < n; ++i) {
      float v = a[i] * 1.1f + 0.2f;
      v = (v < 0 ? -v : v) - 0.3f;
      v = v * 0.9f;
      v = v > 0 ? v : 0;
      c[i] = (v + 1) * 0.5f;
    }
  }
  double t = (now() - t0) / (double)iters;
  g_sink = c[n / 2];
  free(a), free(c);
  return t;
}

int main(void) {
  char line[512];
  setvbuf(stdout, NULL, _IOLBF, 0);
  while (fgets(line, sizeof line, stdin)) {
    char cmd[64] = "";
    char ops[4] = "nn";
    long n = 0, iters = 1, batch = 1, k = 0;
    int got = sscanf(line, "%63s %ld %ld %ld %ld %3s", cmd, &n, &iters, &batch, &k, ops);
    if (got < 1) continue;
    if (iters < 1) iters = 1;
    if (strcmp(cmd, "quit") == 0) break;
    if (strcmp(cmd, "info") == 0) {
#ifdef __VERSION__
      const char* cc = "gcc " __VERSION__;
#else
      const char* cc = "cc";
#endif
      printf("ok %s | %s | %s | openblas threads %d, omp threads %d\n", cc, openblas_get_config(),
             openblas_get_corename(), openblas_get_num_threads(), omp_get_max_threads());
      continue;
    }
    double t = -1;
    if (got >= 2 && n > 0) {
      if (strcmp(cmd, "sgemm") == 0 && got < 4) t = run_sgemm(n, n, n, "nn", iters);
      else if (strcmp(cmd, "sgemm") == 0)
        t = got == 6 && batch > 0 && k > 0 && strchr("nt", ops[0]) && ops[1] && strchr("nt", ops[1]) && !ops[2]
                ? run_sgemm(n, batch, k, ops, iters) : -1;
      else if (strcmp(cmd, "sgemv") == 0) t = run_sgemv(n, iters, batch);
      else if (strcmp(cmd, "add") == 0) t = run_add(n, iters);
      else if (strcmp(cmd, "sum") == 0) t = run_sum(n, iters);
      else if (strcmp(cmd, "pw8") == 0) t = run_pw8(n, iters);
      else if (strcmp(cmd, "sgesv") == 0) t = batch > 0 ? run_sgesv(n, iters, batch) : -1;
      else if (strcmp(cmd, "mlpgemm") == 0) t = got >= 3 ? run_mlpgemm(n, iters) : -1;
      else if (strcmp(cmd, "cnnpeak") == 0) t = run_cnnpeak(n);
      else if (strcmp(cmd, "mlpinfer") == 0) t = run_mlpinfer(n);
      else {
        printf("err unknown command %s\n", cmd);
        continue;
      }
    }
    if (t < 0) printf("err %s: bad arguments or out of memory\n", cmd);
    else printf("ok %.9g\n", t);
  }
  return 0;
}

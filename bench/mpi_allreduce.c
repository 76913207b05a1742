/* The reference of dl.dist's benchmarks (bench/dist.lua): raw MPI on the same Open MPI,
 * with the same mpirun flags. Run under mpirun; rank 0 prints one line per case.
 *
 *   mpi_allreduce allreduce <bytes> <iters>   seconds per in-place MPI_Allreduce of
 *                                             float32 (sum), after a warm-up
 *   mpi_allreduce concat <iters> <n1> <n2> ...  seconds per MPI_Allreduce of one buffer
 *                                             holding n1 + n2 + ... float32
 *
 * Output: "ok <seconds>". Buffers are allocated and touched once, outside the timed loop.
 * A barrier starts each timed loop, so every rank measures the same interval. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double timed_allreduce(float* buf, long n, long iters) {
  for (int w = 0; w < 3; ++w) MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (long i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double t = (MPI_Wtime() - t0) / (double)iters;
  /* the slowest rank's time */
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  double t = -1;
  if (argc >= 4 && strcmp(argv[1], "allreduce") == 0) {
    long n = atol(argv[2]) / 4, iters = atol(argv[3]);
    if (n < 1) n = 1;
    float* buf = calloc((size_t)n, sizeof(float));
    t = timed_allreduce(buf, n, iters);
    free(buf);
  } else if (argc >= 4 && strcmp(argv[1], "concat") == 0) {
    long iters = atol(argv[2]), n = 0;
    for (int i = 3; i < argc; ++i) n += atol(argv[i]);
    float* buf = calloc((size_t)n, sizeof(float));
    t = timed_allreduce(buf, n, iters);
    free(buf);
  } else if (rank == 0) {
    fprintf(stderr, "usage: mpi_allreduce allreduce <bytes> <iters> | concat <iters> <n>...\n");
  }
  if (rank == 0) printf(t >= 0 ? "ok %.9g\n" : "err bad arguments\n", t);
  MPI_Finalize();
  return t >= 0 ? 0 : 2;
}

/* A host program that starts MPI itself without thread support (MPI_THREAD_SINGLE), then
 * runs a script that calls dl.dist.init(): the script gets an error naming what MPI gives
 * and what dl.dist needs, and the runtime stays usable. Run under mpirun -np 1 by
 * tests/dist/run.py (case thread_host). */
#include <dlua/dlua.h>
#include <mpi.h>
#include <stdio.h>

static const char* kScript =
    "local ok, err = pcall(dl.dist.init)\n"
    "assert(not ok, 'dist.init succeeded under MPI_THREAD_SINGLE')\n"
    "assert(err:find('dist.init: the MPI library gives thread support MPI_THREAD_SINGLE; dl.dist needs "
    "MPI_THREAD_SERIALIZED (the host program started MPI: it asks MPI_Init_thread for MPI_THREAD_SERIALIZED or "
    "more)', 1, true), err)\n"
    "assert((dl.ones(2) + 1):sum():item() == 4)\n"
    "print('refused: ' .. err)\n";

int main(int argc, char** argv) {
  int provided = -1;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "FAILED: MPI_Init_thread\n");
    return 1;
  }
  dlua_options o;
  dlua_options_init(&o);
  dlua_runtime* rt;
  int status = 1;
  if (dlua_open(&o, &rt) != DLUA_OK) {
    fprintf(stderr, "FAILED: dlua_open: %s\n", dlua_open_error());
  } else {
    if (dlua_run_string(rt, kScript) == DLUA_OK) status = 0;
    else fprintf(stderr, "FAILED: %s\n%s\n", dlua_errmsg(rt), dlua_traceback(rt));
    dlua_close(rt);
  }
  MPI_Finalize();
  if (status == 0) printf("MPI_THREAD_SINGLE (provided %d): dist.init refused it, the runtime went on\n", provided);
  return status;
}

/* A host that uses OpenBLAS itself and loads dlua's engine later (dlopen): dlua must
   leave the host's OpenBLAS as it is, and say once how to get the faster kernels
   (Note [Choosing OpenBLAS's core] in tensor/cpu/openblas.cpp).
     dlua_blas_host path/to/libdlua_core.so */
#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void gotoblas_dynamic_init(void);
void gotoblas_dynamic_quit(void);

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: dlua_blas_host libdlua_core.so\n");
    return 2;
  }
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx")) {
    printf("no AVX on this CPU: there is no better core, nothing to check\n");
    return 0;
  }
  /* The host's OpenBLAS on its generic kernels, as on a CPU OpenBLAS does not know. */
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  if (strcmp(openblas_get_corename(), "Prescott") != 0) {
    fprintf(stderr, "could not fake the fallback: core %s\n", openblas_get_corename());
    return 1;
  }

  /* dlua's warning goes to stderr as the engine loads OpenBLAS, at its first product or
     BLAS query (dl_blas_info here): catch it in a file. */
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  const char* (*info)(int) = (const char* (*)(int))dlsym(lib, "dl_blas_info");
  if (!info) return 1;
  char path[] = "/tmp/dlua_blas_host_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 1;
  int saved = dup(2);
  dup2(fd, 2);
  const char* chosen_by = info(2);
  dup2(saved, 2);
  char said[1024] = "";
  ssize_t n = pread(fd, said, sizeof said - 1, 0);
  said[n > 0 ? n : 0] = 0;
  close(fd);
  unlink(path);

  int ok = 1;
  if (strcmp(openblas_get_corename(), "Prescott") != 0) {
    fprintf(stderr, "the host's OpenBLAS was changed to %s\n", openblas_get_corename());
    ok = 0;
  }
  if (strcmp(chosen_by, "host") != 0) {
    fprintf(stderr, "dl_blas_info(2) is %s, expected host\n", chosen_by);
    ok = 0;
  }
  if (!strstr(said, "OpenBLAS was loaded before dlua") || !strstr(said, "OPENBLAS_CORETYPE=")) {
    fprintf(stderr, "no warning naming the fix; stderr was: %s\n", said);
    ok = 0;
  }
  printf("%s", said);
  return ok ? 0 : 1;
}

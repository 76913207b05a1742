/* The C API of the installed dlua. */
#include <dlua/dlua.h>
#include <stdio.h>

int main(void) {
  dlua_runtime* rt;
  if (dlua_open(NULL, &rt) != DLUA_OK) return 1;
  dlua_value r;
  int st = dlua_run_string(rt, "function f(n) return dl.ones(n):sum():item() end");
  dlua_value n = dlua_number(5);
  if (st == DLUA_OK) st = dlua_call(rt, "f", &n, 1, &r, 1);
  printf("consumer_c: %s %g\n", st == DLUA_OK ? "ok" : dlua_errmsg(rt), r.number);
  dlua_close(rt);
  return st == DLUA_OK && r.number == 5 ? 0 : 1;
}

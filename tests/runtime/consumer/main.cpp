// Embeds the installed dlua: a script doubles a host buffer in place.
#include <dlua/dlua.hpp>

#include <cstdio>

int main() {
  float buf[3] = {1, 2, 3};
  dlua::Runtime rt;
  rt.run_string("function double(x) x:mul_(2) return x:sum():item() end");
  double s = rt.call("double", dlua::Tensor::from_blob(buf, {3}, dlua::DType::Float32)).as_number();
  std::printf("consumer: sum %g, buf[2] %g\n", s, buf[2]);
  return s == 12 && buf[2] == 6 ? 0 : 1;
}

// A program outside the dlua tree that runs an exported graph through the installed
// libdlua_run (dlua::run): argv[1] a .dlg file taking a float32 (n, 3), n free.
#include <dlua/dlg.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  try {
    dlg::Model m(argv[1]);
    std::vector<float> x = {1, 2, 3, 4, 5, 6};
    std::vector<dlg::Output> y = m.run({dlg::input(x.data(), {2, 3})});
    std::printf("consumer_run: %s -> (%lld, %lld), first %g\n", m.input_name(0).c_str(),
                static_cast<long long>(y[0].shape()[0]), static_cast<long long>(y[0].shape()[1]), y[0].data<float>()[0]);
    dlg::Model missing("/nonexistent.dlg");
  } catch (const dlg::Error& e) {
    if (e.code() == DLG_ERR_FILE) return 0;
    std::fprintf(stderr, "%s\n", e.what());
  }
  return 1;
}

// Fuzz target: the .dlg loader and runner (export/model.h) on hostile bytes.
//
// Every input is parsed as a .dlg file from memory; a file the loader accepts is run
// once on inputs it declares (each symbolic size 2, zeros), when they are small.
// Oracles, besides ASan/UBSan: only dl::Error may come out of loading and running,
// never an internal one (a failed assertion), and a run gives as many results as the
// graph has outputs.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "export/model.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace {

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "fuzz_dlg: %s\n", what.c_str());
  std::abort();
}

void check_error(const dl::Error& e) {
  if (e.kind() == dl::ErrorKind::Internal) fatal(std::string("internal error: ") + e.what());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const dl::graph::Model> m;
  try {
    m = dl::graph::Model::parse(data, size, "fuzz.dlg");
  } catch (const dl::Error& e) {
    check_error(e);
    return 0;
  }
  m->set_loop_limit(1000);   // a hostile loop may never end
  const dl::graph::Graph& g = m->graph();
  std::vector<int64_t> syms(g.symbols.size(), 2);
  std::vector<dl::Tensor> inputs;
  for (int32_t v : g.inputs) {
    const dl::graph::ValueInfo& info = g.values[size_t(v)];
    dl::Shape shape;
    int64_t numel = 1;
    for (const dl::graph::Int& d : info.shape) {
      const int64_t n = d.eval(syms);
      if (n < 0 || n > 4096) return 0;
      numel *= n;
      if (numel > (1 << 16)) return 0;
      shape.push_back(n);
    }
    inputs.push_back(dl::zeros(shape, info.dtype));
  }
  // Ops on large constants or sizes could take long; the loader has checked the
  // references, the runner checks the rest.
  if (g.nodes.size() > 4096) return 0;
  try {
    std::vector<dl::Tensor> out = m->run(inputs);
    if (out.size() != g.outputs.size()) fatal("a run gave the wrong number of results");
  } catch (const dl::Error& e) {
    check_error(e);
  }
  return 0;
}

// dlua-run: runs an exported graph (a .dlg file) from the shell, with no Lua.
//
//   dlua-run model.dlg                      what the graph takes and gives
//   dlua-run model.dlg input.safetensors    runs it; prints each output
//   dlua-run model.dlg in.safetensors -o out.safetensors    writes the outputs instead
//
// The input file's tensors are matched to the graph's inputs by name, or in order when
// the names differ and the counts agree. Exit status: 0, 1 for an error (its message on
// stderr), 2 for bad usage.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "export/model.h"
#include "io/safetensors.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace {

int usage() {
  std::fprintf(stderr, "usage: dlua-run model.dlg [input.safetensors [-o output.safetensors]]\n");
  return 2;
}

void print_info(const dl::graph::Graph& g) {
  for (size_t i = 0; i < g.inputs.size(); ++i)
    std::printf("input %zu: %s %s\n", i + 1, g.input_names[i].c_str(),
                dl::graph::describe(g, g.values[size_t(g.inputs[i])]).c_str());
  for (size_t i = 0; i < g.outputs.size(); ++i)
    std::printf("output %zu: %s\n", i + 1, dl::graph::describe(g, g.values[size_t(g.outputs[i])]).c_str());
  std::printf("nodes: %zu, constants: %zu\n", g.nodes.size(), g.constants.size());
}

void print_tensor(size_t k, const dl::Tensor& t) {
  std::printf("output %zu: %s (", k + 1, std::string(dl::dtype_name(t.dtype())).c_str());
  for (int d = 0; d < t.dim(); ++d) std::printf(d ? ", %lld" : "%lld", static_cast<long long>(t.size(d)));
  std::printf(")\n");
  const dl::Tensor c = dl::contiguous(dl::cast(t, dl::DType::Float64));
  const double* v = c.data<double>();
  const int64_t n = c.numel(), shown = n > 20 ? 20 : n;
  for (int64_t i = 0; i < shown; ++i) std::printf(i ? " %.9g" : "%.9g", v[i]);
  if (n > shown) std::printf(" ... (%lld values)", static_cast<long long>(n));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string model_path, input_path, output_path;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-o" && i + 1 < args.size()) {
      output_path = args[++i];
    } else if (args[i] == "-h" || args[i] == "--help") {
      usage();
      return 0;
    } else if (!args[i].empty() && args[i][0] == '-') {
      return usage();
    } else if (model_path.empty()) {
      model_path = args[i];
    } else if (input_path.empty()) {
      input_path = args[i];
    } else {
      return usage();
    }
  }
  if (model_path.empty() || (!output_path.empty() && input_path.empty())) return usage();
  try {
    auto model = dl::graph::Model::load(model_path);
    const dl::graph::Graph& g = model->graph();
    if (input_path.empty()) {
      print_info(g);
      return 0;
    }
    dl::io::SafetensorsFile in = dl::io::load_safetensors(input_path, "dlua-run");
    std::vector<dl::Tensor> inputs;
    for (const std::string& name : g.input_names)
      for (const auto& [n, t] : in.tensors)
        if (n == name) inputs.push_back(t);
    if (inputs.size() != g.inputs.size()) {
      DL_CHECK(in.tensors.size() == g.inputs.size(), "dlua-run: ", input_path, " holds ", in.tensors.size(),
               " tensors, and the graph takes ", g.inputs.size(), " inputs");
      inputs.clear();
      for (const auto& nt : in.tensors) inputs.push_back(nt.second);
    }
    std::vector<dl::Tensor> outputs = model->run(inputs);
    if (!output_path.empty()) {
      dl::io::NamedTensors named;
      for (size_t k = 0; k < outputs.size(); ++k) named.emplace_back("output" + std::to_string(k + 1), outputs[k]);
      dl::io::save_safetensors(output_path, named, {}, "dlua-run");
      return 0;
    }
    for (size_t k = 0; k < outputs.size(); ++k) print_tensor(k, outputs[k]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}

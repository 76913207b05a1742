// A loaded .dlg file and the runner of its graph: what libdlua_run and dl.export.load
// use, with no Lua inside.
//
//   auto m = Model::load("mlp.dlg");                 // dl::Error "dlg_load: mlp.dlg: ..."
//   std::vector<Tensor> y = m->run({x});             // dl::Error "dlg_run: ..."
//   save_model("mlp.dlg", graph, constants);         // atomically
//
// A Model is immutable once loaded: run() may be called on one from several threads.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "export/graph.h"
#include "io/safetensors.h"
#include "tensor/tensor.h"

namespace dl::graph {

// The metadata key of the graph's JSON in a .dlg file.
inline constexpr const char* kGraphKey = "dlua.graph";

struct OpRow;

class Model {
 public:
  static std::shared_ptr<const Model> load(const std::string& path);
  // A file held in memory; `name` stands for its path in messages.
  static std::shared_ptr<const Model> parse(const void* data, size_t n, const std::string& name);

  // The graph's outputs for these inputs (host tensors of the graph's input dtypes, with
  // sizes the graph allows). A result may share memory with an input when the graph
  // returns it unchanged, never with the model's constants (a copy comes instead).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

  const Graph& graph() const { return g_; }
  // At most n iterations of any one loop per run (0: no limit, the default): a host
  // that runs files it does not trust bounds their loops, which could run forever.
  void set_loop_limit(int64_t n) const { loop_limit_.store(n < 0 ? 0 : n, std::memory_order_relaxed); }
  // How many results its runs wrote over a dying operand (Note [The runner's plan]),
  // all threads together: for tests and tuning.
  int64_t in_place_writes() const { return in_place_writes_.load(std::memory_order_relaxed); }

 private:
  // How a graph runs, worked out when the file is loaded (Note [The runner's plan]).
  struct Plan {
    std::vector<const OpRow*> rows;                  // per node: its row
    std::vector<std::vector<int32_t>> free_after;    // per node: values no later node reads
    std::vector<uint8_t> folded;     // per node: a view of constants, made at load
    std::vector<uint8_t> in_place;   // per node: a binary op that may write its first input
    std::vector<std::vector<Plan>> graphs;           // per node: its graphs' plans (loops)
  };
  static std::shared_ptr<const Model> make(io::SafetensorsFile f, const std::string& where);
  Plan plan(const Graph& g, bool top);
  std::vector<Tensor> run_graph(const Graph& g, const Plan& p, std::vector<Tensor>& vals,
                                const std::vector<int64_t>& syms) const;
  std::vector<Tensor> run_loop(const Node& n, const std::vector<Plan>& p, const std::vector<const Tensor*>& in,
                               const std::vector<int64_t>& syms) const;
  Graph g_;
  std::vector<Tensor> constants_;   // by value: the file's, and views of them folded at load
  Plan plan_;
  mutable std::atomic<int64_t> loop_limit_{0};
  mutable std::atomic<int64_t> in_place_writes_{0};
};

// Writes a .dlg file: the constants (graph.constants' tensors, in order) as safetensors
// tensors, the graph's JSON and `extra` as its metadata.
void save_model(const std::string& path, const Graph& g, const std::vector<Tensor>& constants,
                const std::vector<std::pair<std::string, std::string>>& extra = {});

}  // namespace dl::graph

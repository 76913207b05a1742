// An exported graph (dl.export): values, the ops that make them, and the sizes that
// vary. It is written as JSON into a .dlg file (a safetensors file whose tensors are
// the graph's constants) and read back by the runner (export/model.h), which treats the
// text as hostile.
//
//   Graph g;                                  // x -> tanh(x @ w)
//   g.symbols = {"batch"};
//   g.values = {{Float32, {Int::symbol(0), Int(4)}}, {Float32, {Int(4), Int(3)}},
//               {Float32, {Int::symbol(0), Int(3)}}, {Float32, {Int::symbol(0), Int(3)}}};
//   g.inputs = {0}; g.input_names = {"x"};
//   g.constants = {{1, "w"}};
//   g.nodes = {{"matmul", {0, 1}, {2}}, {"tanh", {2}, {3}}};
//   g.outputs = {3};
//   std::string text = to_json(g);            // and back: from_json(text, "load")
//
// Nothing here knows Lua or autograd: capture.h makes graphs from the engine's ops,
// model.h runs them.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/dtype.h"

namespace dl::graph {

// The version written into every file; a reader refuses newer ones.
constexpr int kFormatVersion = 1;
// What a reader accepts at most (a hostile file cannot make it allocate without bound).
constexpr size_t kMaxSymbols = 16, kMaxItems = 1 << 22, kMaxNesting = 8;
// The largest integer a graph holds, and the largest size a symbol may take when it
// runs: within it, Int::eval cannot overflow.
constexpr int64_t kMaxInt = int64_t(1) << 31;

// An integer of the graph (a size, a dim, a flag): a constant, or mul * symbol + add
// for a size that follows a symbolic input dim (dl.export's `dynamic`).
struct Int {
  int64_t add = 0, mul = 0;
  int32_t sym = -1;   // -1: the constant `add`
  Int() = default;
  Int(int64_t v) : add(v) {}   // NOLINT: a constant reads as its value
  static Int symbol(int32_t s, int64_t mul = 1, int64_t add = 0) {
    Int i;
    i.sym = s;
    i.mul = mul;
    i.add = add;
    return i;
  }
  bool constant() const { return sym < 0; }
  // Its value for the symbols' values (sym < syms.size() is checked by the reader).
  int64_t eval(const std::vector<int64_t>& syms) const { return sym < 0 ? add : mul * syms[size_t(sym)] + add; }
  bool operator==(const Int& o) const { return sym == o.sym && add == o.add && (sym < 0 || mul == o.mul); }
};

struct ValueInfo {
  DType dtype = DType::Float32;
  std::vector<Int> shape;
};

struct Graph;

// One op: its name (a row of export/ops.cpp), the values it reads (-1: an optional
// input not given) and makes (-1: a result nobody reads), its integer and number
// arguments in the order its row documents, and the graphs it runs (a loop's condition
// and body: graphs of their own, whose inputs are the node's inputs in order, and which
// have no constants).
struct Node {
  std::string op;
  std::vector<int32_t> in, out;
  std::vector<Int> ints;
  std::vector<double> nums;
  std::vector<Graph> graphs;
};

struct Graph {
  std::vector<std::string> symbols;   // names of the symbolic dims ("batch")
  std::vector<ValueInfo> values;      // every value's dtype and shape
  std::vector<int32_t> inputs;        // values given by the caller, in order
  std::vector<std::string> input_names;
  std::vector<std::pair<int32_t, std::string>> constants;   // value, its tensor in the file
  std::vector<Node> nodes;            // in the order they run
  std::vector<int32_t> outputs;       // values returned, in order
};

// The graph as JSON (Note [The graph's JSON] in graph.cpp).
std::string to_json(const Graph& g);
// Parses and checks a graph: every reference in range, each value made once before it
// is read, each op a known row with the right number of inputs, results and arguments.
// Errors are dl::Error messages that start with `op` ("dlg_load: model.dlg: ...").
Graph from_json(std::string_view text, const std::string& where);

// What a graph holds, as lines of text (dl.export's report).
std::string summary(const Graph& g);

// The graph's text for `v` (a dtype and a shape with symbols), for messages.
std::string describe(const Graph& g, const ValueInfo& v);

}  // namespace dl::graph

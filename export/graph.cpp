// Graphs as JSON, and the checks a reader makes of one (graph.h).
//
// Note [The graph's JSON]
// A .dlg file's __metadata__ holds the graph under "dlua.graph":
//
//   {"format": "dlua.graph", "version": 1,
//    "ops": {"matmul": 1, "tanh": 1},               every op used, with its row's version
//    "symbols": ["batch"],
//    "values": [{"dtype": "float32", "shape": [{"sym": 0}, 4]}, ...],
//    "inputs": [{"value": 0, "name": "x"}],
//    "constants": [{"value": 1, "tensor": "fc.weight"}],
//    "nodes": [{"op": "matmul", "in": [0, 1], "out": [2]},
//              {"op": "mul", "in": [2], "out": [3], "ints": [0, 1], "nums": [0.5]}],
//    "outputs": [3]}
//
// An integer is a JSON number, or {"sym": k, "mul": m, "add": c} for m * symbol k + c
// (m 1 and c 0 when left out). A number that JSON cannot hold is the string "inf",
// "-inf" or "nan". Values are numbered from 0; a node's "in" holds -1 for an optional
// input not given, its "out" -1 for a result nobody reads. The JSON is parsed with
// nlohmann/json (Debian's nlohmann-json3-dev), whose parser is iterative: a hostile
// file cannot exhaust the stack by nesting.
#include "export/graph.h"

#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "export/ops.h"
#include "tensor/error.h"

namespace dl::graph {

using json = nlohmann::json;

namespace {

// Integers and coefficients stay within this; with a symbol's value within it too (the
// runner refuses larger inputs), mul * symbol + add cannot overflow.
constexpr int64_t kMaxCoefficient = kMaxInt;

json int_json(const Int& i) {
  if (i.constant()) return i.add;
  json j = {{"sym", i.sym}};
  if (i.mul != 1) j["mul"] = i.mul;
  if (i.add != 0) j["add"] = i.add;
  return j;
}

json num_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json ints_json(const std::vector<Int>& v) {
  json a = json::array();
  for (const Int& i : v) a.push_back(int_json(i));
  return a;
}

// ---- reading -----------------------------------------------------------------------------

struct Reader {
  const std::string& where;
  const Graph& g;                          // the graph being read (value references)
  const std::vector<std::string>& symbols; // the file's (symbolic integers)

  [[noreturn]] void bad(const std::string& what) const { fail(ErrorKind::Value, where, ": ", what); }

  const json& field(const json& o, const char* key, const char* in) const {
    if (!o.is_object()) bad(std::string(in) + " is not an object");
    auto it = o.find(key);
    if (it == o.end()) bad(std::string(in) + " has no \"" + key + "\"");
    return *it;
  }
  const json& array(const json& o, const char* key, const char* in, size_t max = kMaxItems) const {
    const json& a = field(o, key, in);
    if (!a.is_array()) bad(std::string(in) + "'s \"" + key + "\" is not an array");
    if (a.size() > max) bad(std::string(in) + "'s \"" + key + "\" is too long");
    return a;
  }
  int64_t integer(const json& v, const char* what, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) bad(std::string(what) + " is not an integer");
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
    if (x < lo || x > hi) bad(std::string(what) + " " + std::to_string(x) + " is out of range");
    return x;
  }
  std::string string(const json& v, const char* what) const {
    if (!v.is_string()) bad(std::string(what) + " is not a string");
    return v.get<std::string>();
  }
  Int int_of(const json& v) const {
    if (!v.is_object()) return Int(integer(v, "an integer", -kMaxCoefficient, kMaxCoefficient));
    Int i;
    i.sym = int32_t(integer(field(v, "sym", "a symbolic integer"), "a symbol", 0, int64_t(symbols.size()) - 1));
    i.mul = v.contains("mul") ? integer(v["mul"], "a coefficient", -kMaxCoefficient, kMaxCoefficient) : 1;
    i.add = v.contains("add") ? integer(v["add"], "a coefficient", -kMaxCoefficient, kMaxCoefficient) : 0;
    return i;
  }
  double num_of(const json& v) const {
    if (v.is_number()) return v.get<double>();
    if (v == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (v == "inf") return INFINITY;
    if (v == "-inf") return -INFINITY;
    bad("a node's number is neither a number nor \"inf\", \"-inf\", \"nan\"");
  }
  int32_t value_ref(const json& v, const char* what, bool none_ok) const {
    return int32_t(integer(v, what, none_ok ? -1 : 0, int64_t(g.values.size()) - 1));
  }
};

}  // namespace

namespace {

// A graph's body (the root adds the format, version, ops and symbols).
json body_json(const Graph& g) {
  json values = json::array();
  for (const ValueInfo& v : g.values)
    values.push_back({{"dtype", std::string(dtype_name(v.dtype))}, {"shape", ints_json(v.shape)}});
  json inputs = json::array();
  for (size_t i = 0; i < g.inputs.size(); ++i)
    inputs.push_back({{"value", g.inputs[i]}, {"name", i < g.input_names.size() ? g.input_names[i] : ""}});
  json constants = json::array();
  for (const auto& [v, name] : g.constants) constants.push_back({{"value", v}, {"tensor", name}});
  json nodes = json::array();
  for (const Node& n : g.nodes) {
    json j = {{"op", n.op}, {"in", n.in}, {"out", n.out}};
    if (!n.ints.empty()) j["ints"] = ints_json(n.ints);
    if (!n.nums.empty()) {
      json a = json::array();
      for (double v : n.nums) a.push_back(num_json(v));
      j["nums"] = a;
    }
    if (!n.graphs.empty()) {
      json a = json::array();
      for (const Graph& sub : n.graphs) a.push_back(body_json(sub));
      j["graphs"] = a;
    }
    nodes.push_back(std::move(j));
  }
  return {{"values", values}, {"inputs", inputs}, {"constants", constants}, {"nodes", nodes}, {"outputs", g.outputs}};
}

void list_ops(const Graph& g, json& ops) {
  for (const Node& n : g.nodes) {
    const OpRow* r = find_op(n.op);
    ops[n.op] = r ? r->version : 1;
    for (const Graph& sub : n.graphs) list_ops(sub, ops);
  }
}

// A loop node (dl.while_loop): ints {n}, the first n inputs its state; the condition
// takes every input and gives one value, the body takes every input and gives the n
// new state values, the node the final ones.
void check_loop(const Reader& rd, const Node& n, const std::string& at) {
  const int64_t state = n.ints[0].constant() ? n.ints[0].add : -1;
  const size_t nin = n.in.size();
  if (state < 1 || size_t(state) > nin) rd.bad(at + ": its state count is out of range");
  for (int32_t v : n.in)
    if (v < 0) rd.bad(at + ": a loop's inputs are all given");
  const Graph& cond = n.graphs[0];
  const Graph& body = n.graphs[1];
  if (cond.inputs.size() != nin || body.inputs.size() != nin || cond.outputs.size() != 1 ||
      body.outputs.size() != size_t(state) || n.out.size() != size_t(state))
    rd.bad(at + ": its graphs do not take and give its state");
}

// Reads a graph's body into g (root: the file's graph; else a node's, which has no
// constants and names the root's symbols). Each value is made once, by an input, a
// constant or a node, before it is read.
void read_body(const Reader& root, const json& doc, const json& ops, Graph& g, size_t depth) {
  Reader rd{root.where, g, root.symbols};
  const bool is_root = depth == 0;
  const char* what = is_root ? "the graph" : "a node's graph";
  for (const json& v : rd.array(doc, "values", what)) {
    ValueInfo info;
    const std::string dt = rd.string(rd.field(v, "dtype", "a value"), "a dtype");
    try {
      info.dtype = dtype_from_name(dt);
    } catch (const Error&) {
      rd.bad("unknown dtype \"" + dt + "\"");
    }
    for (const json& d : rd.array(v, "shape", "a value", kMaxDims)) info.shape.push_back(rd.int_of(d));
    g.values.push_back(std::move(info));
  }
  std::vector<uint8_t> made(g.values.size(), 0);
  auto make = [&](int32_t v) {
    if (v < 0) return;
    if (made[size_t(v)]) rd.bad("value " + std::to_string(v) + " is made twice");
    made[size_t(v)] = 1;
  };
  for (const json& in : rd.array(doc, "inputs", what)) {
    g.inputs.push_back(rd.value_ref(rd.field(in, "value", "an input"), "an input's value", false));
    g.input_names.push_back(rd.string(rd.field(in, "name", "an input"), "an input's name"));
    make(g.inputs.back());
  }
  const json& consts = rd.array(doc, "constants", what);
  if (!is_root && !consts.empty()) rd.bad("a node's graph has constants (they belong to the file's graph)");
  for (const json& c : consts) {
    const int32_t v = rd.value_ref(rd.field(c, "value", "a constant"), "a constant's value", false);
    g.constants.emplace_back(v, rd.string(rd.field(c, "tensor", "a constant"), "a constant's tensor"));
    make(v);
  }
  for (const json& nj : rd.array(doc, "nodes", what)) {
    Node n;
    n.op = rd.string(rd.field(nj, "op", "a node"), "a node's op");
    const std::string at = "node " + std::to_string(g.nodes.size()) + " (" + n.op + ")";
    if (!ops.contains(n.op)) rd.bad(at + ": its op is not listed in \"ops\"");
    const OpRow& r = *find_op(n.op);
    const json& in = rd.array(nj, "in", "a node");
    for (size_t k = 0; k < in.size(); ++k) {
      const int32_t v = rd.value_ref(in[k], "a node's input", k < 32 && ((r.optional >> k) & 1u));
      if (v >= 0 && !made[size_t(v)]) rd.bad(at + ": reads value " + std::to_string(v) + " before it is made");
      n.in.push_back(v);
    }
    for (const json& o : rd.array(nj, "out", "a node")) n.out.push_back(rd.value_ref(o, "a node's result", true));
    if (nj.contains("ints"))
      for (const json& i : rd.array(nj, "ints", "a node", kMaxDims + 16)) n.ints.push_back(rd.int_of(i));
    if (nj.contains("nums"))
      for (const json& x : rd.array(nj, "nums", "a node", 16)) n.nums.push_back(rd.num_of(x));
    if (nj.contains("graphs")) {
      if (depth + 1 >= kMaxNesting) rd.bad(at + ": graphs nested too deeply");
      for (const json& sub : rd.array(nj, "graphs", "a node", 4)) {
        n.graphs.emplace_back();
        read_body(root, sub, ops, n.graphs.back(), depth + 1);
      }
    }
    const int nin = int(n.in.size()), nints = int(n.ints.size()), nnums = int(n.nums.size());
    if (nin < r.min_in || (r.max_in >= 0 && nin > r.max_in)) rd.bad(at + ": wrong number of inputs");
    if (r.nout >= 0 && int(n.out.size()) != r.nout) rd.bad(at + ": wrong number of results");
    if (nints < r.min_ints || (r.max_ints >= 0 && nints > r.max_ints)) rd.bad(at + ": wrong number of ints");
    if (r.nnums >= 0 ? nnums != r.nnums : nnums > 1) rd.bad(at + ": wrong number of numbers");
    if (int(n.graphs.size()) != r.ngraphs) rd.bad(at + ": wrong number of graphs");
    if (r.ngraphs > 0) check_loop(rd, n, at);
    for (int32_t o : n.out) make(o);
    g.nodes.push_back(std::move(n));
  }
  for (const json& o : rd.array(doc, "outputs", what)) {
    const int32_t v = rd.value_ref(o, "an output", false);
    if (!made[size_t(v)]) rd.bad("output value " + std::to_string(v) + " is never made");
    g.outputs.push_back(v);
  }
}

}  // namespace

std::string to_json(const Graph& g) {
  json ops = json::object();
  list_ops(g, ops);
  json doc = body_json(g);
  doc["format"] = "dlua.graph";
  doc["version"] = kFormatVersion;
  doc["ops"] = ops;
  doc["symbols"] = g.symbols;
  return doc.dump();
}

Graph from_json(std::string_view text, const std::string& where) {
  Graph g;
  Reader rd{where, g, g.symbols};
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) rd.bad("the graph is not valid JSON");
  if (rd.field(doc, "format", "the graph") != "dlua.graph") rd.bad("the graph's format is not \"dlua.graph\"");
  const int64_t version = rd.integer(rd.field(doc, "version", "the graph"), "the format version", 1, INT64_MAX);
  if (version > kFormatVersion)
    rd.bad("the graph's format version " + std::to_string(version) + " is newer than this runner's (" +
           std::to_string(kFormatVersion) + ")");
  const json& ops = rd.field(doc, "ops", "the graph");
  if (!ops.is_object()) rd.bad("the graph's \"ops\" is not an object");
  for (auto it = ops.begin(); it != ops.end(); ++it) {
    const OpRow* r = find_op(it.key());
    if (!r) rd.bad("the graph uses op \"" + it.key() + "\", which this runner does not know");
    const int64_t v = rd.integer(it.value(), "an op's version", 1, INT64_MAX);
    if (v > r->version)
      rd.bad("the graph uses version " + std::to_string(v) + " of op \"" + it.key() + "\"; this runner has version " +
             std::to_string(r->version));
  }
  for (const json& s : rd.array(doc, "symbols", "the graph", kMaxSymbols)) g.symbols.push_back(rd.string(s, "a symbol"));
  read_body(rd, doc, ops, g, 0);
  return g;
}

std::string describe(const Graph& g, const ValueInfo& v) {
  std::ostringstream s;
  s << dtype_name(v.dtype) << " (";
  for (size_t d = 0; d < v.shape.size(); ++d) {
    const Int& i = v.shape[d];
    if (d) s << ", ";
    if (i.constant()) {
      s << i.add;
      continue;
    }
    if (i.mul != 1) s << i.mul << "*";
    s << (size_t(i.sym) < g.symbols.size() ? g.symbols[size_t(i.sym)] : "?");
    if (i.add) s << (i.add > 0 ? "+" : "") << i.add;
  }
  s << ")";
  return s.str();
}

}  // namespace dl::graph

namespace dl::graph {

std::string summary(const Graph& g) {
  std::ostringstream s;
  s << "inputs:    ";
  for (size_t i = 0; i < g.inputs.size(); ++i)
    s << (i ? ", " : "") << g.input_names[i] << " " << describe(g, g.values[size_t(g.inputs[i])]);
  s << "\noutputs:   ";
  for (size_t i = 0; i < g.outputs.size(); ++i) s << (i ? ", " : "") << describe(g, g.values[size_t(g.outputs[i])]);
  int64_t bytes = 0;
  s << "\nconstants: " << g.constants.size();
  for (const auto& [v, name] : g.constants) {
    const ValueInfo& info = g.values[size_t(v)];
    int64_t n = int64_t(itemsize(info.dtype));
    for (const Int& d : info.shape) n *= d.add;
    bytes += n;
    s << "\n  " << name << " " << describe(g, info);
  }
  s << "\n  (" << bytes << " bytes)";
  std::map<std::string, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  s << "\nnodes:     " << g.nodes.size() << " (";
  bool first = true;
  for (const auto& [op, count] : ops) s << (first ? "" : ", ") << op << " " << count, first = false;
  s << ")";
  s << "\nnumbers:   Lua numbers the graph holds as constants";
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (double x : g.nodes[i].nums) s << "\n  node " << i << " (" << g.nodes[i].op << "): " << x;
  s << "\nsymbols:   ";
  for (size_t i = 0; i < g.symbols.size(); ++i) s << (i ? ", " : "") << g.symbols[i];
  if (g.symbols.empty()) s << "none (every size is fixed)";
  return s.str();
}

}  // namespace dl::graph

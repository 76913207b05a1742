// Loading, saving and running exported graphs (model.h).
#include "export/model.h"

#include <unordered_map>

#include "export/ops.h"
#include "io/safetensors.h"
#include "tensor/error.h"
#include "tensor/observe.h"

namespace dl::graph {

namespace {

void from_file(io::SafetensorsFile f, const std::string& where, Graph* g, std::vector<Tensor>* constants) {
  const std::string* text = nullptr;
  for (const auto& [k, v] : f.metadata)
    if (k == kGraphKey) text = &v;
  if (!text) fail(ErrorKind::Value, "dlg_load: ", where, ": no graph in the file (metadata \"", kGraphKey, "\")");
  *g = from_json(*text, "dlg_load: " + where);
  std::unordered_map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : f.tensors) by_name[name] = &t;
  constants->assign(g->values.size(), Tensor());
  for (const auto& [v, name] : g->constants) {
    auto it = by_name.find(name);
    DL_CHECK(it != by_name.end(), "dlg_load: ", where, ": constant \"", name, "\" is not in the file");
    const ValueInfo& info = g->values[size_t(v)];
    const Tensor& t = *it->second;
    bool same = t.dtype() == info.dtype && t.dim() == int(info.shape.size());
    for (int d = 0; same && d < t.dim(); ++d) same = info.shape[size_t(d)] == Int(t.size(d));
    DL_CHECK(same, "dlg_load: ", where, ": constant \"", name, "\" is ", dtype_name(t.dtype()), " ", t.shape(),
             " in the file but ", describe(*g, info), " in the graph");
    (*constants)[size_t(v)] = t;
  }
}

}  // namespace

std::shared_ptr<const Model> Model::load(const std::string& path) {
  return make(io::load_safetensors(path, "dlg_load"), path);
}

std::shared_ptr<const Model> Model::parse(const void* data, size_t n, const std::string& name) {
  return make(io::parse_safetensors(data, n, name, "dlg_load"), name);
}

std::shared_ptr<const Model> Model::make(io::SafetensorsFile f, const std::string& where) {
  auto m = std::shared_ptr<Model>(new Model());
  from_file(std::move(f), where, &m->g_, &m->constants_);
  m->plan_ = m->plan(m->g_, true);
  return m;
}

// Note [The runner's plan]
// What can be decided once per file is decided when it is loaded, not on every run:
// - each node's row (no lookup by name per node and run);
// - views of constants (a weight's transpose, a reshape of a bias) are made once and
//   kept with the constants: a run starts with them in place and skips their nodes (a
//   node that would copy, such as a reshape of a transpose, runs as before);
// - each value is released after the last node that reads it (the outputs never, nor
//   the constants);
// - a binary pointwise op whose first operand dies at it, made by an earlier node (not
//   an input or a constant) with the result's dtype and shape, may write its result
//   over that operand: when it runs, the operand must be contiguous and held by nothing
//   else (no view of it alive), and no capture may be watching (tensor/observe.h). The
//   ops so treated are the exactly rounded ones (+, -, *, /, maximum, minimum), whose
//   in-place kernel gives eager's bits.
// The graph itself is not changed: graph() is the file's.
namespace {

bool is_view_row(std::string_view op) {
  for (std::string_view v : {"transpose", "permute", "view", "reshape", "expand", "squeeze", "unsqueeze", "narrow",
                             "slice", "select"})
    if (op == v) return true;
  return false;
}

bool exactly_rounded(Op op) {
  return op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Div || op == Op::Maximum || op == Op::Minimum;
}

bool all_constant(const std::vector<Int>& v) {
  for (const Int& i : v)
    if (!i.constant()) return false;
  return true;
}

}  // namespace

Model::Plan Model::plan(const Graph& g, bool top) {
  Plan p;
  const size_t n = g.nodes.size();
  p.rows.resize(n);
  p.folded.assign(n, 0);
  p.in_place.assign(n, 0);
  p.graphs.resize(n);
  auto constant = [&](int32_t v) { return top && v >= 0 && constants_[size_t(v)].defined(); };
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = g.nodes[i];
    p.rows[i] = find_op(nd.op);   // from_json checked it
    for (const Graph& sub : nd.graphs) p.graphs[i].push_back(plan(sub, false));
    bool fold = top && is_view_row(nd.op) && nd.out.size() == 1 && nd.out[0] >= 0 && all_constant(nd.ints) &&
                all_constant(g.values[size_t(nd.out[0])].shape);
    for (int32_t v : nd.in) fold = fold && constant(v);
    if (!fold) continue;
    // Made as a run would make it; a node that fails here is left to fail when it runs.
    try {
      Unobserved quiet;
      std::vector<const Tensor*> in;
      for (int32_t v : nd.in) in.push_back(&constants_[size_t(v)]);
      std::vector<int64_t> ints;
      for (const Int& x : nd.ints) ints.push_back(x.add);
      std::vector<Tensor> out;
      const OpRow& row = *p.rows[i];
      row.run(row, OpArgs{in.data(), int(in.size()), ints.data(), int(ints.size()), nd.nums.data(),
                          int(nd.nums.size()), Device{}}, out);
      const ValueInfo& info = g.values[size_t(nd.out[0])];
      bool same = out.size() == 1 && out[0].defined() && out[0].dtype() == info.dtype &&
                  out[0].dim() == int(info.shape.size());
      for (int d = 0; same && d < out[0].dim(); ++d) same = out[0].size(d) == info.shape[size_t(d)].add;
      // A view only: a copy (a reshape that could not view) would be memory the model
      // keeps, and could be handed out as a result.
      if (!same || !out[0].same_storage(constants_[size_t(nd.in[0])])) continue;
      constants_[size_t(nd.out[0])] = out[0];
      p.folded[i] = 1;
    } catch (const Error&) {
    }
  }
  std::vector<int64_t> last(g.values.size(), -1);
  for (size_t i = 0; i < n; ++i)
    if (!p.folded[i])
      for (int32_t v : g.nodes[i].in)
        if (v >= 0) last[size_t(v)] = int64_t(i);
  for (int32_t v : g.outputs) last[size_t(v)] = -1;
  p.free_after.assign(n, {});
  for (size_t v = 0; v < last.size(); ++v)
    if (last[v] >= 0 && !constant(int32_t(v))) p.free_after[size_t(last[v])].push_back(int32_t(v));
  std::vector<uint8_t> input(g.values.size(), 0);
  for (int32_t v : g.inputs) input[size_t(v)] = 1;
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = g.nodes[i];
    const OpRow& row = *p.rows[i];
    // (the out-of-place row refuses a node with arguments: so must this path)
    if (p.folded[i] || nd.in.size() != 2 || nd.out.size() != 1 || nd.out[0] < 0 || !nd.ints.empty() ||
        !nd.nums.empty())
      continue;
    if (op_info(row.op).family != OpFamily::Binary || row.name != op_info(row.op).lua_name ||
        !exactly_rounded(row.op))
      continue;
    const int32_t a = nd.in[0], b = nd.in[1];
    if (a < 0 || b < 0 || a == b || input[size_t(a)] || constant(a) || last[size_t(a)] != int64_t(i)) continue;
    const ValueInfo &va = g.values[size_t(a)], &vo = g.values[size_t(nd.out[0])];
    p.in_place[i] = va.dtype == vo.dtype && (va.dtype == DType::Float32 || va.dtype == DType::Float64) &&
                    va.shape == vo.shape && g.values[size_t(b)].dtype == va.dtype;
  }
  return p;
}

std::vector<Tensor> Model::run(const std::vector<Tensor>& inputs) const {
  const Graph& g = g_;
  DL_CHECK_KIND(Type, inputs.size() == g.inputs.size(), "dlg_run: the graph takes ", g.inputs.size(),
                " inputs, got ", inputs.size());
  // The symbols' values, from the inputs' sizes.
  std::vector<int64_t> syms(g.symbols.size(), -1);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    const ValueInfo& info = g.values[size_t(g.inputs[k])];
    const std::string& name = g.input_names[k];
    DL_CHECK_KIND(Type, x.defined(), "dlg_run: input ", k + 1, " (", name, ") is missing");
    DL_CHECK_KIND(Type, x.device().is_cpu(), "dlg_run: input ", k + 1, " (", name, ") is on ", x.device(), ", not the cpu");
    bool ok = x.dtype() == info.dtype && x.dim() == int(info.shape.size());
    for (int d = 0; ok && d < x.dim(); ++d) {
      const Int& i = info.shape[size_t(d)];
      if (i.constant() || i.mul != 1 || i.add != 0) continue;   // checked below
      int64_t& s = syms[size_t(i.sym)];
      DL_CHECK_KIND(Type, x.size(d) <= kMaxInt, "dlg_run: input ", k + 1, " (", name, ") has size ", x.size(d),
                    " in a dim that varies; at most ", kMaxInt);
      if (s < 0) s = x.size(d);
      ok = s == x.size(d);
    }
    for (int d = 0; ok && d < x.dim(); ++d) {
      const Int& i = info.shape[size_t(d)];
      ok = (!i.constant() && syms[size_t(i.sym)] < 0) || i.eval(syms) == x.size(d);
    }
    DL_CHECK_KIND(Type, ok, "dlg_run: input ", k + 1, " (", name, ") is ", dtype_name(x.dtype()), " ", x.shape(),
                  "; the graph takes ", describe(g, info));
  }
  std::vector<Tensor> vals = constants_;   // the constants in place, every other value undefined
  for (size_t k = 0; k < inputs.size(); ++k) vals[size_t(g.inputs[k])] = inputs[k];
  std::vector<Tensor> results = run_graph(g, plan_, vals, syms);
  // A constant the graph returns as it is stays the model's: the caller gets a copy.
  for (Tensor& r : results)
    for (const auto& c : g.constants)
      if (r.same_storage(constants_[size_t(c.first)])) r = clone(r);
  return results;
}

namespace {

// A value a node may write over: contiguous, and held by the run's list alone.
bool writable(const Tensor& t) {
  return t.defined() && t.impl()->use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous();
}

bool fits(const Tensor& t, const ValueInfo& info, const std::vector<int64_t>& syms) {
  bool same = t.defined() && t.dtype() == info.dtype && t.dim() == int(info.shape.size());
  for (int d = 0; same && d < t.dim(); ++d) same = info.shape[size_t(d)].eval(syms) == t.size(d);
  return same;
}

}  // namespace

// A loop node: its state (the first ints[0] inputs) through the body while the condition
// holds; the other inputs are read by both graphs, unchanged.
std::vector<Tensor> Model::run_loop(const Node& n, const std::vector<Plan>& p, const std::vector<const Tensor*>& in,
                                    const std::vector<int64_t>& syms) const {
  const size_t state = size_t(n.ints[0].add);
  std::vector<Tensor> args;
  for (const Tensor* t : in) args.push_back(*t);
  const int64_t limit = loop_limit_.load(std::memory_order_relaxed);
  for (int64_t iterations = 0;; ++iterations) {
    DL_CHECK(limit == 0 || iterations < limit, "while: the loop ran past its limit of ", limit,
             " iterations (dlg_set_loop_limit)");
    const Graph& cond = n.graphs[0];
    std::vector<Tensor> vals(cond.values.size());
    for (size_t k = 0; k < args.size(); ++k) vals[size_t(cond.inputs[k])] = args[k];
    const Tensor go = run_graph(cond, p[0], vals, syms).at(0);
    DL_CHECK(go.numel() == 1, "while: the condition gave ", go.numel(), " values, not one");
    if (go.item() == 0) break;
    const Graph& body = n.graphs[1];
    vals.assign(body.values.size(), Tensor());
    for (size_t k = 0; k < args.size(); ++k) vals[size_t(body.inputs[k])] = args[k];
    std::vector<Tensor> next = run_graph(body, p[1], vals, syms);
    for (size_t k = 0; k < state; ++k) args[k] = std::move(next[k]);
  }
  args.resize(state);
  return args;
}

// Runs g's nodes on vals (its inputs and constants already in place) as p plans them.
std::vector<Tensor> Model::run_graph(const Graph& g, const Plan& p, std::vector<Tensor>& vals,
                                     const std::vector<int64_t>& syms) const {
  if (&g != &g_)   // a loop's graph (the file's own inputs were checked by run())
    for (int32_t v : g.inputs)
      DL_CHECK_KIND(Type, fits(vals[size_t(v)], g.values[size_t(v)], syms), "dlg_run: a loop's value is ",
                    dtype_name(vals[size_t(v)].dtype()), " ", vals[size_t(v)].shape(), " where its graph has ",
                    describe(g_, g.values[size_t(v)]));
  const bool quiet = !observing();
  std::vector<const Tensor*> in;
  std::vector<int64_t> ints;
  std::vector<Tensor> out;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (p.folded[i]) continue;   // its result is a constant
    const Node& n = g.nodes[i];
    const OpRow& row = *p.rows[i];
    in.clear();
    for (int32_t v : n.in) {
      if (v >= 0)
        DL_CHECK(vals[size_t(v)].defined(), "dlg_run: node ", i, " (", n.op, ") reads value ", v,
                 ", which no earlier op made");
      in.push_back(v >= 0 ? &vals[size_t(v)] : nullptr);
    }
    ints.clear();
    for (const Int& x : n.ints) ints.push_back(x.eval(syms));
    out.clear();
    try {
      if (row.ngraphs > 0) {
        out = run_loop(n, p.graphs[i], in, syms);
      } else if (p.in_place[i] && quiet && writable(vals[size_t(n.in[0])])) {
        Tensor& a = vals[size_t(n.in[0])];
        binary_(row.op, a, vals[size_t(n.in[1])]);
        out.push_back(a);
        in_place_writes_.fetch_add(1, std::memory_order_relaxed);
      } else {
        row.run(row, OpArgs{in.data(), int(in.size()), ints.data(), int(ints.size()), n.nums.data(),
                            int(n.nums.size()), Device{}}, out);
      }
    } catch (const Error& e) {
      fail(e.kind(), "dlg_run: node ", i, " (", n.op, "): ", e.what());
    }
    for (size_t k = 0; k < n.out.size() && k < out.size(); ++k) {
      const int32_t v = n.out[k];
      if (v < 0) continue;
      const ValueInfo& info = g.values[size_t(v)];
      const Tensor& t = out[k];
      if (!t.defined())
        fail(ErrorKind::Value, "dlg_run: node ", i, " (", n.op, ") made no result where the graph has one");
      DL_CHECK(fits(t, info, syms), "dlg_run: node ", i, " (", n.op, ") made ", dtype_name(t.dtype()), " ",
               t.shape(), " where the graph has ", describe(g_, info),
               ": the inputs' sizes are outside what the export saw vary");
      vals[size_t(v)] = std::move(out[k]);
    }
    for (int32_t v : p.free_after[i]) vals[size_t(v)] = Tensor();
  }
  std::vector<Tensor> results;
  for (int32_t v : g.outputs) results.push_back(vals[size_t(v)]);
  return results;
}

void save_model(const std::string& path, const Graph& g, const std::vector<Tensor>& constants,
                const std::vector<std::pair<std::string, std::string>>& extra) {
  io::NamedTensors tensors;
  for (size_t i = 0; i < g.constants.size(); ++i) tensors.emplace_back(g.constants[i].second, constants.at(i));
  io::Metadata meta = extra;
  std::string text = to_json(g);
  from_json(text, "export: " + path);   // what a reader would refuse is not written
  meta.emplace_back(kGraphKey, std::move(text));
  io::save_safetensors(path, tensors, meta, "export");
}

}  // namespace dl::graph

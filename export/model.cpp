// Loading, saving and running exported graphs (model.h).
#include "export/model.h"

#include <unordered_map>

#include "export/ops.h"
#include "io/safetensors.h"
#include "tensor/error.h"

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
  m->plan();
  return m;
}

// Each value is released after the last node that reads it (the outputs never).
void Model::plan() {
  const Graph& g = g_;
  std::vector<int32_t> last(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int32_t v : g.nodes[i].in)
      if (v >= 0) last[size_t(v)] = int32_t(i);
  for (int32_t v : g.outputs) last[size_t(v)] = -1;
  free_after_.assign(g.nodes.size(), {});
  for (size_t v = 0; v < last.size(); ++v)
    if (last[v] >= 0 && !constants_[v].defined()) free_after_[size_t(last[v])].push_back(int32_t(v));
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
  std::vector<Tensor> results = run_graph(g, vals, syms, &free_after_);
  // A constant the graph returns as it is stays the model's: the caller gets a copy.
  for (Tensor& r : results)
    for (const auto& c : g.constants)
      if (r.same_storage(constants_[size_t(c.first)])) r = clone(r);
  return results;
}

namespace {

bool fits(const Tensor& t, const ValueInfo& info, const std::vector<int64_t>& syms) {
  bool same = t.defined() && t.dtype() == info.dtype && t.dim() == int(info.shape.size());
  for (int d = 0; same && d < t.dim(); ++d) same = info.shape[size_t(d)].eval(syms) == t.size(d);
  return same;
}

}  // namespace

// A loop node: its state (the first ints[0] inputs) through the body while the condition
// holds; the other inputs are read by both graphs, unchanged.
std::vector<Tensor> Model::run_loop(const Node& n, const std::vector<const Tensor*>& in,
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
    const Tensor go = run_graph(cond, vals, syms, nullptr).at(0);
    DL_CHECK(go.numel() == 1, "while: the condition gave ", go.numel(), " values, not one");
    if (go.item() == 0) break;
    const Graph& body = n.graphs[1];
    vals.assign(body.values.size(), Tensor());
    for (size_t k = 0; k < args.size(); ++k) vals[size_t(body.inputs[k])] = args[k];
    std::vector<Tensor> next = run_graph(body, vals, syms, nullptr);
    for (size_t k = 0; k < state; ++k) args[k] = std::move(next[k]);
  }
  args.resize(state);
  return args;
}

// Runs g's nodes on vals (its inputs and constants already in place). free_after: per
// node, the values to release after it (null: none released early).
std::vector<Tensor> Model::run_graph(const Graph& g, std::vector<Tensor>& vals, const std::vector<int64_t>& syms,
                                     const std::vector<std::vector<int32_t>>* free_after) const {
  if (!free_after)   // a loop's graph (the file's own inputs were checked by run())
    for (int32_t v : g.inputs)
      DL_CHECK_KIND(Type, fits(vals[size_t(v)], g.values[size_t(v)], syms), "dlg_run: a loop's value is ",
                    dtype_name(vals[size_t(v)].dtype()), " ", vals[size_t(v)].shape(), " where its graph has ",
                    describe(g_, g.values[size_t(v)]));
  std::vector<const Tensor*> in;
  std::vector<int64_t> ints;
  std::vector<Tensor> out;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const OpRow& row = *find_op(n.op);   // from_json checked it
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
        out = run_loop(n, in, syms);
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
    if (free_after)
      for (int32_t v : (*free_after)[i]) vals[size_t(v)] = Tensor();
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

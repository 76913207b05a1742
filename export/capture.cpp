// A graph from the ops the engine reports (capture.h).
//
// Note [Strict capture]
// A tracer's silent failure is a value it takes for a constant although it came from
// the inputs (torch.jit.trace's frozen tensors). Here a tensor an op reads is:
// - a value of the graph: an input, or a result of a reported op, known by its memory
//   (storage, offset, sizes, strides, dtype), as compile/grad.cpp knows values; or
// - a constant: its memory belongs to no value of the graph. It was made before the
//   capture (a parameter) or by a constant-making op during it (dl.tensor, arange), and
//   its bytes are copied now.
// What is refused, with the op's name: a tensor whose memory is a value's but whose
// layout no reported op made (a view the capture did not see); a result allocated
// outside every reported op (Observer::unreported: an op that does not report itself,
// or a random op, whose result would otherwise be frozen); an in-place write (the graph
// is functional); batch_norm in training mode (it writes the running statistics); a
// tensor off the host; an op with no row in export/ops.cpp. The bindings add the
// escapes to Lua (item, comparisons, reading values), which a graph cannot hold.
#include "export/capture.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <sstream>

#include "export/ops.h"
#include "tensor/error.h"

namespace dl::graph {

namespace {

std::vector<Int> ints_of(const Shape& s) { return std::vector<Int>(s.begin(), s.end()); }

}  // namespace

int32_t Capture::find(const Tensor& t) const {
  auto it = known_.find(&t.storage());
  if (it == known_.end()) return -1;
  for (auto k = it->second.rbegin(); k != it->second.rend(); ++k)
    if (k->offset == t.offset() && k->sizes == t.shape() && k->strides == t.strides() && k->dtype == t.dtype())
      return k->value;
  return -2;   // the memory of a value, in a layout no reported op made
}

void Capture::remember(const Tensor& t, int32_t v) {
  known_[&t.storage()].push_back(Known{t.offset(), t.shape(), t.strides(), t.dtype(), v, t});
}

int32_t Capture::add_value(const Tensor& t) {
  const int32_t v = int32_t(graph.values.size());
  graph.values.push_back(ValueInfo{t.dtype(), ints_of(t.shape())});
  remember(t, v);
  return v;
}

std::string Capture::elsewhere(const Device& d) const {
  return d.str() + (device_.is_cpu() ? std::string("; export from the cpu")
                                     : "; the function's arguments are on " + device_.str());
}

int32_t Capture::value_of(const Tensor& t, const char* op) {
  if (t.device() != device_) {
    set_error(std::string(op) + " reads a tensor on " + elsewhere(t.device()));
    return -1;
  }
  const int32_t v = find(t);
  if (v >= 0) return v;
  if (v == -2) {
    set_error(std::string(op) + " reads a view of a value of the graph that an op the exporter does not see made");
    return -1;
  }
  if (root().marked_.count(&t.storage())) {
    set_error(std::string(op) + " reads a tensor made inside a loop's body that the loop does not return; "
              "make it part of the loop's state");
    return -1;
  }
  if (parent_) {   // a value of the enclosing graph (or a constant there): an input here
    const int32_t pv = parent_->value_of(t, op);
    if (pv < 0) return set_error(parent_->error()), -1;
    const int32_t in = add_value(t);
    graph.inputs.push_back(in);
    graph.input_names.emplace_back();
    outer_.push_back(pv);
    return in;
  }
  Tensor copy;
  {
    Unobserved quiet;  // the constants' copies are not ops of the graph
    copy = contiguous(clone(t));
  }
  const int32_t c = add_value(t);
  graph.constants.emplace_back(c, "");   // named by prune(), or after a parameter by name()
  constants.push_back(copy);
  sources_.push_back(t);
  return c;
}

void Capture::input(const Tensor& t, const std::string& name) {
  if (t.device() != device_)
    return set_error((name.empty() ? std::string("an argument") : "input " + name) + " is on " + elsewhere(t.device()));
  if (find(t) >= 0) return set_error("input " + name + " is the same tensor as an earlier input");
  graph.inputs.push_back(add_value(t));
  graph.input_names.push_back(name);
}

void Capture::output(const Tensor& t) {
  if (!error_.empty()) return;
  const int32_t v = value_of(t, "a result");
  if (v >= 0) graph.outputs.push_back(v);
}

void Capture::name(const Tensor& t, const std::string& name) {
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i].impl() == t.impl() && graph.constants[i].second.rfind("const.", 0) == 0) {
      for (const auto& c : graph.constants)
        if (c.second == name) return;   // a name already given (two parameters named alike)
      graph.constants[i].second = name;
    }
}

// Note [Loops]
// dl.while_loop captures its condition and body once each, on the loop's state as it is,
// each as a graph of its own (a child Capture) whose first inputs are the state; a
// tensor of the enclosing capture that one of them reads becomes a further input of
// that graph (outer_), and the enclosing graph's value is an input of the loop node. The
// node takes the state, then every value either graph reads from outside (in one order:
// each graph gets an input for each, unused where it reads none). The loop itself runs
// eagerly once, unobserved, for the values the rest of the function goes on with; its
// final state becomes the node's results. The runner runs the body while the condition
// holds (Model::run_loop).
void Capture::loop(Capture& cond, Capture& body, const std::vector<Tensor>& init, const std::vector<Tensor>& final) {
  if (!error_.empty()) return;
  if (!cond.error().empty()) return set_error(cond.error());
  if (!body.error().empty()) return set_error(body.error());
  Unobserved quiet;
  Node n;
  n.op = "while";
  n.ints = {Int(int64_t(init.size()))};
  for (const Tensor& t : init) n.in.push_back(value_of(t, "while_loop"));
  std::vector<int32_t> outer;   // the union of both graphs' outside values, in order
  for (Capture* c : {&cond, &body})
    for (int32_t v : c->outer_)
      if (std::find(outer.begin(), outer.end(), v) == outer.end()) outer.push_back(v);
  for (int32_t v : outer) n.in.push_back(v);
  for (Capture* c : {&cond, &body})
    for (const auto& [storage, entries] : c->known_)
      for (const Known& k : entries)
        if (find(k.hold) < 0) mark(k.hold);
  for (Capture* c : {&cond, &body}) {
    // The graph's inputs: the state, then one per outside value in the node's order.
    Graph& g = c->graph;
    std::vector<int32_t> inputs(g.inputs.begin(), g.inputs.begin() + std::ptrdiff_t(init.size()));
    for (int32_t v : outer) {
      auto it = std::find(c->outer_.begin(), c->outer_.end(), v);
      if (it != c->outer_.end()) {
        inputs.push_back(g.inputs[init.size() + size_t(it - c->outer_.begin())]);
      } else {
        inputs.push_back(int32_t(g.values.size()));
        g.values.push_back(graph.values[size_t(v)]);
      }
    }
    g.inputs = inputs;
    g.input_names.assign(inputs.size(), "");
    c->prune();
    n.graphs.push_back(std::move(g));
  }
  if (!error_.empty()) return;
  for (const Tensor& t : final) n.out.push_back(add_value(t));
  graph.nodes.push_back(std::move(n));
}

void Capture::mark(const Tensor& t) {
  Capture& r = root();
  if (t.defined() && r.marked_.insert(&t.storage()).second) r.marked_hold_.push_back(t);
}

void Marking::seen(const Observed& o) {
  c_.mark(o.out);
  for (const Tensor& t : o.outs) c_.mark(t);
}

void Capture::unreported(const char* op) {
  set_error(std::string(op) + " made a tensor outside the ops the exporter sees" +
            (std::strncmp(op, "rand", 4) == 0 || std::strcmp(op, "bernoulli") == 0 || std::strcmp(op, "dropout") == 0
                 ? " (random ops cannot be exported; in a model, switch dropout off with evaluation mode)"
                 : ""));
}

// The node of an op report: its name and lists as export/ops.cpp reads them.
bool Capture::node_of(const Observed& o, Node* n) {
  const char* op = o.fn == Fn::Other ? o.name : fn_name(o.fn);
  switch (o.fn) {
    case Fn::Unary: case Fn::Binary: case Fn::Compare: op = op_name(o.op); break;
    case Fn::BinaryScalar: case Fn::CompareScalar:
      op = op_name(o.op);
      n->ints = {Int(o.first), Int(int64_t(o.skind))};
      n->nums = {o.s};
      break;
    case Fn::Reduce:
      op = op_name(o.op);
      n->ints = {Int(o.keepdim)};
      for (int d : o.dims) n->ints.push_back(Int(d));
      n->nums = {o.opts.correction, o.opts.p};
      break;
    case Fn::MatMul: op = "matmul"; break;
    case Fn::SumTo: case Fn::Expand: case Fn::Reshape: case Fn::View: n->ints = ints_of(o.shape); break;
    case Fn::Squeeze: n->ints = {Int(!o.dims.empty()), Int(o.dims.empty() ? 0 : o.dims[0])}; break;
    case Fn::Unsqueeze: n->ints = {Int(o.dims.at(0))}; break;
    case Fn::Transpose: n->ints = {Int(o.dims.at(0)), Int(o.dims.at(1))}; break;
    case Fn::Cast: n->ints = {Int(int64_t(o.dtype))}; break;
    case Fn::Contiguous: case Fn::Clone: break;
    case Fn::Full:
      if (o.device != device_) return set_error("full makes a tensor on " + elsewhere(o.device)), false;
      n->ints = {Int(int64_t(o.dtype))};
      for (int64_t d : o.shape) n->ints.push_back(Int(d));
      n->nums = {o.s};
      break;
    case Fn::Write: return set_error("an in-place write into a tensor cannot be exported (a graph is a function of its "
                                          "inputs); use the op's out-of-place form, and evaluation mode for models"),
                                false;
    case Fn::Other:
      n->ints.assign(o.ints.begin(), o.ints.end());
      n->nums = o.nums;
      break;
  }
  n->op = op;
  if (!find_op(n->op)) return set_error(n->op + " cannot be exported: the runner has no row for it"), false;
  if (n->op == "batch_norm" && !o.ints.empty() && o.ints[0] != 0)
    return set_error("batch_norm in training mode cannot be exported (it updates the running statistics); "
                     "switch the model to evaluation mode first"), false;
  return true;
}

void Capture::seen(const Observed& o) {
  if (!error_.empty()) return;
  Unobserved quiet;  // the constants' copies are not ops of the graph
  if (o.fn == Fn::Other && std::strcmp(o.name, "constant") == 0) {   // dl.tensor, arange ...
    value_of(o.out, "constant");
    return;
  }
  Node n;
  if (!node_of(o, &n)) return;
  if (o.fn == Fn::Other) {
    for (const Tensor* t : o.ins) n.in.push_back(t ? value_of(*t, o.name) : -1);
  } else {
    for (int k = 0; k < o.nin; ++k) n.in.push_back(value_of(*o.in[k], n.op.c_str()));
  }
  if (!error_.empty()) return;
  std::vector<Tensor> outs = o.fn == Fn::Other ? o.outs : std::vector<Tensor>{o.out};
  for (const Tensor& t : outs) {
    if (t.defined() && t.device() != device_) return set_error(n.op + " made a tensor on " + elsewhere(t.device()));
    n.out.push_back(t.defined() ? add_value(t) : -1);
  }
  graph.nodes.push_back(std::move(n));
}

void Capture::prune() {
  Graph& g = graph;
  std::vector<uint8_t> live(g.values.size(), 0);
  for (int32_t v : g.outputs) live[size_t(v)] = 1;
  std::vector<uint8_t> keep(g.nodes.size(), 0);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    for (int32_t o : g.nodes[i].out) keep[i] |= o >= 0 && live[size_t(o)];
    if (keep[i])
      for (int32_t v : g.nodes[i].in)
        if (v >= 0) live[size_t(v)] = 1;
  }
  // New numbers in the order values are made: inputs, constants (in the order the kept
  // nodes first read them, which does not depend on when a capture happened to see
  // them first), node results.
  std::vector<int32_t> renum(g.values.size(), -1);
  Graph out;
  out.symbols = g.symbols;
  auto add = [&](int32_t v) {
    renum[size_t(v)] = int32_t(out.values.size());
    out.values.push_back(g.values[size_t(v)]);
    return renum[size_t(v)];
  };
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    out.inputs.push_back(add(g.inputs[i]));
    out.input_names.push_back(g.input_names[i]);
  }
  std::vector<int32_t> constant_of(g.values.size(), -1);   // value -> its index in g.constants
  for (size_t i = 0; i < g.constants.size(); ++i) constant_of[size_t(g.constants[i].first)] = int32_t(i);
  std::vector<Tensor> consts, sources;
  auto add_constant = [&](int32_t v) {
    if (v < 0 || constant_of[size_t(v)] < 0 || renum[size_t(v)] >= 0) return;
    const size_t i = size_t(constant_of[size_t(v)]);
    out.constants.emplace_back(add(v), "const." + std::to_string(out.constants.size()));
    consts.push_back(constants[i]);
    sources.push_back(sources_[i]);
  };
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i])
      for (int32_t v : g.nodes[i].in) add_constant(v);
  for (int32_t v : g.outputs) add_constant(v);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!keep[i]) continue;
    Node n = std::move(g.nodes[i]);
    for (int32_t& v : n.in) v = v >= 0 ? renum[size_t(v)] : -1;
    for (int32_t& v : n.out) v = v >= 0 && live[size_t(v)] ? add(v) : -1;
    out.nodes.push_back(std::move(n));
  }
  for (int32_t v : g.outputs) out.outputs.push_back(renum[size_t(v)]);
  g = std::move(out);
  constants = std::move(consts);
  sources_ = std::move(sources);
}

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * a.itemsize()) == 0;
}

std::string num_str(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

bool same_num(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }

}  // namespace

std::string unify(Capture& first, const Capture& second, int sym, const std::vector<int64_t>& base,
                  const std::vector<int64_t>& at) {
  Graph& g = first.graph;
  const Graph& h = second.graph;
  const int64_t v1 = sym >= 0 ? base[size_t(sym)] : 0, v2 = sym >= 0 ? at[size_t(sym)] : 0;
  const std::string why = sym < 0 ? " in the check capture"
                                  : " when " + g.symbols[size_t(sym)] + " changed from " + std::to_string(v1) +
                                        " to " + std::to_string(v2);
  // One integer of each: equal where the second capture ran, or a new affine term.
  auto one = [&](Int& a, const Int& b, const std::string& at_) -> std::string {
    const int64_t want = a.eval(at), got = b.eval(at);
    if (want == got) return "";
    if (sym < 0) return at_ + " is " + std::to_string(got) + " where the graph has " + std::to_string(want) + why;
    if (!a.constant()) return at_ + " depends on two symbolic dims (a product of sizes cannot be exported)";
    const int64_t dv = v2 - v1, dx = got - a.add;
    if (dv == 0 || dx % dv != 0) return at_ + " is not a whole multiple of " + g.symbols[size_t(sym)];
    const int64_t mul = dx / dv;
    a = Int::symbol(sym, mul, a.add - mul * v1);
    return "";
  };
  // The graphs alike, node by node and value by value (a loop node's graphs too).
  std::function<std::string(Graph&, const Graph&, const std::string&)> graphs =
      [&](Graph& g, const Graph& h, const std::string& in) -> std::string {
    if (g.nodes.size() != h.nodes.size() || g.values.size() != h.values.size() ||
        g.constants.size() != h.constants.size() || g.outputs != h.outputs || g.inputs != h.inputs)
      return "the function made different ops" + in + why + " (" + std::to_string(g.nodes.size()) +
             " nodes, then " + std::to_string(h.nodes.size()) + "): its Lua code took another path";
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node& a = g.nodes[i];
      const Node& b = h.nodes[i];
      const std::string at = "node " + std::to_string(i) + " (" + a.op + ")" + in;
      if (a.op != b.op || a.in != b.in || a.out != b.out || a.ints.size() != b.ints.size() ||
          a.nums.size() != b.nums.size() || a.graphs.size() != b.graphs.size())
        return at + " is a different op" + why + " (" + b.op + "): the function's Lua code took another path";
      for (size_t k = 0; k < a.nums.size(); ++k)
        if (!same_num(a.nums[k], b.nums[k]))
          return at + "'s Lua number " + num_str(a.nums[k]) + " became " + num_str(b.nums[k]) + why +
                 ": compute it with tensor ops (x.shape read in Lua is a constant of the graph)";
      for (size_t k = 0; k < a.ints.size(); ++k) {
        std::string e = one(a.ints[k], b.ints[k], at + "'s argument " + std::to_string(k + 1));
        if (!e.empty()) return e;
      }
      for (size_t k = 0; k < a.graphs.size(); ++k) {
        std::string e = graphs(a.graphs[k], b.graphs[k], " in graph " + std::to_string(k + 1) + " of " + at);
        if (!e.empty()) return e;
      }
    }
    for (size_t v = 0; v < g.values.size(); ++v) {
      ValueInfo& a = g.values[v];
      const ValueInfo& b = h.values[v];
      if (a.dtype != b.dtype || a.shape.size() != b.shape.size())
        return "value " + std::to_string(v) + in + " differs" + why;
      for (size_t d = 0; d < a.shape.size(); ++d) {
        std::string e = one(a.shape[d], b.shape[d], "the size of value " + std::to_string(v) + in);
        if (!e.empty()) return e;
      }
    }
    return "";
  };
  std::string e = graphs(g, h, "");
  if (!e.empty()) return e;
  for (size_t i = 0; i < g.constants.size(); ++i)
    if (g.constants[i].first != h.constants[i].first || !same_bits(first.constants[i], second.constants[i]))
      return "constant " + g.constants[i].second + " differs" + why +
             ": a tensor the function reads that is not an argument changed, or depends on an argument's size";
  return "";
}

}  // namespace dl::graph

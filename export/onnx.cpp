// dl.export.onnx's converter: a .dlg file (export/graph.h: a safetensors file whose
// metadata holds the graph as JSON) into an ONNX model (opset 17, IR version 8: what
// Debian's ONNX 1.12 reads), written with ONNX's own protobuf classes (libonnx-dev).
//
// It is a plugin, libdlua_onnx.so, loaded by the first dl.export.onnx (bindings/
// capi_export.cpp), so that no other program loads protobuf. It reads only the file
// (its own JSON parse, nlohmann's), never the engine: nothing here runs an op.
//
// Note [Lowering to ONNX]
// Each node of the graph becomes one or a few ONNX nodes (lower() below, one case per
// op row of export/ops.cpp); an op without a lowering is an error naming it, never a
// silent approximation. Values keep their numbers as names ("t12"), inputs their input
// names and constants their tensor names (initializers, raw little-endian bytes).
//   - Types: ONNX ops take one dtype for all operands where dlua promotes. A binary op
//     casts each operand to its result's dtype (compares: to the wider of the two), so
//     the arithmetic happens in the dtype dlua used.
//   - Sizes that follow a symbol (dl.export's `dynamic`) are dim_params ("batch") on
//     inputs and outputs; a shape operand that holds one (reshape, expand, full) is
//     built at run time: Shape of the input that carries the symbol, Gather of its dim,
//     times mul plus add, Concat with the constant parts.
//   - Engine-derived constants stay constants (as in the .dlg file).
#include <fcntl.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using json = nlohmann::json;
using onnx::TensorProto;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void failf(const std::string& m) { throw Failure("export.onnx: " + m); }

int elem_type(const std::string& dt) {
  if (dt == "float32") return TensorProto::FLOAT;
  if (dt == "float64") return TensorProto::DOUBLE;
  if (dt == "int64") return TensorProto::INT64;
  if (dt == "int32") return TensorProto::INT32;
  if (dt == "uint8") return TensorProto::UINT8;
  if (dt == "bool") return TensorProto::BOOL;
  failf("no ONNX type for dtype " + dt);
}
int rank_of(const std::string& dt) {   // dlua's promotion order
  static const std::map<std::string, int> r = {{"bool", 0}, {"uint8", 1}, {"int32", 2}, {"int64", 3}, {"float32", 4},
                                               {"float64", 5}};
  auto it = r.find(dt);
  return it == r.end() ? -1 : it->second;
}

// An integer of the graph: a constant, or mul * symbol + add.
struct GInt {
  int64_t add = 0, mul = 0;
  int sym = -1;
};
GInt gint(const json& j) {
  GInt g;
  if (j.is_number_integer()) {
    g.add = j.get<int64_t>();
    return g;
  }
  g.sym = j.at("sym").get<int>();
  g.mul = j.value("mul", int64_t(1));
  g.add = j.value("add", int64_t(0));
  return g;
}
double gnum(const json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    return s == "inf" ? INFINITY : s == "-inf" ? -INFINITY : NAN;
  }
  return j.get<double>();
}

class Lowering {
 public:
  // (prefix: the names of a loop's graphs, which ONNX keeps apart from the outer ones)
  Lowering(const json& graph, onnx::GraphProto* g, std::string prefix = "") : j_(graph), g_(g), prefix_(std::move(prefix)) {
    if (j_.contains("symbols"))   // (a loop's graphs have their root's: sub() copies them)
      for (const json& s : j_.at("symbols")) symbols_.push_back(s.get<std::string>());
    for (const json& v : j_.at("values")) {
      dtypes_.push_back(v.at("dtype").get<std::string>());
      std::vector<GInt> shape;
      for (const json& d : v.at("shape")) shape.push_back(gint(d));
      shapes_.push_back(shape);
    }
    names_.resize(dtypes_.size());
    for (size_t i = 0; i < names_.size(); ++i) names_[i] = prefix_ + "#v" + std::to_string(i);
  }

  std::vector<std::string>& names() { return names_; }
  const std::string& dtype(int v) const { return dtypes_.at(size_t(v)); }
  const std::vector<GInt>& shape(int v) const { return shapes_.at(size_t(v)); }

  // A ValueInfoProto of value v under its name.
  void value_info(onnx::ValueInfoProto* vi, int v) const {
    vi->set_name(names_.at(size_t(v)));
    auto* t = vi->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem_type(dtype(v)));
    auto* sh = t->mutable_shape();
    for (const GInt& d : shape(v)) {
      auto* dim = sh->add_dim();
      if (d.sym < 0) dim->set_dim_value(d.add);
      else dim->set_dim_param(dim_name(d));
    }
  }

  // Where each symbol can be read at run time: an input (by its name, once the names
  // are bound) and its dim. A loop's graph starts from its enclosing graph's (sub()),
  // whose values it may read by name.
  void find_symbols() {
    for (const json& in : j_.at("inputs")) {
      const int v = in.at("value").get<int>();
      const auto& s = shape(v);
      for (size_t d = 0; d < s.size(); ++d)
        if (s[d].sym >= 0 && s[d].mul == 1 && s[d].add == 0 && !sym_at_.count(s[d].sym))
          sym_at_[s[d].sym] = {names_.at(size_t(v)), int(d)};
    }
  }

  void lower_all() {
    for (const json& n : j_.at("nodes")) lower(n);
  }

  // A graph's inputs named as `names` (a loop's graphs: their values from outside), and
  // its constants as the file's tensors (initializers of the outermost graph).
  void bind(const std::vector<std::string>& names) {
    const json& in = j_.at("inputs");
    if (in.size() != names.size()) failf("while: a loop's graph has " + std::to_string(in.size()) + " inputs for " +
                                         std::to_string(names.size()) + " values");
    for (size_t k = 0; k < names.size(); ++k) names_.at(in.at(k).at("value").get<size_t>()) = names[k];
    for (const json& c : j_.at("constants")) names_.at(c.at("value").get<size_t>()) = c.at("tensor").get<std::string>();
  }
  int input_value(size_t k) const { return j_.at("inputs").at(k).at("value").get<int>(); }
  int output_value(size_t k) const { return j_.at("outputs").at(k).get<int>(); }
  // The truth of a loop condition's one value, as the scalar bool ONNX's Loop takes.
  std::string truth() {
    const int v = output_value(0);
    return apply("Reshape", {cast(names_.at(size_t(v)), dtype(v), "bool"), ints_constant({})});
  }

 private:
  std::string dim_name(const GInt& d) const {
    const std::string& s = symbols_.at(size_t(d.sym));
    std::string r = d.mul == 1 ? s : std::to_string(d.mul) + "*" + s;
    if (d.add) r += (d.add > 0 ? "+" : "") + std::to_string(d.add);
    return r;
  }
  std::string fresh() { return prefix_ + "#n" + std::to_string(counter_++); }

  onnx::NodeProto* node(const std::string& type, const std::vector<std::string>& in,
                        const std::vector<std::string>& out) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(type);
    n->set_name(prefix_ + type + "_" + std::to_string(counter_++));
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  }
  static void attr_i(onnx::NodeProto* n, const char* name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_f(onnx::NodeProto* n, const char* name, double v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(float(v));
  }
  static void attr_ints(onnx::NodeProto* n, const char* name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

  // An initializer holding `vals` as dtype dt, shape `dims`.
  std::string constant(const std::string& dt, const std::vector<double>& vals, const std::vector<int64_t>& dims) {
    const std::string name = prefix_ + "#c" + std::to_string(counter_++);
    TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(elem_type(dt));
    for (int64_t d : dims) t->add_dims(d);
    for (double v : vals) {
      switch (t->data_type()) {
        case TensorProto::FLOAT: t->add_float_data(float(v)); break;
        case TensorProto::DOUBLE: t->add_double_data(v); break;
        case TensorProto::INT64: t->add_int64_data(int64_t(v)); break;
        default: t->add_int32_data(int32_t(v)); break;   // int32, uint8, bool
      }
    }
    return name;
  }
  std::string ints_constant(const std::vector<int64_t>& v) {
    std::vector<double> d(v.begin(), v.end());
    return constant("int64", d, {int64_t(v.size())});
  }
  std::string scalar(const std::string& dt, double v) { return constant(dt, {v}, {}); }

  std::string cast(const std::string& x, const std::string& from, const std::string& to) {
    if (from == to) return x;
    const std::string o = fresh();
    attr_i(node("Cast", {x}, {o}), "to", elem_type(to));
    return o;
  }
  std::string in_as(const json& n, int k, const std::string& dt) {
    const int v = n.at("in").at(k).get<int>();
    return cast(names_.at(size_t(v)), dtype(v), dt);
  }
  int in_value(const json& n, int k) const { return n.at("in").at(k).get<int>(); }
  int out_value(const json& n, int k) const { return n.at("out").at(k).get<int>(); }
  std::string out_name(const json& n, int k) {
    const int v = out_value(n, k);
    return v < 0 ? fresh() : names_.at(size_t(v));
  }
  std::vector<GInt> ints(const json& n) const {
    std::vector<GInt> r;
    if (n.contains("ints"))
      for (const json& i : n.at("ints")) r.push_back(gint(i));
    return r;
  }
  std::vector<double> nums(const json& n) const {
    std::vector<double> r;
    if (n.contains("nums"))
      for (const json& x : n.at("nums")) r.push_back(gnum(x));
    return r;
  }
  static int64_t konst(const GInt& i, const std::string& op) {
    if (i.sym >= 0) failf(op + ": an argument that follows a symbolic size has no ONNX lowering here");
    return i.add;
  }
  // A dim argument (0-based; may be negative) of a tensor of `rank` dims, as ONNX's axis.
  static int64_t axis(const GInt& i, size_t rank, const std::string& op) {
    int64_t d = konst(i, op);
    return d < 0 ? d + int64_t(rank) : d;
  }

  // A 1-D int64 tensor of the sizes `s`, built at run time where a size follows a symbol.
  std::string shape_tensor(const std::vector<GInt>& s, const std::string& op) {
    bool dynamic = false;
    for (const GInt& d : s) dynamic = dynamic || d.sym >= 0;
    std::vector<int64_t> fixed;
    for (const GInt& d : s) fixed.push_back(d.add);
    if (!dynamic) return ints_constant(fixed);
    std::vector<std::string> parts;
    for (const GInt& d : s) {
      if (d.sym < 0) {
        parts.push_back(ints_constant({d.add}));
        continue;
      }
      auto it = sym_at_.find(d.sym);
      if (it == sym_at_.end()) failf(op + ": symbol " + symbols_.at(size_t(d.sym)) + " is no input's size");
      const std::string sh = fresh(), g = fresh();
      node("Shape", {it->second.first}, {sh});
      node("Gather", {sh, ints_constant({it->second.second})}, {g});
      std::string v = g;
      if (d.mul != 1) {
        const std::string m = fresh();
        node("Mul", {v, ints_constant({d.mul})}, {m});
        v = m;
      }
      if (d.add != 0) {
        const std::string a = fresh();
        node("Add", {v, ints_constant({d.add})}, {a});
        v = a;
      }
      parts.push_back(v);
    }
    const std::string o = fresh();
    attr_i(node("Concat", parts, {o}), "axis", 0);
    return o;
  }

  void unary(const json& n, const std::string& type) {
    node(type, {in_as(n, 0, dtype(out_value(n, 0)))}, {out_name(n, 0)});
  }
  // Binary ops: two inputs, or one and a number (ints {scalar_first, kind}, nums {v}).
  void binary(const json& n, const std::string& type, bool compare) {
    std::string dt, a, b;
    operands(n, type, compare, dt, a, b);
    if (type == "NotEqual") {
      const std::string e = fresh();
      node("Equal", {a, b}, {e});
      node("Not", {e}, {out_name(n, 0)});
      return;
    }
    if (type == "And" || type == "Or") {
      a = cast(a, dt, "bool");
      b = cast(b, dt, "bool");
    }
    node(type, {a, b}, {out_name(n, 0)});
  }
  // A binary op's operands a and b, as the dtype dt it computes in.
  void operands(const json& n, const std::string& type, bool compare, std::string& dt, std::string& a,
                std::string& b) {
    dt = dtype(out_value(n, 0));
    const auto& in = n.at("in");
    if (in.size() == 2) {
      if (compare) dt = rank_of(dtype(in_value(n, 0))) >= rank_of(dtype(in_value(n, 1))) ? dtype(in_value(n, 0))
                                                                                          : dtype(in_value(n, 1));
      a = in_as(n, 0, dt);
      b = in_as(n, 1, dt);
    } else {
      if (compare) dt = dtype(in_value(n, 0));
      const auto iv = ints(n);
      const double s = nums(n).at(0);
      if (compare && rank_of(dt) < 4 && std::floor(s) != s) dt = "float64";   // 3 < 2.5 compares as floats
      a = in_as(n, 0, dt);
      b = scalar(dt, s);
      if (konst(iv.at(0), type)) std::swap(a, b);
    }
  }
  // A node of one fresh output, its name.
  std::string apply(const char* type, const std::vector<std::string>& in) {
    const std::string r = fresh();
    node(type, in, {r});
    return r;
  }
  // The remainder, Python's and dlua's: it takes the divisor's sign. ONNX's Mod does so
  // for integers; for floats with fmod = 1 it is C's fmod (the dividend's sign, exact),
  // moved by the divisor where the two signs differ, as tensor/functors.h's ModFn
  // computes it.
  void remainder(const json& n) {
    std::string dt, a, b;
    operands(n, "remainder", false, dt, a, b);
    const std::string out = out_name(n, 0);
    const bool floats = rank_of(dt) >= 4;
    const std::string r = floats ? fresh() : out;
    attr_i(node("Mod", {a, b}, {r}), "fmod", floats ? 1 : 0);
    if (!floats) return;
    const std::string zero = scalar(dt, 0);
    const std::string nonzero = apply("Not", {apply("Equal", {r, zero})});
    const std::string signs = apply("Xor", {apply("Less", {r, zero}), apply("Less", {b, zero})});
    node("Where", {apply("And", {nonzero, signs}), apply("Add", {r, b}), r}, {out});
  }
  // atan2(a, b), which ONNX has no operator for: atan(a / b), turned by pi towards a's
  // side where b is on the negative side. Where a / b is NaN, from the sides alone: both
  // zero, a or that turn; both infinite, pi / 4 or 3 pi / 4 on a's side. The sides count
  // signed zeros, as C's atan2 does (x < 0, or 1 / x < 0 for -0).
  void atan2(const json& n) {
    std::string dt, a, b;
    operands(n, "atan2", false, dt, a, b);
    const std::string zero = scalar(dt, 0);
    auto negative = [&](const std::string& x) {
      return apply("Or", {apply("Less", {x, zero}), apply("Less", {apply("Reciprocal", {x}), zero})});
    };
    const std::string a_negative = negative(a), b_negative = negative(b);
    auto on_a_side = [&](const std::string& m) { return apply("Where", {a_negative, apply("Neg", {m}), m}); };
    const std::string t = apply("Atan", {apply("Div", {a, b})});
    const std::string turn = on_a_side(scalar(dt, M_PI));
    const std::string moved = apply("Where", {b_negative, apply("Add", {t, turn}), t});
    const std::string corner =
        on_a_side(apply("Where", {b_negative, scalar(dt, 3 * M_PI / 4), scalar(dt, M_PI / 4)}));
    const std::string infinite = apply("And", {apply("IsInf", {a}), apply("IsInf", {b})});
    const std::string origin = apply("And", {apply("Equal", {a, zero}), apply("Equal", {b, zero})});
    const std::string corners = apply("Where", {infinite, corner, moved});
    node("Where", {origin, apply("Where", {b_negative, turn, a}), corners}, {out_name(n, 0)});
  }
  // Reductions: ints {keepdim, dims...}, nums {correction, p}.
  void reduce(const json& n, const std::string& type) {
    const int x = in_value(n, 0);
    const auto iv = ints(n);
    const int64_t keep = konst(iv.at(0), type);
    std::vector<int64_t> axes;
    for (size_t i = 1; i < iv.size(); ++i) axes.push_back(axis(iv[i], shape(x).size(), type));
    const std::string in = in_as(n, 0, dtype(out_value(n, 0)));
    onnx::NodeProto* r;
    if (type == "ReduceSum") {   // axes an input from opset 13
      r = axes.empty() ? node(type, {in}, {out_name(n, 0)}) : node(type, {in, ints_constant(axes)}, {out_name(n, 0)});
    } else {
      r = node(type, {in}, {out_name(n, 0)});
      if (!axes.empty()) attr_ints(r, "axes", axes);
    }
    attr_i(r, "keepdims", keep);
  }

  void lower(const json& n) {
    const std::string op = n.at("op").get<std::string>();
    static const std::map<std::string, std::string> unaries = {
        {"neg", "Neg"}, {"abs", "Abs"}, {"exp", "Exp"}, {"log", "Log"}, {"sqrt", "Sqrt"}, {"sin", "Sin"},
        {"cos", "Cos"}, {"tan", "Tan"}, {"tanh", "Tanh"}, {"sigmoid", "Sigmoid"}, {"relu", "Relu"},
        {"softplus", "Softplus"}, {"erf", "Erf"}, {"floor", "Floor"}, {"ceil", "Ceil"}, {"round", "Round"},
        {"sign", "Sign"}, {"logical_not", "Not"}, {"contiguous", "Identity"}, {"clone", "Identity"},
        {"asin", "Asin"}, {"acos", "Acos"}, {"atan", "Atan"}, {"sinh", "Sinh"}, {"cosh", "Cosh"},
        {"asinh", "Asinh"}, {"acosh", "Acosh"}, {"atanh", "Atanh"}};
    static const std::map<std::string, std::string> binaries = {
        {"add", "Add"}, {"sub", "Sub"}, {"mul", "Mul"}, {"div", "Div"}, {"pow", "Pow"}, {"maximum", "Max"},
        {"minimum", "Min"}};
    static const std::map<std::string, std::string> compares = {
        {"eq", "Equal"}, {"ne", "NotEqual"}, {"lt", "Less"}, {"le", "LessOrEqual"}, {"gt", "Greater"},
        {"ge", "GreaterOrEqual"}, {"logical_and", "And"}, {"logical_or", "Or"}};
    static const std::map<std::string, std::string> reductions = {
        {"sum", "ReduceSum"}, {"mean", "ReduceMean"}, {"amax", "ReduceMax"}, {"amin", "ReduceMin"},
        {"prod", "ReduceProd"}, {"logsumexp", "ReduceLogSumExp"}};
    if (auto it = unaries.find(op); it != unaries.end()) return unary(n, it->second);
    if (auto it = binaries.find(op); it != binaries.end()) return binary(n, it->second, false);
    if (auto it = compares.find(op); it != compares.end()) return binary(n, it->second, true);
    if (auto it = reductions.find(op); it != reductions.end()) return reduce(n, it->second);
    if (op == "remainder") return remainder(n);
    if (op == "while") return loop(n);
    if (op == "atan2") return atan2(n);
    const int x = n.at("in").empty() ? -1 : in_value(n, 0);
    const auto iv = ints(n);
    const std::string out = n.at("out").empty() ? std::string() : out_name(n, 0);
    const size_t rank = x >= 0 ? shape(x).size() : 0;
    if (op == "gelu") {   // x * (1 + erf(x / sqrt 2)) / 2: ONNX's Gelu needs opset 20
      const std::string dt = dtype(out_value(n, 0)), a = in_as(n, 0, dt);
      const std::string s = fresh(), e = fresh(), p = fresh(), h = fresh();
      node("Mul", {a, scalar(dt, 0.70710678118654752440)}, {s});
      node("Erf", {s}, {e});
      node("Add", {e, scalar(dt, 1)}, {p});
      node("Mul", {a, p}, {h});
      node("Mul", {h, scalar(dt, 0.5)}, {out});
    } else if (op == "rsqrt" || op == "log1p" || op == "expm1" || op == "log2" || op == "log10" || op == "exp2" ||
               op == "erfc") {
      const std::string dt = dtype(out_value(n, 0)), a = in_as(n, 0, dt), t = fresh();
      if (op == "log2" || op == "log10") {   // ln x / ln b
        node("Log", {a}, {t});
        node("Mul", {t, scalar(dt, op == "log2" ? 1.44269504088896340736 : 0.43429448190325182765)}, {out});
      } else if (op == "exp2") {              // e^(x ln 2)
        node("Mul", {a, scalar(dt, 0.69314718055994530942)}, {t});
        node("Exp", {t}, {out});
      } else if (op == "erfc") {              // 1 - erf(x)
        node("Erf", {a}, {t});
        node("Sub", {scalar(dt, 1), t}, {out});
      } else if (op == "rsqrt") {
        node("Sqrt", {a}, {t});
        node("Reciprocal", {t}, {out});
      } else if (op == "log1p") {
        node("Add", {a, scalar(dt, 1)}, {t});
        node("Log", {t}, {out});
      } else {
        node("Exp", {a}, {t});
        node("Sub", {t, scalar(dt, 1)}, {out});
      }
    } else if (op == "matmul") {
      const std::string dt = dtype(out_value(n, 0));
      node("MatMul", {in_as(n, 0, dt), in_as(n, 1, dt)}, {out});
    } else if (op == "reshape" || op == "view") {
      node("Reshape", {names_.at(size_t(x)), shape_tensor(iv, op)}, {out});
    } else if (op == "expand") {
      node("Expand", {names_.at(size_t(x)), shape_tensor(iv, op)}, {out});
    } else if (op == "unsqueeze") {
      node("Unsqueeze", {names_.at(size_t(x)), ints_constant({axis(iv.at(0), rank + 1, op)})}, {out});
    } else if (op == "squeeze") {
      std::vector<int64_t> axes;
      if (konst(iv.at(0), op)) {
        axes.push_back(axis(iv.at(1), rank, op));
      } else {
        for (size_t d = 0; d < rank; ++d)
          if (shape(x)[d].sym < 0 && shape(x)[d].add == 1) axes.push_back(int64_t(d));
      }
      node("Squeeze", {names_.at(size_t(x)), ints_constant(axes)}, {out});
    } else if (op == "transpose" || op == "permute") {
      std::vector<int64_t> perm(rank);
      for (size_t d = 0; d < rank; ++d) perm[d] = int64_t(d);
      if (op == "transpose") {
        if (rank > 0) std::swap(perm[size_t(axis(iv.at(0), rank, op))], perm[size_t(axis(iv.at(1), rank, op))]);
      } else {
        for (size_t d = 0; d < rank; ++d) perm[d] = axis(iv.at(d), rank, op);
      }
      attr_ints(node("Transpose", {names_.at(size_t(x))}, {out}), "perm", perm);
    } else if (op == "to") {
      node("Identity", {cast(names_.at(size_t(x)), dtype(x), dtype(out_value(n, 0)))}, {out});
    } else if (op == "full") {
      // ints {dtype, shape...}, nums {value}
      std::vector<GInt> s(iv.begin() + 1, iv.end());
      const std::string dt = dtype(out_value(n, 0));
      onnx::NodeProto* c = node("ConstantOfShape", {shape_tensor(s, op)}, {out});
      auto* a = c->add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      TensorProto* t = a->mutable_t();
      t->set_data_type(elem_type(dt));
      t->add_dims(1);
      const double v = nums(n).at(0);
      if (dt == "float32") t->add_float_data(float(v));
      else if (dt == "float64") t->add_double_data(v);
      else if (dt == "int64") t->add_int64_data(int64_t(v));
      else t->add_int32_data(int32_t(v));
    } else if (op == "where") {
      const std::string dt = dtype(out_value(n, 0));
      node("Where", {in_as(n, 0, "bool"), in_as(n, 1, dt), in_as(n, 2, dt)}, {out});
    } else if (op == "clamp") {
      const std::string dt = dtype(out_value(n, 0));
      const auto v = nums(n);
      node("Clip", {in_as(n, 0, dt), konst(iv.at(0), op) ? scalar(dt, v.at(0)) : std::string(),
                    konst(iv.at(1), op) ? scalar(dt, v.at(1)) : std::string()},
           {out});
    } else if (op == "softmax" || op == "log_softmax") {
      attr_i(node(op == "softmax" ? "Softmax" : "LogSoftmax", {names_.at(size_t(x))}, {out}), "axis",
             axis(iv.at(0), rank, op));
    } else if (op == "fft_c2c") {
      // ONNX's DFT takes the same (real, imaginary) pairs in a last dim of 2; its inverse
      // divides by n, which dlua's unnormalised transform does not
      const int64_t len = konst(shape(x).at(rank - 2), op);
      const bool inverse = konst(iv.at(0), op) != 0;
      const std::string dt = dtype(out_value(n, 0)), t = inverse ? fresh() : out;
      auto* d = node("DFT", {in_as(n, 0, dt)}, {t});
      attr_i(d, "axis", int64_t(rank) - 2);
      attr_i(d, "inverse", inverse);
      if (inverse) node("Mul", {t, scalar(dt, double(len))}, {out});
    } else if (op == "fft_r2c" || op == "fft_c2r") {
      // DFT on a real signal (a last dim of 1) with onesided = 1 gives rfft's bins; the way
      // back writes out the mirrored conjugates and runs the inverse DFT of the whole
      // spectrum. The bins strictly between 0 and n/2 carry the op's weight, and bins 0
      // and n/2 have no imaginary part (Note [A real signal's transform]).
      const bool r2c = op == "fft_r2c";
      const int64_t weight = konst(iv.at(r2c ? 0 : 1), op);
      const int64_t len = r2c ? konst(shape(x).at(rank - 1), op) : konst(iv.at(0), op);
      const int64_t bins = len / 2 + 1, ax = r2c ? int64_t(rank) - 1 : int64_t(rank) - 2;
      const std::string dt = dtype(out_value(n, 0));
      std::vector<double> w;   // (bins, 2): the middle bins' weight (halved the way back), the edges real
      for (int64_t k = 0; k < bins; ++k) {
        const bool edge = k == 0 || 2 * k == len;
        const double v = edge ? 1.0 : r2c ? double(weight) : double(weight) / 2;
        w.insert(w.end(), {v, edge ? 0.0 : v});
      }
      if (r2c) {
        const std::string u = apply("Unsqueeze", {in_as(n, 0, dt), ints_constant({int64_t(rank)})});
        auto* d = node("DFT", {u}, {fresh()});
        attr_i(d, "axis", ax);
        attr_i(d, "onesided", 1);
        node("Mul", {d->output(0), constant(dt, w, {bins, 2})}, {out});   // (edges exactly real, as the CPU's)
      } else {
        std::string full = apply("Mul", {in_as(n, 0, dt), constant(dt, w, {bins, 2})});
        if (len - bins > 0) {   // bins len - bins .. 1, reversed and conjugated
          const std::string mirror = apply("Slice", {full, ints_constant({len - bins}), ints_constant({0}),
                                                     ints_constant({ax}), ints_constant({-1})});
          const std::string f = fresh();
          attr_i(node("Concat", {full, apply("Mul", {mirror, constant(dt, {1, -1}, {2})})}, {f}), "axis", ax);
          full = f;
        }
        auto* d = node("DFT", {full}, {fresh()});
        attr_i(d, "axis", ax);
        attr_i(d, "inverse", 1);
        const std::string re = fresh();
        attr_i(node("Gather", {d->output(0), constant("int64", {0}, {})}, {re}), "axis", int64_t(rank) - 1);
        node("Mul", {re, scalar(dt, double(len))}, {out});
      }
    } else if (op == "cumsum") {
      attr_i(node("CumSum", {in_as(n, 0, dtype(out_value(n, 0))), ints_constant({axis(iv.at(0), rank, op)})}, {out}),
             "reverse", konst(iv.at(1), op));
    } else if (op == "argmax" || op == "argmin") {
      std::string in = names_.at(size_t(x));
      int64_t ax = 0;
      if (konst(iv.at(0), op)) {
        ax = axis(iv.at(1), rank, op);
      } else {
        const std::string f = fresh();
        node("Reshape", {in, ints_constant({-1})}, {f});
        in = f;
      }
      auto* a = node(op == "argmax" ? "ArgMax" : "ArgMin", {in}, {out});
      attr_i(a, "axis", ax);
      attr_i(a, "keepdims", konst(iv.at(0), op) ? konst(iv.at(2), op) : 0);
      attr_i(a, "select_last_index", 0);
    } else if (op == "max_dim" || op == "min_dim") {
      const int64_t ax = axis(iv.at(0), rank, op), keep = konst(iv.at(1), op);
      auto* v = node(op == "max_dim" ? "ReduceMax" : "ReduceMin", {names_.at(size_t(x))}, {out});
      attr_ints(v, "axes", {ax});
      attr_i(v, "keepdims", keep);
      auto* a = node(op == "max_dim" ? "ArgMax" : "ArgMin", {names_.at(size_t(x))}, {out_name(n, 1)});
      attr_i(a, "axis", ax);
      attr_i(a, "keepdims", keep);
    } else if (op == "narrow" || op == "slice") {
      const int64_t ax = axis(iv.at(0), rank, op), start = konst(iv.at(1), op);
      const int64_t stop = op == "narrow" ? start + konst(iv.at(2), op) : konst(iv.at(2), op);
      const int64_t step = op == "narrow" ? 1 : konst(iv.at(3), op);
      node("Slice", {names_.at(size_t(x)), ints_constant({start}), ints_constant({stop}), ints_constant({ax}),
                     ints_constant({step})},
           {out});
    } else if (op == "select") {
      attr_i(node("Gather", {names_.at(size_t(x)), constant("int64", {double(konst(iv.at(1), op))}, {})}, {out}), "axis",
             axis(iv.at(0), rank, op));
    } else if (op == "cat" || op == "stack") {
      std::vector<std::string> ins;
      const std::string dt = dtype(out_value(n, 0));
      const size_t out_rank = shape(out_value(n, 0)).size();
      const int64_t ax = axis(iv.at(0), out_rank, op);
      for (size_t k = 0; k < n.at("in").size(); ++k) {
        std::string a = in_as(n, int(k), dt);
        if (op == "stack") {
          const std::string u = fresh();
          node("Unsqueeze", {a, ints_constant({ax})}, {u});
          a = u;
        }
        ins.push_back(a);
      }
      attr_i(node("Concat", ins, {out}), "axis", ax);
    } else if (op == "index_select") {
      attr_i(node("Gather", {names_.at(size_t(x)), in_as(n, 1, "int64")}, {out}), "axis", axis(iv.at(0), rank, op));
    } else if (op == "gather") {
      attr_i(node("GatherElements", {names_.at(size_t(x)), in_as(n, 1, "int64")}, {out}), "axis",
             axis(iv.at(0), rank, op));
    } else if (op == "conv2d" || op == "conv_transpose2d") {
      // x, weight (conv_transpose2d's (in, out / groups, kH, kW) is ONNX's layout too), bias
      // (optional); ints {stride h, w, padding h, w, dilation h, w, groups} and, for
      // conv_transpose2d, {output padding h, w}
      std::vector<std::string> ins = {names_.at(size_t(x)), names_.at(size_t(in_value(n, 1)))};
      if (in_value(n, 2) >= 0) ins.push_back(names_.at(size_t(in_value(n, 2))));
      const bool transposed = op == "conv_transpose2d";
      auto* c = node(transposed ? "ConvTranspose" : "Conv", ins, {out});
      attr_ints(c, "strides", {konst(iv[0], op), konst(iv[1], op)});
      attr_ints(c, "pads", {konst(iv[2], op), konst(iv[3], op), konst(iv[2], op), konst(iv[3], op)});
      attr_ints(c, "dilations", {konst(iv[4], op), konst(iv[5], op)});
      attr_i(c, "group", konst(iv[6], op));
      if (transposed) attr_ints(c, "output_padding", {konst(iv[7], op), konst(iv[8], op)});
    } else if (op == "max_pool2d" || op == "avg_pool2d") {
      // ints {kernel h, w, stride h, w, padding h, w, ceil_mode, count_include_pad, with indices}
      if (op == "max_pool2d" && out_value(n, 1) >= 0) failf("max_pool2d: its indices have no ONNX lowering here");
      auto* p = node(op == "max_pool2d" ? "MaxPool" : "AveragePool", {names_.at(size_t(x))}, {out});
      attr_ints(p, "kernel_shape", {konst(iv[0], op), konst(iv[1], op)});
      attr_ints(p, "strides", {konst(iv[2], op), konst(iv[3], op)});
      attr_ints(p, "pads", {konst(iv[4], op), konst(iv[5], op), konst(iv[4], op), konst(iv[5], op)});
      attr_i(p, "ceil_mode", konst(iv[6], op));
      if (op == "avg_pool2d") attr_i(p, "count_include_pad", konst(iv[7], op));
    } else if (op == "batch_norm") {
      // x, weight, bias, running mean, running var; ints {training}, nums {momentum, eps}
      if (konst(iv.at(0), op)) failf("batch_norm in training mode has no ONNX lowering (export the model in eval mode)");
      if (in_value(n, 3) < 0 || in_value(n, 4) < 0) failf("batch_norm without running statistics has no ONNX lowering");
      const int64_t c = konst(shape(x).at(1), op);
      const std::string dt = dtype(x);
      std::vector<double> ones(size_t(c), 1.0), zeros(size_t(c), 0.0);
      const std::string w = in_value(n, 1) >= 0 ? in_as(n, 1, dt) : constant(dt, ones, {c});
      const std::string b = in_value(n, 2) >= 0 ? in_as(n, 2, dt) : constant(dt, zeros, {c});
      attr_f(node("BatchNormalization", {names_.at(size_t(x)), w, b, in_as(n, 3, dt), in_as(n, 4, dt)}, {out}), "epsilon",
             nums(n).at(1));
    } else if (op == "lstm_gates") {
      // gates (..., 4H), c (..., H): h' = o tanh(c'), c' = f c + i g, gates i, f, g, o
      const std::string dt = dtype(out_value(n, 0)), a = in_as(n, 0, dt), c = in_as(n, 1, dt);
      const int64_t H = konst(shape(in_value(n, 1)).back(), op);
      const std::string gi = fresh(), gf = fresh(), gg = fresh(), go = fresh();
      attr_i(node("Split", {a, ints_constant({H, H, H, H})}, {gi, gf, gg, go}), "axis", -1);
      const std::string i = fresh(), f = fresh(), g = fresh(), o = fresh(), fc = fresh(), ig = fresh();
      const std::string c2 = out_name(n, 1), tc = fresh();
      node("Sigmoid", {gi}, {i});
      node("Sigmoid", {gf}, {f});
      node("Tanh", {gg}, {g});
      node("Sigmoid", {go}, {o});
      node("Mul", {f, c}, {fc});
      node("Mul", {i, g}, {ig});
      node("Add", {fc, ig}, {c2});
      node("Tanh", {c2}, {tc});
      node("Mul", {o, tc}, {out});
    } else if (op == "layer_norm") {
      // x, weight, bias (optional); ints {normalized dims}, nums {eps}
      if (out_value(n, 1) >= 0 || out_value(n, 2) >= 0) failf("layer_norm: its statistics have no ONNX lowering");
      const int64_t k = konst(iv.at(0), op);
      const std::string dt = dtype(x);
      std::string w;
      if (in_value(n, 1) >= 0) {
        w = in_as(n, 1, dt);
      } else {
        std::vector<int64_t> dims;
        int64_t count = 1;
        for (size_t d = rank - size_t(k); d < rank; ++d) dims.push_back(konst(shape(x)[d], op)), count *= dims.back();
        w = constant(dt, std::vector<double>(size_t(count), 1.0), dims);
      }
      std::vector<std::string> ins = {names_.at(size_t(x)), w};
      if (in_value(n, 2) >= 0) ins.push_back(in_as(n, 2, dt));
      auto* l = node("LayerNormalization", ins, {out});
      attr_i(l, "axis", -k);
      attr_f(l, "epsilon", nums(n).at(0));
    } else {
      failf("no ONNX lowering for op " + op);
    }
  }

  // Note [Loops in ONNX]
  // A while node (Note [Loops] in capture.cpp: inputs the state, then what its graphs
  // read from outside; graphs the condition and the body) becomes ONNX's Loop with no
  // trip count: the condition is lowered once here on the first state, and once more
  // inside Loop's body on the state the body made, whose truth is the body's first
  // output. The body's graph takes the iteration number, the condition and the state,
  // and reads the other values from the enclosing graph by name (ONNX's outer scope);
  // its names carry a prefix of their own, as ONNX wants no name twice.
  // A lowering of a loop's graph into `g`, with a prefix of its own.
  Lowering sub(const json& graph, onnx::GraphProto* g) {
    Lowering l(graph, g, prefix_ + "L" + std::to_string(counter_++) + ".");
    l.symbols_ = symbols_;
    l.sym_at_ = sym_at_;
    return l;
  }
  void loop(const json& n) {
    const size_t state = size_t(konst(ints(n).at(0), "while"));
    std::vector<std::string> outer;
    for (const json& v : n.at("in")) outer.push_back(names_.at(v.get<size_t>()));
    const json& cond = n.at("graphs").at(0);
    const json& body = n.at("graphs").at(1);
    Lowering first = sub(cond, g_);
    first.bind(outer);
    first.find_symbols();
    first.lower_all();
    std::vector<std::string> ins = {"", first.truth()};
    ins.insert(ins.end(), outer.begin(), outer.begin() + std::ptrdiff_t(state));
    std::vector<std::string> outs;
    for (size_t k = 0; k < state; ++k) outs.push_back(out_name(n, int(k)));
    onnx::NodeProto* l = node("Loop", ins, outs);
    auto* a = l->add_attribute();
    a->set_name("body");
    a->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* bg = a->mutable_g();
    Lowering b = sub(body, bg);
    const std::string& bp = b.prefix_;
    bg->set_name(bp + "body");
    std::vector<std::string> names = outer;
    for (size_t k = 0; k < state; ++k) names[k] = bp + "#state" + std::to_string(k);
    b.bind(names);
    for (const auto& [name, type] : {std::pair{bp + "#iteration", TensorProto::INT64}, {bp + "#condition", TensorProto::BOOL}}) {
      auto* vi = bg->add_input();
      vi->set_name(name);
      vi->mutable_type()->mutable_tensor_type()->set_elem_type(type);
      vi->mutable_type()->mutable_tensor_type()->mutable_shape();
    }
    for (size_t k = 0; k < state; ++k) b.value_info(bg->add_input(), b.input_value(k));
    b.find_symbols();
    b.lower_all();
    for (size_t k = 0; k < state; ++k) names[k] = b.names().at(size_t(b.output_value(k)));
    Lowering again = sub(cond, bg);
    again.bind(names);
    again.find_symbols();
    again.lower_all();
    auto* c = bg->add_output();
    c->set_name(again.truth());
    c->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::BOOL);
    c->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (size_t k = 0; k < state; ++k) {   // (through Identity: an output that is an input is a name twice)
      const int v = b.output_value(k);
      const std::string to = bp + "#next" + std::to_string(k);
      b.node("Identity", {names[k]}, {to});
      b.names().at(size_t(v)) = to;
      b.value_info(bg->add_output(), v);
    }
  }

  const json& j_;
  onnx::GraphProto* g_;
  std::string prefix_;
  std::vector<std::string> symbols_, dtypes_, names_;
  std::vector<std::vector<GInt>> shapes_;
  std::map<int, std::pair<std::string, int>> sym_at_;   // symbol -> (an input's name, dim)
  int counter_ = 0;
};

// The safetensors dtype strings of a .dlg file's constants, as ONNX types.
int st_type(const std::string& dt) {
  if (dt == "F32") return TensorProto::FLOAT;
  if (dt == "F64") return TensorProto::DOUBLE;
  if (dt == "I64") return TensorProto::INT64;
  if (dt == "I32") return TensorProto::INT32;
  if (dt == "U8") return TensorProto::UINT8;
  if (dt == "BOOL") return TensorProto::BOOL;
  failf("a constant of dtype " + dt + " has no ONNX type");
}

void convert(const std::string& dlg, const std::string& out_path, int opset) {
  std::ifstream f(dlg, std::ios::binary);
  if (!f) failf("cannot open " + dlg);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) failf(dlg + " is not a .dlg file (too short)");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  if (hlen > bytes.size() - 8) failf(dlg + " is not a .dlg file (bad header length)");
  const json header = json::parse(bytes.substr(8, hlen));
  const size_t data0 = 8 + hlen;
  const json graph = json::parse(header.at("__metadata__").at("dlua.graph").get<std::string>());
  if (graph.value("version", 0) != 1) failf(dlg + ": a graph format this converter does not know");

  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("dlua");
  model.set_producer_version("0.1.0");
  auto* os = model.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("dlua");
  Lowering L(graph, g);
  for (const json& c : graph.at("constants")) L.names().at(c.at("value").get<size_t>()) = c.at("tensor").get<std::string>();
  for (const json& in : graph.at("inputs")) L.names().at(in.at("value").get<size_t>()) = in.at("name").get<std::string>();
  for (const json& in : graph.at("inputs")) L.value_info(g->add_input(), in.at("value").get<int>());
  // (the constants of every graph, loops' included, as initializers of the outermost)
  std::vector<const json*> graphs = {&graph};
  for (size_t i = 0; i < graphs.size(); ++i)
    for (const json& n : graphs[i]->at("nodes"))
      if (n.contains("graphs"))
        for (const json& sub : n.at("graphs")) graphs.push_back(&sub);
  std::vector<std::string> added;
  for (const json* gr : graphs) {
    for (const json& c : gr->at("constants")) {
      const std::string name = c.at("tensor").get<std::string>();
      if (std::find(added.begin(), added.end(), name) != added.end()) continue;
      added.push_back(name);
      const json& e = header.at(name);
      TensorProto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(st_type(e.at("dtype").get<std::string>()));
      for (const json& d : e.at("shape")) t->add_dims(d.get<int64_t>());
      const size_t a = e.at("data_offsets").at(0).get<size_t>(), b = e.at("data_offsets").at(1).get<size_t>();
      if (b < a || data0 + b > bytes.size()) failf(dlg + ": constant " + name + " lies outside the file");
      t->set_raw_data(bytes.substr(data0 + a, b - a));
    }
  }
  L.find_symbols();
  L.lower_all();
  for (const json& o : graph.at("outputs")) {
    const int v = o.get<int>();
    L.value_info(g->add_output(), v);
  }
  // Atomically: a fresh temporary of our own beside the target (mkstemp: O_EXCL, never a
  // planted file or link), written and synced, renamed over the target, the folder synced.
  std::string bytes_out;
  if (!model.SerializeToString(&bytes_out)) failf("cannot serialise the model");
  const size_t slash = out_path.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "." : out_path.substr(0, slash == 0 ? 1 : slash);
  std::string tmp = out_path + ".XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) failf("cannot create a temporary file beside " + out_path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes_out.size()) {
    const ssize_t k = ::write(fd, bytes_out.data() + done, bytes_out.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      failf("cannot write " + out_path + ": " + std::strerror(errno));
    }
    done += size_t(k);
  }
  if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    failf("cannot write " + out_path + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    failf("cannot rename a temporary file to " + out_path + ": " + std::strerror(e));
  }
  if (const int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

// The plugin's one entry: 0, or -1 with a message in err.
extern "C" __attribute__((visibility("default"))) int dlua_onnx_convert(const char* dlg, const char* onnx_path,
                                                                          int opset, char* err, int errlen) {
  try {
    convert(dlg, onnx_path, opset);
    return 0;
  } catch (const nlohmann::json::exception& e) {
    std::snprintf(err, size_t(errlen), "export.onnx: %s: a malformed graph (%s)", dlg, e.what());
    return -1;
  } catch (const std::exception& e) {
    std::snprintf(err, size_t(errlen), "%s", e.what());
    return -1;
  }
}

// The rows of export/ops.h: for each op a graph may hold, what its node carries and the
// engine call that runs it. The lists are the ones the op's front end reports (tensor/
// observe.h; the comment of each row repeats them): a change to one is a change to both,
// and the round trip tests (tests/lua/test_export.lua) compare every row's results with
// eager execution bit for bit.
#include "export/ops.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "tensor/error.h"
#include "tensor/nn.h"

namespace dl::graph {

namespace {

const Tensor& arg(const OpArgs& a, int k) {
  static const Tensor none;
  return k < a.nin && a.in[k] ? *a.in[k] : none;
}

// The arguments of a row whose lists have alternatives, checked before they are read.
void expect(const OpRow& r, bool ok, const char* what) {
  if (!ok) fail(ErrorKind::Value, r.name, ": ", what);
}

DType dtype_arg(const OpRow& r, int64_t v) {
  expect(r, v >= 0 && v < kNumDTypes, "a dtype code out of range");
  return DType(v);
}

Shape shape_arg(const OpRow& r, const int64_t* v, int n) {
  expect(r, n <= kMaxDims, "too many dims");
  return Shape(v, n);
}

int dim_arg(int64_t v) { return int(std::clamp<int64_t>(v, -1000, 1000)); }   // the front end checks it

Scalar scalar_arg(const OpRow& r, double v, int64_t kind) {
  expect(r, kind >= 0 && kind <= int64_t(ScalarKind::Bool), "a scalar kind out of range");
  Scalar s;
  s.v = v;
  s.kind = ScalarKind(kind);
  return s;
}

// ---- the op table's families: pointwise with a tensor or a number, reductions -----------
// Two inputs; or one, ints {scalar_first, scalar kind}, nums {the number}.
void run_binary(const OpRow& r, const OpArgs& a, std::vector<Tensor>& out) {
  const bool cmp = op_info(r.op).family == OpFamily::Compare;
  if (a.nin == 2) {
    expect(r, a.nints == 0 && a.nnums == 0, "expected no arguments with two inputs");
    out = {cmp ? compare(r.op, arg(a, 0), arg(a, 1)) : binary(r.op, arg(a, 0), arg(a, 1))};
    return;
  }
  expect(r, a.nints == 2 && a.nnums == 1, "expected ints {scalar_first, kind} and one number with one input");
  const Scalar s = scalar_arg(r, a.nums[0], a.ints[1]);
  out = {cmp ? compare(r.op, arg(a, 0), s, a.ints[0] != 0) : binary(r.op, arg(a, 0), s, a.ints[0] != 0)};
}

void run_unary(const OpRow& r, const OpArgs& a, std::vector<Tensor>& out) { out = {unary(r.op, arg(a, 0))}; }

// ints {keepdim, dims...}, nums {correction, p}.
void run_reduce(const OpRow& r, const OpArgs& a, std::vector<Tensor>& out) {
  std::vector<int> dims;
  for (int i = 1; i < a.nints; ++i) dims.push_back(dim_arg(a.ints[i]));
  ReduceOpts o;
  o.correction = a.nums[0];
  o.p = a.nums[1];
  out = {reduce(r.op, arg(a, 0), dims, a.ints[0] != 0, o)};
}

// ---- the other rows -----------------------------------------------------------------------

Conv2dOpts conv_opts(const int64_t* v) {
  Conv2dOpts o;
  o.stride[0] = v[0], o.stride[1] = v[1];
  o.padding[0] = v[2], o.padding[1] = v[3];
  o.dilation[0] = v[4], o.dilation[1] = v[5];
  o.groups = v[6];
  return o;
}

Pool2dOpts pool_opts(const int64_t* v) {
  Pool2dOpts o;
  o.kernel[0] = v[0], o.kernel[1] = v[1];
  o.stride[0] = v[2], o.stride[1] = v[3];
  o.padding[0] = v[4], o.padding[1] = v[5];
  o.ceil_mode = v[6] != 0;
  o.count_include_pad = v[7] != 0;
  return o;
}

TensorList list_of(const OpArgs& a) {
  TensorList l;
  for (int k = 0; k < a.nin; ++k) l.push_back(arg(a, k));
  return l;
}

#define ROW(name, min_in, max_in, nout, min_ints, max_ints, nnums, ...)                              \
  OpRow{name, 1, min_in, max_in, nout, min_ints, max_ints, nnums,                                     \
        [](const OpRow& r, const OpArgs& a, std::vector<Tensor>& out) { __VA_ARGS__; }}

OpRow optional_inputs(OpRow r, uint32_t mask);
OpRow while_row();

const std::vector<OpRow>& rows() {
  static const std::vector<OpRow> r = {
      ROW("matmul", 2, 2, 1, 0, 0, 0, out = {matmul(arg(a, 0), arg(a, 1))}),
      // Shape functions: ints {the shape asked for}.
      ROW("sum_to", 1, 1, 1, 0, -1, 0, out = {sum_to(arg(a, 0), shape_arg(r, a.ints, a.nints))}),
      ROW("expand", 1, 1, 1, 0, -1, 0, out = {expand(arg(a, 0), shape_arg(r, a.ints, a.nints))}),
      ROW("reshape", 1, 1, 1, 0, -1, 0, out = {reshape(arg(a, 0), shape_arg(r, a.ints, a.nints))}),
      ROW("view", 1, 1, 1, 0, -1, 0, out = {view(arg(a, 0), shape_arg(r, a.ints, a.nints))}),
      // ints {has a dim, the dim}
      ROW("squeeze", 1, 1, 1, 2, 2, 0,
          out = {squeeze(arg(a, 0), a.ints[0] ? std::optional<int>(dim_arg(a.ints[1])) : std::nullopt)}),
      ROW("unsqueeze", 1, 1, 1, 1, 1, 0, out = {unsqueeze(arg(a, 0), dim_arg(a.ints[0]))}),
      ROW("transpose", 1, 1, 1, 2, 2, 0, out = {transpose(arg(a, 0), dim_arg(a.ints[0]), dim_arg(a.ints[1]))}),
      ROW("to", 1, 1, 1, 1, 1, 0, out = {cast(arg(a, 0), dtype_arg(r, a.ints[0]))}),
      ROW("contiguous", 1, 1, 1, 0, 0, 0, out = {contiguous(arg(a, 0))}),
      ROW("clone", 1, 1, 1, 0, 0, 0, out = {clone(arg(a, 0))}),
      // ints {dtype, shape...}, nums {value}
      ROW("full", 0, 0, 1, 1, -1, 1,
          out = {full(shape_arg(r, a.ints + 1, a.nints - 1), Scalar(a.nums[0]), dtype_arg(r, a.ints[0]), a.device)}),
      ROW("where", 3, 3, 1, 0, 0, 0, out = {where(arg(a, 0), arg(a, 1), arg(a, 2))}),
      // ints {has min, has max}, nums {min, max}
      ROW("clamp", 1, 1, 1, 2, 2, 2,
          out = {clamp(arg(a, 0), a.ints[0] ? std::optional<double>(a.nums[0]) : std::nullopt,
                       a.ints[1] ? std::optional<double>(a.nums[1]) : std::nullopt)}),
      ROW("softmax", 1, 1, 1, 1, 1, 0, out = {softmax(arg(a, 0), dim_arg(a.ints[0]))}),
      ROW("log_softmax", 1, 1, 1, 1, 1, 0, out = {log_softmax(arg(a, 0), dim_arg(a.ints[0]))}),
      // ints {dim, reverse}
      ROW("cumsum", 1, 1, 1, 2, 2, 0, out = {cumsum(arg(a, 0), dim_arg(a.ints[0]), a.ints[1] != 0)}),
      ROW("cumprod", 1, 1, 1, 2, 2, 0, out = {cumprod(arg(a, 0), dim_arg(a.ints[0]), a.ints[1] != 0)}),
      // ints {base rank b, region rank k, base shape (b), sizes (k), strides (k), offset}
      ROW("embed", 1, 1, 1, 3, -1, 0, {
        const int64_t b = a.ints[0], k = a.ints[1];
        expect(r, b >= 0 && k >= 0 && b <= kMaxDims && k <= kMaxDims && a.nints == 3 + b + 2 * k,
               "expected ints {base rank, region rank, base shape, sizes, strides, offset}");
        out = {embed(arg(a, 0), shape_arg(r, a.ints + 2, int(b)), shape_arg(r, a.ints + 2 + b, int(k)),
                     shape_arg(r, a.ints + 2 + b + k, int(k)), a.ints[2 + b + 2 * k])};
      }),
      // ints {region rank k, sizes (k), strides (k), offset}
      ROW("strided_view", 1, 1, 1, 2, -1, 0, {
        const int64_t k = a.ints[0];
        expect(r, k >= 0 && k <= kMaxDims && a.nints == 2 + 2 * k, "expected ints {region rank, sizes, strides, offset}");
        out = {strided_view(arg(a, 0), shape_arg(r, a.ints + 1, int(k)), shape_arg(r, a.ints + 1 + k, int(k)),
                            a.ints[1 + 2 * k])};
      }),
      // ints {inverse}
      ROW("fft_c2c", 1, 1, 1, 1, 1, 0, out = {fft_c2c(arg(a, 0), a.ints[0] != 0)}),
      // ints {weight}; fft_c2r: {n, weight}
      ROW("fft_r2c", 1, 1, 1, 1, 1, 0, out = {fft_r2c(arg(a, 0), a.ints[0])}),
      ROW("fft_c2r", 1, 1, 1, 2, 2, 0, out = {fft_c2r(arg(a, 0), a.ints[0], a.ints[1])}),
      // ints {dim, keepdim}: values and indices
      ROW("max_dim", 1, 1, 2, 2, 2, 0, auto p = max_dim(arg(a, 0), dim_arg(a.ints[0]), a.ints[1] != 0);
          out = {p.first, p.second}),
      ROW("min_dim", 1, 1, 2, 2, 2, 0, auto p = min_dim(arg(a, 0), dim_arg(a.ints[0]), a.ints[1] != 0);
          out = {p.first, p.second}),
      // ints {has a dim, the dim, keepdim}
      ROW("argmax", 1, 1, 1, 3, 3, 0,
          out = {argmax(arg(a, 0), a.ints[0] ? std::optional<int>(dim_arg(a.ints[1])) : std::nullopt, a.ints[2] != 0)}),
      ROW("argmin", 1, 1, 1, 3, 3, 0,
          out = {argmin(arg(a, 0), a.ints[0] ? std::optional<int>(dim_arg(a.ints[1])) : std::nullopt, a.ints[2] != 0)}),
      // ints {the order}
      ROW("permute", 1, 1, 1, 0, -1, 0, expect(r, a.nints <= kMaxDims, "too many dims");
          out = {permute(arg(a, 0), std::vector<int>(a.ints, a.ints + a.nints))}),
      ROW("narrow", 1, 1, 1, 3, 3, 0, out = {narrow(arg(a, 0), dim_arg(a.ints[0]), a.ints[1], a.ints[2])}),
      ROW("slice", 1, 1, 1, 4, 4, 0, out = {slice(arg(a, 0), dim_arg(a.ints[0]), a.ints[1], a.ints[2], a.ints[3])}),
      ROW("select", 1, 1, 1, 2, 2, 0, out = {select(arg(a, 0), dim_arg(a.ints[0]), a.ints[1])}),
      // ints {dim}
      ROW("cat", 1, -1, 1, 1, 1, 0, out = {cat(list_of(a), dim_arg(a.ints[0]))}),
      ROW("stack", 1, -1, 1, 1, 1, 0, out = {stack(list_of(a), dim_arg(a.ints[0]))}),
      ROW("index_select", 2, 2, 1, 1, 1, 0, out = {index_select(arg(a, 0), dim_arg(a.ints[0]), arg(a, 1))}),
      ROW("gather", 2, 2, 1, 1, 1, 0, out = {gather(arg(a, 0), dim_arg(a.ints[0]), arg(a, 1))}),
      ROW("scatter_add", 3, 3, 1, 1, 1, 0,
          out = {scatter_add(arg(a, 0), dim_arg(a.ints[0]), arg(a, 1), arg(a, 2))}),
      // x, weight, bias (optional); ints {stride h, w, padding h, w, dilation h, w, groups}
      optional_inputs(ROW("conv2d", 3, 3, 1, 7, 7, 0, out = {conv2d(arg(a, 0), arg(a, 1), arg(a, 2), conv_opts(a.ints))}), 0b100),
      // ... and {output padding h, w}
      optional_inputs(ROW("conv_transpose2d", 3, 3, 1, 9, 9, 0,
          const int64_t pad[2] = {a.ints[7], a.ints[8]};
          out = {conv_transpose2d(arg(a, 0), arg(a, 1), arg(a, 2), conv_opts(a.ints), pad)}), 0b100),
      // ints {kernel h, w, stride h, w, padding h, w, ceil_mode, count_include_pad, with indices}
      ROW("max_pool2d", 1, 1, 2, 9, 9, 0, auto p = max_pool2d(arg(a, 0), pool_opts(a.ints), a.ints[8] != 0);
          out = {p.first, p.second}),
      ROW("avg_pool2d", 1, 1, 1, 9, 9, 0, out = {avg_pool2d(arg(a, 0), pool_opts(a.ints))}),
      // x, weight, bias, running mean, running var (all but x optional); ints {training},
      // nums {momentum, eps}: y, the batch's mean and inverse std
      optional_inputs(ROW("batch_norm", 5, 5, 3, 1, 1, 2,
          expect(r, a.ints[0] == 0, "a graph runs batch_norm in evaluation mode only");
          auto b = batch_norm(arg(a, 0), arg(a, 1), arg(a, 2), arg(a, 3), arg(a, 4), false, a.nums[0], a.nums[1]);
          out = {b.y, b.mean, b.invstd}), 0b11110),
      // x, weight, bias (optional); ints {normalized dims}, nums {eps}
      optional_inputs(ROW("layer_norm", 3, 3, 3, 1, 1, 1,
          auto l = layer_norm(arg(a, 0), int(std::clamp<int64_t>(a.ints[0], -1, kMaxDims + 1)), arg(a, 1),
                              arg(a, 2), a.nums[0]);
          out = {l.y, l.mean, l.invstd}), 0b110),
      // gates, c: h', c'
      ROW("lstm_gates", 2, 2, 2, 0, 0, 0, auto p = lstm_gates(arg(a, 0), arg(a, 1)); out = {p.first, p.second}),
      // ints {classes, dtype}
      ROW("one_hot", 1, 1, 1, 2, 2, 0, out = {one_hot(arg(a, 0), a.ints[0], dtype_arg(r, a.ints[1]))}),
      // ints {reduction, has ignore_index, ignore_index}
      ROW("cross_entropy", 2, 2, 1, 3, 3, 0, expect(r, a.ints[0] >= 0 && a.ints[0] <= 2, "a reduction out of range");
          out = {cross_entropy(arg(a, 0), arg(a, 1), Reduction(a.ints[0]),
                               a.ints[1] ? std::optional<int64_t>(a.ints[2]) : std::nullopt)}),
      // ints {dim, descending}: values and indices; ints {right}
      ROW("sort", 1, 1, 2, 2, 2, 0, auto p = sort(arg(a, 0), dim_arg(a.ints[0]), a.ints[1] != 0);
          out = {p.first, p.second}),
      ROW("searchsorted", 2, 2, 1, 1, 1, 0, out = {searchsorted(arg(a, 0), arg(a, 1), a.ints[0] != 0)}),
      // decompositions and solves (tensor/decomp.cpp); ints {upper, unitriangular}, {complete},
      // {full_matrices}
      ROW("linalg_solve", 2, 2, 1, 0, 0, 0, out = {linalg_solve(arg(a, 0), arg(a, 1))}),
      ROW("solve_triangular", 2, 2, 1, 2, 2, 0,
          out = {solve_triangular(arg(a, 0), arg(a, 1), a.ints[0] != 0, a.ints[1] != 0)}),
      ROW("cholesky", 1, 1, 1, 0, 0, 0, out = {cholesky(arg(a, 0))}),
      ROW("qr", 1, 1, 2, 1, 1, 0, auto p = qr(arg(a, 0), a.ints[0] != 0); out = {p.first, p.second}),
      ROW("eigh", 1, 1, 2, 0, 0, 0, auto p = eigh(arg(a, 0)); out = {p.first, p.second}),
      ROW("svd", 1, 1, 3, 1, 1, 0, SvdResult s = svd(arg(a, 0), a.ints[0] != 0); out = {s.u, s.s, s.vh}),
      ROW("slogdet", 1, 1, 2, 0, 0, 0, auto p = slogdet(arg(a, 0)); out = {p.first, p.second}),
  };
  return r;
}

#undef ROW

OpRow optional_inputs(OpRow r, uint32_t mask) {
  r.optional = mask;
  return r;
}

// dl.while_loop: inputs the loop's state (ints {its count}) then the values its graphs
// read from outside; results the final state; graphs {condition, body}. The runner
// (Model::run) runs it: no run function here.
OpRow while_row() {
  OpRow r;
  r.name = "while";
  r.min_in = 1, r.max_in = -1, r.nout = -1, r.min_ints = 1, r.max_ints = 1, r.ngraphs = 2;
  return r;
}

// Every row by name: the list above, then the op table's families by their Lua names.
const std::unordered_map<std::string_view, OpRow>& table() {
  static const auto t = [] {
    std::unordered_map<std::string_view, OpRow> m;
    for (const OpRow& r : rows()) m.emplace(r.name, r);
    const OpRow w = while_row();
    m.emplace(w.name, w);
    for (int i = 0; i < kNumOps; ++i) {
      const OpInfo& info = op_info(Op(i));
      OpRow r;
      r.name = info.lua_name;
      r.op = info.op;
      switch (info.family) {
        case OpFamily::Unary: r.run = run_unary; break;
        case OpFamily::Binary:
        case OpFamily::Compare: r.max_in = 2, r.max_ints = 2, r.nnums = -1, r.run = run_binary; break;
        case OpFamily::Reduce: r.min_ints = 1, r.max_ints = 1 + kMaxDims, r.nnums = 2, r.run = run_reduce; break;
        case OpFamily::Other: continue;
      }
      m.emplace(r.name, r);
    }
    return m;
  }();
  return t;
}

}  // namespace

const OpRow* find_op(std::string_view name) {
  const auto& t = table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : &it->second;
}

}  // namespace dl::graph

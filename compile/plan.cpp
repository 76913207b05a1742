// The executor of deferred steps (plan.h).
#include "compile/plan.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "tensor/backend.h"
#include "tensor/fold.h"
#include "tensor/fused.h"
#include "tensor/nn.h"
#include "tensor/small.h"

namespace dl::compile {

namespace {

bool float_dtype(DType t) { return t == DType::Float32 || t == DType::Float64; }

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

bool no_value(const Step& s) { return s.kind == Kind::Marker; }

bool pointwise(const Step& s) {
  switch (s.kind) {
    case Kind::Unary: return s.op != Op::Logical_not;
    case Kind::Binary:
    case Kind::BinaryScalar: return true;
    default: return false;
  }
}

int arity(const Step& s) { return arity(s.kind); }

const Tensor& tensor_of(const Operand& o, const std::vector<Tensor>& results) {
  return o.step >= 0 ? results[size_t(o.step)] : o.input;
}

// A view of a promised result that Lua asks for (reshape, view, transpose, squeeze,
// unsqueeze; dims 0-based): its shape, by the eager op's own rule (tensor/shape.h). False
// for anything the eager op would refuse (it then runs, and says what is wrong) and for
// the other shape functions, which only recorded backward passes make. Strides do not
// change a view's sizes: the operand is taken as contiguous here (the bindings lay a
// promised view out from its operand's real strides).
bool infer_view(Step& s, const Shape& as) {
  const int rank = as.size();
  const Layout in{as, contiguous_strides(as)};
  switch (s.fn) {
    case Fn::Reshape:
    case Fn::View:
      try {
        s.shape = infer_size(s.arg, numel_of(as), fn_name(s.fn));
      } catch (const Error&) {
        return false;
      }
      return true;
    case Fn::Transpose:
      if (s.ndims != 2 || rank == 0) return false;
      for (int i = 0; i < 2; ++i)
        if (s.dims[i] < 0 || s.dims[i] >= rank) return false;
      s.shape = transpose_layout(in, s.dims[0], s.dims[1]).sizes;
      return true;
    case Fn::Unsqueeze:
      if (s.ndims != 1 || s.dims[0] < 0 || s.dims[0] > rank || rank >= kMaxDims) return false;
      s.shape = unsqueeze_layout(in, s.dims[0]).sizes;
      return true;
    case Fn::Squeeze:
      if (s.ndims > 1 || (s.ndims == 1 && (s.dims[0] < 0 || s.dims[0] >= rank))) return false;
      s.shape = squeeze_layout(in, s.ndims == 1 ? std::optional<int>(s.dims[0]) : std::nullopt).sizes;
      return true;
    default:
      return false;
  }
}

}  // namespace

bool infer(Step& s, DType ad, const Shape& as, DType bd, const Shape& bs) {
  if (!float_dtype(ad)) return false;
  const char* name = op_info(s.op).lua_name;
  switch (s.kind) {
    case Kind::Unary:
      if (s.op == Op::Logical_not) return false;
      s.dtype = ad;
      s.shape = as;
      return true;
    case Kind::BinaryScalar:
      s.dtype = ad;
      s.shape = as;
      return true;
    case Kind::CompareScalar:
      s.dtype = DType::Bool;
      s.shape = as;
      return true;
    case Kind::Binary:
    case Kind::Compare:
      if (bd != ad) return false;
      s.shape = broadcast_shapes(as, bs, name);
      s.dtype = s.kind == Kind::Binary ? ad : DType::Bool;
      return true;
    case Kind::MatMul: {
      // Float operands of one dtype; anything the front end would refuse (tensor/
      // linalg.cpp) is left to it, to raise its own error.
      if (bd != ad || as.size() < 1 || bs.size() < 1) return false;
      const int da = as.size(), db = bs.size();
      const int64_t K = as[da - 1];
      if (K != (db == 1 ? bs[0] : bs[db - 2])) return false;
      const int na = std::max(da - 2, 0), nb = std::max(db - 2, 0), nbatch = std::max(na, nb);
      Shape out;
      for (int i = 0; i < nbatch; ++i) {
        const int ia = i - (nbatch - na), ib = i - (nbatch - nb);
        const int64_t sa = ia >= 0 ? as[ia] : 1, sb = ib >= 0 ? bs[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) return false;
        out.push_back(sa == 1 ? sb : sa);
      }
      if (da >= 2) out.push_back(as[da - 2]);
      if (db >= 2) out.push_back(bs[db - 1]);
      s.dtype = ad;
      s.shape = out;
      return true;
    }
    case Kind::Reduce: {
      // The reductions whose result dtype is their float input's and which refuse no
      // non-empty input: anything else runs eagerly, where its checks are.
      if (s.op != Op::Sum && s.op != Op::Mean && s.op != Op::Amax && s.op != Op::Amin) return false;
      if (numel_of(as) == 0) return false;
      bool reduced[kMaxDims] = {};
      for (int i = 0; i < s.ndims; ++i) reduced[s.dims[i]] = true;
      Shape out;
      for (int d = 0; d < as.size(); ++d) {
        if (s.ndims == 0 || reduced[d]) {
          if (s.keepdim) out.push_back(1);
        } else {
          out.push_back(as[d]);
        }
      }
      s.dtype = ad;
      s.shape = out;
      return true;
    }
    case Kind::Softmax:
      if (s.ndims != 1 || s.dims[0] < 0 || s.dims[0] >= as.size()) return false;
      s.dtype = ad;
      s.shape = as;
      return true;
    case Kind::Watch:
      s.dtype = ad;
      s.shape = as;
      return true;
    case Kind::Marker:
      s.dtype = ad;
      s.shape = Shape{};
      return true;
    case Kind::Shape:
      s.dtype = ad;
      return infer_view(s, as);
    case Kind::CrossEntropy: {
      // The bindings checked the labels (range, 1-based) and made them 0-based int64.
      const int64_t reduction = s.arg.size() == 1 ? s.arg[0] : -1;
      if (as.size() != 2 || bd != DType::Int64 || bs.size() != 1 || bs[0] != as[0] ||
          reduction < 0 || reduction > 2 || as[1] < 1)
        return false;
      s.dtype = ad;
      s.shape = reduction == int64_t(Reduction::None) ? Shape{as[0]} : Shape{};
      return true;
    }
    case Kind::Full:
    case Kind::SoftmaxBackward:
    case Kind::OneHot:
      return false;   // steps of recorded backward passes, made with their results known
  }
  return false;
}

namespace {

// Note [Fused groups]
// A run of consecutive pointwise steps of one float dtype and one result shape is a
// group. Most groups run as one fused program (Note [Host groups] below); the block
// executor here runs the rest (one too long for a program), and every group where the
// tests ask for it. It runs a block of kBlock elements at a time through every step,
// each step's block of results staying in a scratch buffer (in cache) for the steps
// after it, and only the results that are wanted afterwards written to memory. Every
// step applies dl::small's loop for its op: the functor and the dtype of eager
// execution's kernels (tensor/small.h says why their bits are the same), so each
// element gets the value that eager execution gives it, only its memory traffic
// changes. An operand outside the group is read in place when it has the group's shape
// and is contiguous, read as one value when it has one element, cycled when it is
// contiguous and fills the group's trailing dims (a bias), repeated when it has the
// group's leading dims and 1s after them (a row's statistic: x - x:mean(-1, true)),
// and else expanded into a contiguous copy first (a program reads them the same ways).
// Blocks are independent, so large groups run on the engine's OpenMP threads.
constexpr int64_t kBlock = 2048;
constexpr int64_t kParallelElements = 1 << 16;

// How one operand of a fused step is read, block by block.
struct Source {
  enum Kind : uint8_t { Temp, Dense, One, Cycle, Rows } kind = Dense;
  int temp = 0;                 // Temp: the step (within the group) whose block it is
  const unsigned char* base = nullptr;
  int64_t period = 0;           // Cycle: elements before it repeats; Rows: elements per value
};

// Whether t, contiguous, holds one value for each run of `*inner` elements of the
// group's shape: its dims, aligned to the shape's last ones, are the shape's up to some
// dim and 1 after it (a statistic kept per row, as x:mean(-1, true) is), with more than
// one value and runs longer than one.
bool per_row(const Tensor& t, const Shape& shape, int64_t* inner) {
  const int rank = shape.size(), pad = rank - t.dim();
  if (pad < 0 || !t.is_contiguous()) return false;
  auto size = [&](int d) { return d < pad ? int64_t(1) : t.size(d - pad); };
  int p = rank;
  while (p > 0 && size(p - 1) == 1) --p;
  int64_t run = 1;
  for (int d = p; d < rank; ++d) run *= shape[d];
  for (int d = 0; d < p; ++d)
    if (size(d) != shape[d]) return false;
  *inner = run;
  return run > 1 && t.numel() > 1;
}

struct Group {
  size_t g0, g1;
  DType dtype;
  int64_t numel;
  size_t isz;
  std::vector<Source> src;       // two per step (b unused for one-operand steps)
  std::vector<uint8_t> live;     // per step of the group: computed at all
  std::vector<int> slot;         // per step: its scratch block, -1 when written to its result
  int nslots = 0;
  // A trailing full reduction folded as the group runs (Note [Trailing reductions]): its
  // step, and the step of the group whose values it folds; -1 without one.
  int64_t tail = -1;
  int tail_src = -1;
  std::vector<Tensor> held;      // expanded copies of operands read through them
};

// Whether every element of t is one element of its memory (a value expanded: every
// stride 0, as the gradient of a sum is before it is read).
bool one_value(const Tensor& t) {
  for (int d = 0; d < t.dim(); ++d)
    if (t.stride(d) != 0 && t.size(d) != 1) return false;
  return true;
}

Source source_for(Group& g, const Step& st, const Operand& o, const std::vector<Step>& steps,
                  const std::vector<Tensor>& results) {
  Source s;
  if (o.step >= 0 && size_t(o.step) >= g.g0 && size_t(o.step) < g.g1) {
    s.kind = Source::Temp;
    s.temp = int(size_t(o.step) - g.g0);
    return s;
  }
  const Tensor& t = tensor_of(o, results);
  if (t.numel() == 1 || (t.numel() > 0 && one_value(t))) {
    s.kind = Source::One;
    s.base = static_cast<const unsigned char*>(t.raw_data());
    return s;
  }
  const Shape& shape = steps[g.g0].shape;
  if (t.is_contiguous() && t.shape() == shape) {
    s.base = static_cast<const unsigned char*>(t.raw_data());
    return s;
  }
  // Trailing dims: t's shape, leading 1s dropped, equals the group shape's last dims.
  if (t.is_contiguous()) {
    int lead = 0;
    while (lead < t.dim() && t.size(lead) == 1) ++lead;
    int k = t.dim() - lead;
    bool trailing = k <= shape.size();
    for (int i = 0; trailing && i < k; ++i)
      trailing = t.size(lead + i) == shape[shape.size() - k + i];
    if (trailing) {
      s.kind = Source::Cycle;
      s.base = static_cast<const unsigned char*>(t.raw_data());
      s.period = t.numel();
      return s;
    }
  }
  int64_t inner = 0;
  if (per_row(t, shape, &inner)) {
    s.kind = Source::Rows;
    s.base = static_cast<const unsigned char*>(t.raw_data());
    s.period = inner;
    return s;
  }
  g.held.push_back(contiguous(expand(t, shape)));
  s.base = static_cast<const unsigned char*>(g.held.back().raw_data());
  return s;
}

// An operand outside the group as a fused program's input (tensor/fused.h): its data,
// the elements before it repeats, and the elements that read each value.
fused::Input input_of(const Group& g, const Source& s) {
  const int64_t repeat = s.kind == Source::Rows ? s.period : 1;
  const int64_t period = s.kind == Source::One     ? 1
                         : s.kind == Source::Cycle ? s.period
                         : s.kind == Source::Rows  ? g.numel / s.period
                                                   : g.numel;
  return fused::Input{s.base, period, repeat};
}

// The block [o, o + n) of an operand: its address and step (1 dense, 0 one value).
const void* block_of(const Group& g, const Source& s, int64_t o, int64_t n,
                     unsigned char* const* temps, unsigned char* cycle, int* step) {
  *step = 1;
  switch (s.kind) {
    case Source::Temp: return temps[s.temp];
    case Source::Dense: return s.base + size_t(o) * g.isz;
    case Source::One: *step = 0; return s.base;
    case Source::Cycle:
    case Source::Rows: fused::read_block(input_of(g, s), g.numel, o, n, g.isz, cycle); return cycle;
  }
  return nullptr;
}

// Asks for the next block of every operand read in place and of every result written,
// while this block runs in cache: it helps one thread (bench/, `pw8`; docs/performance.md,
// "Measurements behind the code"); on two, memory bandwidth is the limit either way.
void prefetch_next(const Group& g, const std::vector<Step>& steps, const std::vector<Tensor>& results,
                   int64_t o, int64_t n) {
  const int64_t ahead = std::min(n, g.numel - o - n);
  if (ahead <= 0) return;
  const size_t bytes = size_t(ahead) * g.isz;
  for (size_t k = 0; k < g.g1 - g.g0; ++k) {
    if (!g.live[k]) continue;
    for (int r = 0; r < arity(steps[g.g0 + k]); ++r) {
      const Source& s = g.src[2 * k + r];
      if (s.kind != Source::Dense) continue;
      const char* p = reinterpret_cast<const char*>(s.base + size_t(o + n) * g.isz);
      for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
    }
    if (g.slot[k] < 0) {
      const char* p = static_cast<const char*>(results[g.g0 + k].raw_data()) + size_t(o + n) * g.isz;
      for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 1, 3);
    }
  }
}

// The chunk of a trailing reduction that a block belongs to: its lanes and its length.
struct TailChunk {
  fold::State* st;
  int64_t len;
};

void run_block(const Group& g, const std::vector<Step>& steps, std::vector<Tensor>& results,
               int64_t o, int64_t n, std::vector<unsigned char>& scratch, const TailChunk* tail) {
  const size_t nsteps = g.g1 - g.g0;
  const size_t bytes = size_t(kBlock) * g.isz;
  const size_t nslots = size_t(g.nslots);
  if (scratch.size() < (nslots + 2) * bytes) scratch.resize((nslots + 2) * bytes);
  unsigned char* temps[64 + 1];
  std::vector<unsigned char*> many;
  unsigned char** tp = temps;
  if (nsteps > 64) {
    many.resize(nsteps);
    tp = many.data();
  }
  for (size_t k = 0; k < nsteps; ++k) {
    const size_t i = g.g0 + k;
    if (!g.live[k]) continue;
    tp[k] = g.slot[k] < 0 ? static_cast<unsigned char*>(results[i].raw_data()) + size_t(o) * g.isz
                          : scratch.data() + size_t(g.slot[k]) * bytes;
  }
  prefetch_next(g, steps, results, o, n);
  unsigned char* cycle_a = scratch.data() + nslots * bytes;
  unsigned char* cycle_b = cycle_a + bytes;
  for (size_t k = 0; k < nsteps; ++k) {
    if (!g.live[k]) continue;
    const Step& st = steps[g.g0 + k];
    int sa = 1, sb = 1;
    const void* a = block_of(g, g.src[2 * k], o, n, tp, cycle_a, &sa);
    bool done = false;
    if (st.kind == Kind::Unary) {
      done = small::block_unary(st.op, g.dtype, tp[k], a, n);
    } else if (st.kind == Kind::BinaryScalar) {
      done = small::block_binary_scalar(st.op, g.dtype, tp[k], a, st.s, st.scalar_first, n);
    } else {
      const void* b = block_of(g, g.src[2 * k + 1], o, n, tp, cycle_b, &sb);
      done = small::block_binary(st.op, g.dtype, tp[k], a, sa, b, sb, n);
    }
    DL_ASSERT(done);
    if (tail && int(k) == g.tail_src) fold::add(steps[size_t(g.tail)].op, g.dtype, *tail->st, tp[k], n, tail->len);
  }
}

// Scratch blocks by liveness: a step that is not kept writes its block to a scratch
// block that no step still to run reads, taken after its operands were read, so a
// chain of any length works in two blocks that stay in the first-level cache (with a
// block per step, eight steps of float32 filled 64 KB).
void assign_slots(Group& g, const std::vector<Step>& steps, const std::vector<uint8_t>& keep) {
  const size_t nsteps = g.g1 - g.g0;
  thread_local std::vector<int> last, free_slots;
  last.assign(nsteps, -1);
  for (size_t k = 0; k < nsteps; ++k) {
    if (!g.live[k]) continue;
    for (int r = 0; r < arity(steps[g.g0 + k]); ++r)
      if (g.src[2 * k + r].kind == Source::Temp) last[size_t(g.src[2 * k + r].temp)] = int(k);
  }
  g.slot.assign(nsteps, -1);
  g.nslots = 0;
  free_slots.clear();
  for (size_t k = 0; k < nsteps; ++k) {
    if (!g.live[k]) continue;
    if (!keep[g.g0 + k]) {
      if (free_slots.empty()) {
        g.slot[k] = g.nslots++;
      } else {
        g.slot[k] = free_slots.back();
        free_slots.pop_back();
      }
    }
    for (int r = 0; r < arity(steps[g.g0 + k]); ++r) {
      const Source& s = g.src[2 * k + r];
      if (s.kind != Source::Temp || last[size_t(s.temp)] != int(k)) continue;
      const int freed = g.slot[size_t(s.temp)];
      last[size_t(s.temp)] = -1;   // x * x: its slot is freed once
      if (freed >= 0) free_slots.push_back(freed);
    }
  }
}

// Note [Trailing reductions]
// A sum, mean, amax or amin of every element of a group's step, right after the group,
// is folded while the group runs: each block's values are added to the lanes of their
// chunk as soon as they are computed, in cache, instead of being written out and read
// back by the reduction. The group then runs a chunk of the fold (tensor/fold.h: 16,384
// elements, eight blocks) at a time, the chunks on the threads, and the chunks' values
// are merged in order at the end: the additions are the ones reduce() makes, in its
// order, so the result has its bits. A group run as a fused program folds the same way,
// 2,048 of its values at a time (Note [Trailing reductions in programs] in
// tensor/cpu/fused.cpp); this is the block executor's.
void run_chunks(const Group& g, const std::vector<Step>& steps, std::vector<Tensor>& results, bool parallel) {
  const Step& red = steps[size_t(g.tail)];
  const int64_t nchunks = (g.numel + fold::kChunk - 1) / fold::kChunk;
  thread_local std::vector<fold::Part> parts;
  parts.resize(size_t(nchunks));
  fold::Part* out = parts.data();
  auto chunk = [&](int64_t c, std::vector<unsigned char>& scratch) {
    const int64_t c0 = c * fold::kChunk, c1 = std::min(g.numel, c0 + fold::kChunk);
    fold::State st;
    fold::start(red.op, g.dtype, st);
    const TailChunk tail{&st, c1 - c0};
    for (int64_t o = c0; o < c1; o += kBlock) run_block(g, steps, results, o, std::min(kBlock, c1 - o), scratch, &tail);
    out[c] = fold::close(red.op, g.dtype, st, c1 - c0);
  };
  static_assert(fold::kChunk % kBlock == 0 && kBlock % fold::kPiece == 0);
  if (parallel) {
#pragma omp parallel
    {
      std::vector<unsigned char> scratch;
#pragma omp for schedule(static)
      for (int64_t c = 0; c < nchunks; ++c) chunk(c, scratch);
    }
  } else {
    thread_local std::vector<unsigned char> scratch;
    for (int64_t c = 0; c < nchunks; ++c) chunk(c, scratch);
  }
  Tensor r = empty(red.shape, red.dtype, Device{}, op_info(red.op).lua_name);
  fold::finish(red.op, g.dtype, out, nchunks, g.numel, r.raw_data());
  results[size_t(g.tail)] = std::move(r);
}

// A group's dtype and size, from its first step (its steps share them).
void size_group(Group& g, const std::vector<Step>& steps) {
  const Step& first = steps[g.g0];
  g.dtype = first.dtype;
  g.numel = numel_of(first.shape);
  g.isz = itemsize(first.dtype);
}

// The memory step i of group g writes its result to.
Tensor group_result(const Group& g, const std::vector<Step>& steps, size_t i) {
  const Step& first = steps[g.g0];
  return empty(first.shape, first.dtype, first.device, op_info(steps[i].op).lua_name);
}

// A group's dtype and size, its kept results allocated, its operands' sources.
void prepare(Group& g, const std::vector<Step>& steps, std::vector<Tensor>& results,
             const std::vector<uint8_t>& keep) {
  size_group(g, steps);
  const size_t nsteps = g.g1 - g.g0;
  g.src.resize(2 * nsteps);
  for (size_t k = 0; k < nsteps; ++k) {
    const size_t i = g.g0 + k;
    if (!g.live[k]) continue;
    if (keep[i]) results[i] = group_result(g, steps, i);
    g.src[2 * k] = source_for(g, steps[i], steps[i].a, steps, results);
    if (arity(steps[i]) == 2) g.src[2 * k + 1] = source_for(g, steps[i], steps[i].b, steps, results);
  }
}

// Runs a prepared group (its slots assigned) a block at a time.
void run_blocks(Group& g, const std::vector<Step>& steps, std::vector<Tensor>& results) {
  // A one-element operand that is a step of the group is read with step 0 by no loop:
  // a group's steps all have the group's shape, so a temp is always dense.
  const bool parallel = g.numel >= kParallelElements && omp_get_max_threads() > 1;
  if (g.tail >= 0) {
    run_chunks(g, steps, results, parallel);
    return;
  }
  const int64_t nblocks = (g.numel + kBlock - 1) / kBlock;
  if (parallel) {
#pragma omp parallel
    {
      std::vector<unsigned char> scratch;
#pragma omp for schedule(static)
      for (int64_t b = 0; b < nblocks; ++b)
        run_block(g, steps, results, b * kBlock, std::min(kBlock, g.numel - b * kBlock), scratch, nullptr);
    }
  } else {
    thread_local std::vector<unsigned char> scratch;
    for (int64_t b = 0; b < nblocks; ++b)
      run_block(g, steps, results, b * kBlock, std::min(kBlock, g.numel - b * kBlock), scratch, nullptr);
  }
}

void run_group(Group& g, const std::vector<Step>& steps, std::vector<Tensor>& results,
               const std::vector<uint8_t>& keep) {
  prepare(g, steps, results, keep);
  assign_slots(g, steps, keep);
  run_blocks(g, steps, results);
}

Tensor run_single(const Step& st, const std::vector<Tensor>& results);
ExecStats t_stats;

// Note [Fused groups off the host]
// A group on another device runs as one fused program (tensor/fused.h): the group's
// live steps become its instructions, its operands from outside its inputs (read as
// the host's blocks read them: in place, one value, cycled, repeated, or an expanded
// copy), its kept steps its outputs, and the device's backend interprets the program
// for every element in one kernel (gpu/fused.cu), through the functors its one-op
// kernels apply. A group larger than a program holds runs a step at a time instead,
// every live step's result written.
//
// Note [Host groups]
// On the host a group runs as a fused program too (the host's runner keeps a chunk of
// the value being computed in registers: Note [Fused programs in registers] in
// tensor/cpu/fused.cpp), its trailing reduction folded as the program runs (Note
// [Trailing reductions in programs] there), unless it is larger than a program holds;
// those run as blocks. Blocks store every step's block to the first-level cache and
// read it back, programs only the values read out of turn (bench/ `pw8c`;
// docs/performance-compile.md). The tests run every way (set_host_groups).
HostGroups g_host_groups = HostGroups::Auto;

// Note [Lowered programs kept]
// A schedule's group lowers to a program of the same structure on every call that fits
// the schedule: the instructions, which operands are the group's own values, and (for
// the same operands' layouts) the inputs' periods and repeats. Only the memory and the
// Lua numbers change. So a schedule keeps each group's program as first lowered, with
// where each input came from, and a later call sets its addresses and numbers: each
// operand read from outside the group is classified again (source_for), and the call
// takes the kept program only if every input is read the same way as before, and every
// operand that shared an input shares it again (one tensor, or one value, or one
// layout of one memory); else the group is lowered afresh (bench/ `chainc`:
// docs/performance-compile.md, "The compiled call's own cost").
struct Lowered {
  bool ready = false;
  fused::Program p;   // its addresses and numbers are the last call's
  int tail_code = -1;
  // An operand from outside the group: its step, which operand (0: a, 1: b), the input.
  struct Use {
    uint32_t step;
    uint8_t r;
    int8_t input;
  };
  std::vector<Use> uses;
  std::vector<std::pair<int, uint32_t>> numbers;   // a scalar instruction, and its step
  std::vector<uint32_t> out_step;                  // per output, its step
};

// (tail_code: the instruction whose values a trailing reduction folds. `kept`, when
// given, is made the program's Lowered.)
bool lower(const Group& g, const std::vector<Step>& steps, std::vector<Tensor>& results,
           const std::vector<uint8_t>& keep, fused::Program& p, int* tail_code, Lowered* kept = nullptr) {
  const size_t nsteps = g.g1 - g.g0;
  const Step& first = steps[g.g0];
  p.dtype = first.dtype;
  p.numel = g.numel;
  p.ncode = p.ninputs = p.noutputs = 0;
  p.structure = kept ? fused::new_structure() : 0;
  thread_local std::vector<int> code_of;
  code_of.assign(nsteps, -1);
  if (kept) {
    kept->ready = false;
    kept->uses.clear();
    kept->numbers.clear();
    kept->out_step.clear();
  }
  auto operand = [&](const Source& s, size_t step, int r, int8_t* to) {
    if (s.kind == Source::Temp) {
      *to = int8_t(code_of[size_t(s.temp)]);
      return true;
    }
    const fused::Input in = input_of(g, s);
    int k = 0;
    while (k < p.ninputs && !(p.inputs[k].data == in.data && p.inputs[k].period == in.period &&
                              p.inputs[k].repeat == in.repeat))
      ++k;
    if (k == p.ninputs) {
      if (p.ninputs == fused::kMaxInputs) return false;
      p.inputs[p.ninputs++] = in;
    }
    *to = fused::input(k);
    if (kept) kept->uses.push_back(Lowered::Use{uint32_t(step), uint8_t(r), int8_t(k)});
    return true;
  };
  for (size_t k = 0; k < nsteps; ++k) {
    if (!g.live[k]) continue;
    if (p.ncode == fused::kMaxCode) return false;
    const Step& st = steps[g.g0 + k];
    fused::Instr& in = p.code[p.ncode];
    in.op = st.op;
    in.s = st.s;
    in.code = st.kind == Kind::Unary          ? fused::Instr::Unary
              : st.kind == Kind::Binary       ? fused::Instr::Binary
              : st.scalar_first               ? fused::Instr::ScalarLeft
                                              : fused::Instr::ScalarRight;
    if (!operand(g.src[2 * k], g.g0 + k, 0, &in.a)) return false;
    if (in.code == fused::Instr::Binary && !operand(g.src[2 * k + 1], g.g0 + k, 1, &in.b)) return false;
    code_of[k] = p.ncode++;
    if (kept && (in.code == fused::Instr::ScalarLeft || in.code == fused::Instr::ScalarRight))
      kept->numbers.emplace_back(p.ncode - 1, uint32_t(g.g0 + k));
    if (keep[g.g0 + k]) {
      if (p.noutputs == fused::kMaxOutputs) return false;
      p.outputs[p.noutputs++] = fused::Output{int8_t(code_of[k]), results[g.g0 + k].raw_data()};
      if (kept) kept->out_step.push_back(uint32_t(g.g0 + k));
    }
  }
  *tail_code = g.tail >= 0 ? code_of[size_t(g.tail_src)] : -1;
  if (g.tail >= 0 && *tail_code < 0) return false;
  if (kept) {
    kept->tail_code = *tail_code;
    kept->ready = true;
  }
  return true;
}

// Sets a kept program's addresses and numbers for this call's steps (Note [Lowered
// programs kept]), its kept results allocated. False: an operand is read another way
// than when it was lowered (nothing run; the caller lowers the group afresh).
bool relower(Group& g, const std::vector<Step>& steps, std::vector<Tensor>& results, Lowered& l) {
  size_group(g, steps);
  fused::Program& p = l.p;
  const TensorImpl* by[fused::kMaxInputs] = {};   // the tensor each input was set from
  for (const Lowered::Use& u : l.uses) {
    const Step& st = steps[u.step];
    const Operand& o = u.r == 0 ? st.a : st.b;
    const Tensor& t = tensor_of(o, results);
    const int k = u.input;
    if (by[k] && by[k] == t.impl()) continue;   // (a tensor read twice: w in every x * w)
    const fused::Input in = input_of(g, source_for(g, st, o, steps, results));
    fused::Input& was = p.inputs[k];
    if (in.period != was.period || in.repeat != was.repeat || (by[k] && in.data != was.data)) return false;
    was.data = in.data;
    by[k] = t.impl();
  }
  for (const auto& [c, i] : l.numbers) p.code[c].s = steps[i].s;
  for (int o = 0; o < p.noutputs; ++o) {   // (the group's kept steps, in order)
    const uint32_t i = l.out_step[size_t(o)];
    results[i] = group_result(g, steps, i);
    p.outputs[o].data = results[i].raw_data();
  }
  return true;
}

// Runs a group as one fused program, with its trailing reduction folded on the host
// (Note [Trailing reductions in programs] in tensor/cpu/fused.cpp); one too large for a
// program a step at a time, or (on the host, Auto) as blocks.
void run_program(const Group& g, const std::vector<Step>& steps, std::vector<Tensor>& results,
                 const fused::Program& p, int tail_code) {
  const Step& first = steps[g.g0];
  if (g.tail < 0) {
    kernel(first.device, &Backend::fused, "compile")(p, first.device.index);
    return;
  }
  const Step& red = steps[size_t(g.tail)];
  Tensor r = empty(red.shape, red.dtype, Device{}, op_info(red.op).lua_name);
  fused::run_folded(p, tail_code, red.op, r.raw_data());
  results[size_t(g.tail)] = std::move(r);
}

// (kept: the schedule's program for this group, Note [Lowered programs kept]; null
// without a schedule that outlives the call.)
void run_lowered(Group& g, const std::vector<Step>& steps, std::vector<Tensor>& results,
                 const std::vector<uint8_t>& keep, Lowered* kept) {
  if (kept && kept->ready && relower(g, steps, results, *kept)) {
    run_program(g, steps, results, kept->p, kept->tail_code);
    return;
  }
  g.held.clear();
  prepare(g, steps, results, keep);
  const Step& first = steps[g.g0];
  const size_t nsteps = g.g1 - g.g0;
  thread_local fused::Program scratch;
  fused::Program& p = kept ? kept->p : scratch;
  int tail_code = -1;
  if (lower(g, steps, results, keep, p, &tail_code, kept)) {
    run_program(g, steps, results, p, tail_code);
    return;
  }
  ++t_stats.unlowered;
  if (first.device.is_cpu() && g_host_groups == HostGroups::Auto) {
    assign_slots(g, steps, keep);
    run_blocks(g, steps, results);
    return;
  }
  DL_ASSERT(g.tail < 0);   // a reduction is folded only on the host (folds_into)
  for (size_t k = 0; k < nsteps; ++k)
    if (g.live[k]) results[g.g0 + k] = run_single(steps[g.g0 + k], results);
}

Tensor run_single(const Step& st, const std::vector<Tensor>& results) {
  const Tensor& a = tensor_of(st.a, results);
  switch (st.kind) {
    case Kind::Unary: return unary(st.op, a);
    case Kind::Binary: return binary(st.op, a, tensor_of(st.b, results));
    case Kind::BinaryScalar: return binary(st.op, a, Scalar::from_lua(st.s), st.scalar_first);
    case Kind::Compare: return compare(st.op, a, tensor_of(st.b, results));
    case Kind::CompareScalar: return compare(st.op, a, Scalar::from_lua(st.s), st.scalar_first);
    case Kind::Reduce: {
      std::vector<int> dims(st.dims, st.dims + st.ndims);
      return reduce(st.op, a, dims, st.keepdim, st.opts);
    }
    case Kind::MatMul: return matmul(a, tensor_of(st.b, results));
    case Kind::Softmax: return st.op == Op::LogSoftmax ? log_softmax(a, st.dims[0]) : softmax(a, st.dims[0]);
    case Kind::SoftmaxBackward: return softmax_backward(a, tensor_of(st.b, results));
    case Kind::Shape: {
      switch (st.fn) {
        case Fn::SumTo: return sum_to(a, st.arg);
        case Fn::Expand: return expand(a, st.arg);
        case Fn::Reshape: return reshape(a, st.arg);
        case Fn::View: return view(a, st.arg);
        case Fn::Squeeze: return squeeze(a, st.ndims ? std::optional<int>(st.dims[0]) : std::nullopt);
        case Fn::Unsqueeze: return unsqueeze(a, st.dims[0]);
        case Fn::Transpose: return transpose(a, st.dims[0], st.dims[1]);
        case Fn::Cast: return cast(a, st.arg_dtype);
        case Fn::Contiguous: return contiguous(a);
        case Fn::Clone: return clone(a);
        default: break;
      }
      fail(ErrorKind::Internal, "compile: not a shape step");
    }
    case Kind::Full: return full(st.arg, Scalar::from_lua(st.s), st.arg_dtype, st.device);
    case Kind::CrossEntropy:
      return cross_entropy(a, tensor_of(st.b, results), Reduction(st.arg[0]), std::nullopt);
    case Kind::OneHot: return one_hot(a, st.arg[0], st.arg_dtype);
    case Kind::Watch: return a;
    case Kind::Marker: return Tensor();
  }
  fail(ErrorKind::Internal, "compile: unknown step kind");
}

}  // namespace

ExecStats& exec_stats() { return t_stats; }

void set_host_groups(HostGroups how) { g_host_groups = how; }

namespace {

// Whether steps[j] is a reduction that the group of steps [i, j) folds as it runs (Note
// [Trailing reductions]): of every element of one of the group's steps, on the host.
bool folds_into(const std::vector<Step>& steps, size_t i, size_t j) {
  const Step& r = steps[j];
  if (r.kind != Kind::Reduce || r.alone || !r.device.is_cpu() || g_host_groups == HostGroups::Programs || r.a.step < 0)
    return false;
  const size_t src = size_t(r.a.step);
  if (src < i || src >= j || !fold::served(r.op, r.dtype) || r.dtype != steps[src].dtype) return false;
  return r.ndims == 0 || r.ndims == steps[src].shape.size();
}

}  // namespace

// Note [Schedules]
// What execute works out before it runs a step (which steps fuse into groups and which
// reduction each group folds, which results are computed at all, which are written to
// memory, and after which group each intermediate result can be dropped) depends only
// on the steps' kinds, ops, operands' positions, dtypes, shapes and devices, and on
// which results are wanted. A compiled call that follows its trace makes the same steps
// every call, so the trace keeps that work as a Schedule (Trace::schedules) and the
// next call checks its steps' signature against it and runs it (bench/ `chainc`, the
// compiled gradient of a 31-op chain, worked it out on every call before:
// docs/performance-compile.md, "The compiled call's own cost"). What depends on the call's
// tensors (their memory, whether a bound operand is contiguous or one value) is worked
// out as the schedule runs, every call.
// A step's second operand's position, -1 for one that reads one.
inline int32_t second_of(const Step& st) { return arity(st.kind) == 2 ? st.b.step : -1; }

struct Sig {
  Kind kind;
  Op op;
  DType dtype;
  bool alone;
  int8_t ndims;
  Device device;
  int32_t a, b;
  Shape shape;
  explicit Sig(const Step& st)
      : kind(st.kind), op(st.op), dtype(st.dtype), alone(st.alone), ndims(st.ndims), device(st.device),
        a(st.a.step), b(second_of(st)), shape(st.shape) {}
  bool of(const Step& st) const {
    return kind == st.kind && op == st.op && dtype == st.dtype && alone == st.alone && ndims == st.ndims &&
           device == st.device && a == st.a.step && b == second_of(st) &&
           shape == st.shape;
  }
};

// A group of fused steps [i, g1), with the reduction at `tail` folded (-1: none) and
// the steps [i, j) in all; or one step run alone (i, j = i + 1).
struct Span {
  size_t i, j, g1;
  int64_t tail;
  int tail_src;
  bool fused, any;
};

struct Schedule {
  size_t begin = 0, end = 0;
  HostGroups how = HostGroups::Auto;
  std::vector<uint8_t> want;
  std::vector<Sig> sig;
  std::vector<uint8_t> keep;   // by step (from 0): written to memory
  std::vector<uint8_t> live;   // by step of the range: computed at all
  std::vector<Span> spans;
  // Per span s, the results to drop once it has run: release[release_at[s], release_at[s + 1]).
  std::vector<size_t> release;
  std::vector<uint32_t> release_at;
  // Per span, its group's program once lowered (Note [Lowered programs kept]): kept
  // only by a cached schedule, and made only for a span that is a group (a program is
  // about 1.4 KB).
  std::vector<std::unique_ptr<Lowered>> lowered;
};

namespace {

bool fits(const Schedule& sc, const std::vector<Step>& steps, size_t begin, size_t end,
          const std::vector<uint8_t>& want) {
  if (sc.begin != begin || sc.end != end || sc.how != g_host_groups) return false;
  if (std::memcmp(sc.want.data(), want.data(), end - begin) != 0) return false;
  for (size_t i = begin; i < end; ++i)
    if (!sc.sig[i - begin].of(steps[i])) return false;
  return true;
}

void analyse(const std::vector<Step>& steps, size_t begin, size_t end, const std::vector<uint8_t>& want,
             Schedule& sc) {
  const size_t n = end - begin;
  sc.begin = begin;
  sc.end = end;
  sc.how = g_host_groups;
  sc.want.assign(want.begin(), want.begin() + long(n));
  sc.sig.clear();
  for (size_t i = begin; i < end; ++i) sc.sig.emplace_back(steps[i]);
  thread_local std::vector<size_t> group_end;
  thread_local std::vector<uint8_t> tail;
  group_end.assign(n, 0);
  tail.assign(n, 0);
  for (size_t i = begin; i < end;) {
    size_t j = i + 1;
    if (pointwise(steps[i]) && !steps[i].alone && float_dtype(steps[i].dtype)) {
      while (j < end && pointwise(steps[j]) && !steps[j].alone && steps[j].dtype == steps[i].dtype &&
             steps[j].shape == steps[i].shape && steps[j].device == steps[i].device)
        ++j;
      if (j < end && folds_into(steps, i, j)) tail[j++ - begin] = 1;
    }
    for (size_t k = i; k < j; ++k) group_end[k - begin] = j;
    i = j;
  }
  // keep: the result is written to memory (wanted later, or read outside its group);
  // live: computed at all (kept, or read by a live step of its group). Backwards, so
  // that a step read only by dead steps is dead too.
  std::vector<uint8_t>& keep = sc.keep;
  std::vector<uint8_t>& live = sc.live;
  keep.assign(end, 0);
  live.assign(n, 0);
  for (size_t i = end; i-- > begin;) {
    const size_t k = i - begin;
    if (want[k]) keep[i] = 1;
    if (!keep[i] && !live[k]) continue;
    live[k] = 1;
    const Step& st = steps[i];
    const Operand* ops[2] = {&st.a, &st.b};
    for (int r = 0; r < arity(st); ++r) {
      const int32_t j = ops[r]->step;
      if (j < 0 || size_t(j) < begin) continue;
      live[size_t(j) - begin] = 1;
      if (group_end[size_t(j) - begin] != group_end[k]) keep[size_t(j)] = 1;
    }
  }
  // Note [Results released at their last read]
  // A result that is not wanted after the range (want: a call's last run of its steps,
  // on a trace that knows what its calls keep; trace.cpp's finish_call) is read only by
  // the range's own steps: Lua never saw it (reading a promised value runs every pending
  // step first) and will not (its promise expires when the call ends). So it is dropped
  // as soon as its last reader has run, and its memory goes back to the allocator then,
  // while it is still in cache, for the next result of its size class to take. Kept to
  // the end of the call, every intermediate result was delivered to Lua and freed by a
  // later collection: a call's results took fresh memory, which the collector's cycle
  // (16 MB of garbage) makes memory that is no longer in cache, and a store to such
  // memory reads it first (docs/performance.md, "The limit: the epochs against their
  // own arithmetic").
  thread_local std::vector<int32_t> readers;
  bool releases = false;   // a flush wants every result: nothing to count
  for (size_t k = 0; k < n && !releases; ++k) releases = !want[k];
  readers.assign(releases ? n : 0, 0);
  auto each_read = [&](size_t k, auto&& f) {
    const Step& st = steps[k];
    const Operand* ops[2] = {&st.a, &st.b};
    for (int r = 0; r < arity(st); ++r) {
      const int32_t j = ops[r]->step;
      if (j >= 0 && size_t(j) >= begin && size_t(j) < end) f(size_t(j) - begin);
    }
  };
  if (releases)
    for (size_t k = begin; k < end; ++k)
      if (live[k - begin]) each_read(k, [&](size_t j) { ++readers[j]; });
  sc.spans.clear();
  sc.lowered.clear();
  sc.release.clear();
  sc.release_at.assign(1, 0);
  for (size_t i = begin; i < end;) {
    const size_t j = group_end[i - begin];
    Span sp{i, j, j, -1, -1, false, false};
    sp.fused = pointwise(steps[i]) && !steps[i].alone && float_dtype(steps[i].dtype) && (j - i > 1);
    if (sp.fused) {
      const bool has_tail = tail[j - 1 - begin] != 0;
      sp.g1 = has_tail ? j - 1 : j;
      sp.tail = has_tail && live[j - 1 - begin] ? int64_t(j - 1) : -1;
      sp.tail_src = sp.tail >= 0 ? int(size_t(steps[j - 1].a.step) - i) : -1;
      for (size_t k = i; k < sp.g1; ++k) sp.any = sp.any || live[k - begin];
    }
    sc.spans.push_back(sp);
    if (releases)
      for (size_t k = i; k < j; ++k) {
        if (!live[k - begin]) continue;
        each_read(k, [&](size_t r) {
          if (--readers[r] == 0 && !want[r]) sc.release.push_back(begin + r);
        });
      }
    sc.release_at.push_back(uint32_t(sc.release.size()));
    i = j;
  }
}

// (keep_programs: sc outlives the call, and keeps its groups' programs.)
void run_schedule(Schedule& sc, const std::vector<Step>& steps, std::vector<Tensor>& results, bool keep_programs) {
  if (keep_programs && sc.lowered.size() != sc.spans.size()) sc.lowered.resize(sc.spans.size());
  ExecStats& stats = t_stats;
  const size_t begin = sc.begin;
  for (size_t s = 0; s < sc.spans.size(); ++s) {
    const Span& sp = sc.spans[s];
    const size_t i = sp.i;
    if (!sp.fused) {
      if (sc.live[i - begin] && !no_value(steps[i])) {
        results[i] = run_single(steps[i], results);
        ++stats.single_steps;
      } else if (!no_value(steps[i])) {
        ++stats.elided;
      }
    } else {
      thread_local Group g;
      g.g0 = i;
      g.g1 = sp.g1;
      g.tail = sp.tail;
      g.tail_src = sp.tail_src;
      g.held.clear();
      g.live.assign(sc.live.begin() + long(i - begin), sc.live.begin() + long(sp.g1 - begin));
      if (sp.any) {
        if (!steps[i].device.is_cpu() || g_host_groups != HostGroups::Blocks) {
          if (keep_programs && !sc.lowered[s]) sc.lowered[s] = std::make_unique<Lowered>();
          run_lowered(g, steps, results, sc.keep, keep_programs ? sc.lowered[s].get() : nullptr);
        } else {
          run_group(g, steps, results, sc.keep);
        }
        ++stats.groups;
      }
      for (size_t k = i; k < sp.g1; ++k) {
        if (g.live[k - i]) ++stats.fused_steps;
        if (!sc.keep[k]) ++stats.elided;
      }
      if (sp.j != sp.g1) ++(g.tail >= 0 ? stats.fused_steps : stats.elided);
      g.held.clear();
    }
    for (uint32_t r = sc.release_at[s]; r < sc.release_at[s + 1]; ++r) results[sc.release[r]] = Tensor();
  }
}

}  // namespace

Schedules::Schedules() = default;
Schedules::~Schedules() = default;
Schedules::Schedules(Schedules&&) noexcept = default;
Schedules& Schedules::operator=(Schedules&&) noexcept = default;

void execute(const std::vector<Step>& steps, size_t begin, size_t end, std::vector<Tensor>& results,
             const std::vector<uint8_t>& want, Schedules* cache) {
  DL_ASSERT(begin <= end && end <= steps.size() && results.size() >= end && want.size() >= end - begin);
  if (!cache) {
    thread_local Schedule scratch;   // (its lists' room kept for the next call)
    analyse(steps, begin, end, want, scratch);
    run_schedule(scratch, steps, results, false);
    return;
  }
  // One schedule per place a range starts (a call that flushes at four places keeps
  // four), replaced in place when that place's steps change.
  if (cache->at.size() <= begin) cache->at.resize(begin + 1);
  std::unique_ptr<Schedule>& sc = cache->at[begin];
  if (!sc) {
    sc = std::make_unique<Schedule>();
  } else if (fits(*sc, steps, begin, end, want)) {
    run_schedule(*sc, steps, results, true);
    return;
  }
  analyse(steps, begin, end, want, *sc);
  run_schedule(*sc, steps, results, true);
}

}  // namespace dl::compile

// The host's runner of fused programs (tensor/fused.h): dl.compile's pointwise groups
// on the host (compile/plan.cpp), with their trailing reductions.
#include "tensor/fused.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/vec.h"
#include "tensor/error.h"
#include "tensor/fold.h"
#include "tensor/small.h"

namespace dl::cpu {

namespace {

// Note [Fused programs in registers]
// A program runs a chunk of elements at a time (Note [Vectors of the machine's width]:
// with AVX-512, 512 bytes of each value, 128 float32 or 64 float64) through all its
// instructions, the chunk of the value just computed held in vector registers: most
// programs are chains, where each instruction reads the one before it, so that value
// never goes to memory. A value that a later instruction reads out of turn is also
// stored to a slot on the stack; an input is read in place when the chunk is whole and
// the input dense, from a chunk of copies when it is one value, and otherwise gathered
// into a buffer first (cycled, repeated per row, or the last, short chunk). Each
// element is still the functor's value in the program's dtype (the tiers below; no
// fused multiply-adds, tensor/CMakeLists.txt), so the results are eager's bits
// (tests/cpp/test_fused.cpp checks every op against the device kernel's interpreter and
// against eager). Run op by op over blocks of 2,048 elements (compile/plan.cpp's block
// executor), every step stored its block to the first-level cache and read it back; as
// a program, only the values read out of turn are: bench/'s `pw8c` and `pw8bw` measure
// the difference and the distance to the same loop written in C
// (docs/performance-compile.md).
constexpr int kMaxChunkBytes = 512;
constexpr int kAlign = 64;   // of the buffers: a cache line, and an AVX-512 vector

// The vectors of VB bytes in a chunk.
template <int VB>
constexpr int kChunkVectors = (VB == 64 ? kMaxChunkBytes : 256) / VB;

// The elements of the largest chunk, of any build: the buffers' size, and the unit in
// which a range is split between threads.
template <typename T>
struct Chunk {
  static constexpr int kElements = kMaxChunkBytes / int(sizeof(T));
};

// Note [Vectors of the machine's width]
// The chunk is held as vectors of the widest registers the machine has (Note [Builds
// for each vector width] in loops.h): eight of 64 bytes with AVX-512, whose 32
// registers hold them and an instruction's operands, eight of 32 with AVX2, sixteen of
// 16 otherwise (the baseline's 16 registers cannot hold that and an operand: it spills,
// on machines older than AVX2). Four 64-byte vectors on every machine ran the eight ops
// of bench/'s `pw8c` slower than eager's eight passes over memory on a machine with
// AVX2 and no AVX-512; eight 32-byte ones there, and eight 64-byte ones instead of four
// with AVX-512, spread each instruction's decoding over twice the elements
// (docs/performance-compile.md, "Fused programs"). The vectors and their loads are
// tensor/cpu/vec.h's.

// How each op runs on the chunk, in three tiers:
// - in registers: the arithmetic ops apply their functor to whole vectors (GCC's vector
//   types have +, -, * and /, each lane rounded as the scalar op rounds), and the ops
//   with one select their vector form below;
// - over the chunk in the first-level cache: the chunk is stored, a loop applies the
//   functor element by element (vector code, as a one-op loop's), and the chunk is
//   loaded back: maximum and minimum, whose two selects GCC made scalar code of in
//   registers, in every way of writing them tried (the NaN test and the comparison as
//   two ?:, as one with the masks combined, as bitwise picks);
// - out of line, through dl::small's one-op loops (built for AVX-512 as these are):
//   every other op, whose own arithmetic costs more than the call.
#define DL_FUSED_VECTOR_UNARY(X) X(Neg, VecNeg) X(Abs, VecAbs) X(Relu, VecRelu)
#define DL_FUSED_VECTOR_BINARY(X)                                                      \
  X(Add, fn::AddFn) X(Sub, fn::SubFn) X(Mul, fn::MulFn) X(Div, fn::DivFn)              \
  X(ReluBackward, VecReluBackward) X(TanhBackward, VecTanhBackward)                    \
  X(SigmoidBackward, VecSigmoidBackward)
#define DL_FUSED_CACHED_BINARY(X) X(Maximum, fn::MaximumFn) X(Minimum, fn::MinimumFn)

// The functors of tensor/functors.h with one select, written for whole vectors: GCC's
// vector ?: picks lane by lane, so each lane is the scalar functor's choice (NaN and
// -0 included; tests/cpp/test_fused.cpp feeds both).
struct VecNeg { template <typename V> V operator()(V x) const { return -x; } };
struct VecAbs { template <typename V> V operator()(V x) const { return (x < V{} ? -x : x) + V{}; } };   // (|-0| is +0)
// x <= 0 is false for NaN, which relu passes through.
struct VecRelu { template <typename V> V operator()(V x) const { return x <= V{} ? V{} : x; } };
struct VecReluBackward { template <typename V> V operator()(V g, V x) const { return x <= V{} ? V{} : g; } };
struct VecTanhBackward { template <typename V> V operator()(V g, V y) const { return g * ((V{} + 1) - y * y); } };
struct VecSigmoidBackward { template <typename V> V operator()(V g, V y) const { return g * (y * ((V{} + 1) - y)); } };

// r[i] = f(a[i], b[i]) over a chunk's elements in memory.
template <int W, typename T, typename F>
[[gnu::always_inline]] inline void cached(T* r, const T* a, const T* b, F f) {
  for (int i = 0; i < W; ++i) r[i] = T(f(a[i], b[i]));
}

// Which operands of an instruction are the chunk in registers (R), which are read from
// memory (M), and which are one value (B, broadcast: read once, not per vector): a
// binary instruction's a and b, or a unary one's a.
enum Pair : uint8_t { RR, RM, MR, MM, RB, BR };

template <typename T>
[[gnu::noinline]] void out_of_line(Op op, bool unary, T* r, const T* a, const T* b, int64_t n) {
  const DType dt = sizeof(T) == sizeof(float) ? DType::Float32 : DType::Float64;
  if (unary) small::block_unary(op, dt, r, a, n);
  else small::block_binary(op, dt, r, a, 1, b, 1, n);
}

// acc = f(a) or f(a, b) on whole vectors, a and b each the chunk in registers (R), in
// memory (M) or one value (B), as the template argument says. The chunk in registers is
// an array of N vectors that each step assigns whole, in a loop: in that form GCC keeps
// it in registers. (Lane by lane, or with its address passed anywhere, it kept the
// array on the stack; as named members with the steps written out, it made scalar code
// of selects.)
template <Pair P, typename T, int N, typename V, typename F>
[[gnu::always_inline]] inline void step1(V (&acc)[N], const T* a, F f) {
  constexpr int VB = sizeof(V), L = VB / int(sizeof(T));
  if constexpr (P == RR) {
    for (int j = 0; j < N; ++j) acc[j] = f(acc[j]);
  } else {
    static_assert(P == MM);
    for (int j = 0; j < N; ++j) acc[j] = f(load<VB>(a + j * L));
  }
}
template <Pair P, typename T, int N, typename V, typename F>
[[gnu::always_inline]] inline void step2(V (&acc)[N], const T* a, const T* b, F f) {
  constexpr int VB = sizeof(V), L = VB / int(sizeof(T));
  if constexpr (P == RR) {
    for (int j = 0; j < N; ++j) acc[j] = f(acc[j], acc[j]);
  } else if constexpr (P == RM) {
    for (int j = 0; j < N; ++j) acc[j] = f(acc[j], load<VB>(b + j * L));
  } else if constexpr (P == MR) {
    for (int j = 0; j < N; ++j) acc[j] = f(load<VB>(a + j * L), acc[j]);
  } else if constexpr (P == MM) {
    for (int j = 0; j < N; ++j) acc[j] = f(load<VB>(a + j * L), load<VB>(b + j * L));
  } else if constexpr (P == RB) {
    const V y = load<VB>(b);
    for (int j = 0; j < N; ++j) acc[j] = f(acc[j], y);
  } else {
    const V x = load<VB>(a);
    for (int j = 0; j < N; ++j) acc[j] = f(x, acc[j]);
  }
}

// The chunk stored to memory, and loaded from it.
template <typename T, int N, typename V>
[[gnu::always_inline]] inline void store_all(T* at, const V (&acc)[N]) {
  constexpr int VB = sizeof(V);
  for (int j = 0; j < N; ++j) store<VB>(at + j * (VB / int(sizeof(T))), acc[j]);
}
template <typename T, int N, typename V>
[[gnu::always_inline]] inline void load_all(V (&acc)[N], const T* at) {
  constexpr int VB = sizeof(V);
  for (int j = 0; j < N; ++j) acc[j] = load<VB>(at + j * (VB / int(sizeof(T))));
}

// Note [Results past the caches]
// An output of kStreamBytes or more is written with non-temporal stores, which go to
// memory without first reading each line into the caches: a result that large does not
// stay in them for the op that reads it next anyway. Smaller results were written
// faster through the caches, and results of eager ops too, which the next op reads at
// once (bench/'s `pw8bw`; docs/performance-compile.md, "Fused programs", has the sizes
// measured and the eager trial). Only whole chunks of outputs aligned to a vector are
// streamed; each range ends with a fence, so that the stores are seen before the
// region's threads join.
// (GCC only: clang 14 leaves the width builds' calls of stream_all, whose asm names a
// vector register of their width, unresolved at link time, so the clang build, the fuzz
// build of tests/fuzz/run.sh, writes through the caches: the same values.)
constexpr int64_t kStreamBytes = int64_t(32) << 20;
#if defined(__x86_64__) && !defined(__clang__)
constexpr bool kCanStream = true;
template <typename T, int N, typename V>
[[gnu::always_inline]] inline void stream_all(T* at, const V (&acc)[N]) {
  constexpr int VB = sizeof(V), L = VB / int(sizeof(T));
  for (int j = 0; j < N; ++j) {
    V* to = reinterpret_cast<V*>(at + j * L);
    if constexpr (VB == 16) asm volatile("movntps %1, %0" : "=m"(*to) : "x"(acc[j]));
    else asm volatile("vmovntps %1, %0" : "=m"(*to) : "v"(acc[j]));
  }
}
inline void stream_fence() { asm volatile("sfence" ::: "memory"); }
#else
constexpr bool kCanStream = false;
template <typename T, int N, typename V>
[[gnu::always_inline]] inline void stream_all(T* at, const V (&acc)[N]) { store_all(at, acc); }
inline void stream_fence() {}
#endif

// A trailing reduction's part of a range: instruction `code`'s values added to a fold
// chunk's lanes as they are computed (tensor/fold.h), kFoldValues at a time (a call
// for each of the program's chunks cost more than the fold itself, in cache).
constexpr int64_t kFoldValues = 2048;
static_assert(kFoldValues % fold::kPiece == 0 && kFoldValues % Chunk<float>::kElements == 0 &&
              kFoldValues % Chunk<double>::kElements == 0 && fold::kChunk % kFoldValues == 0);
struct Folding {
  int code = -1;
  Op op = Op::Sum;
  fold::State* st = nullptr;
  int64_t len = 0;   // the fold chunk's length
};

// The buffers of a range's run, per thread of a region: on the heap, not the stack
// (about 50 KB, too much for the small stacks of an embedding host's worker threads).
template <typename T>
struct Scratch {
  static constexpr int64_t W = Chunk<T>::kElements;
  alignas(kAlign) T slots[fused::kMaxCode][W];
  alignas(kAlign) T gathered[fused::kMaxInputs][W];   // also the copies of one value
  alignas(kAlign) T numbers[fused::kMaxCode][W];      // a scalar instruction's number
  alignas(kAlign) T tails[fused::kMaxOutputs][W];     // the outputs of a short last chunk
  alignas(kAlign) T values[kFoldValues];              // the folded instruction's, in order
};

// The first tier's ops numbered, in the order of the two lists: an instruction in the
// tier takes the case number * 6 + its Pair (a unary one RR or MM), so that one jump
// picks the op and where its operands are.
enum VectorOp : int {
#define DL_ENUM(Name, Fn) kVector##Name,
  DL_FUSED_VECTOR_UNARY(DL_ENUM) DL_FUSED_VECTOR_BINARY(DL_ENUM)
#undef DL_ENUM
  kVectorOps
};
constexpr int kPairs = 6;
// The cached tier's ops: case kCached + their number.
enum CachedOp : int {
#define DL_ENUM(Name, Fn) kCached##Name,
  DL_FUSED_CACHED_BINARY(DL_ENUM)
#undef DL_ENUM
};
constexpr int kCached = kVectorOps * kPairs;

// The case an instruction of op takes, its operands where `pair` says: a vector op's,
// a cached op's, or -1: out of line.
int case_of(Op op, bool unary, Pair pair) {
#define DL_CASE(Name, Fn) \
  case Op::Name: return kVector##Name * kPairs + int(pair);
  if (unary) {
    switch (op) {
      DL_FUSED_VECTOR_UNARY(DL_CASE)
      default: return -1;
    }
  }
  switch (op) {
    DL_FUSED_VECTOR_BINARY(DL_CASE)
#undef DL_CASE
#define DL_CASE(Name, Fn) \
    case Op::Name: return kCached + kCached##Name;
    DL_FUSED_CACHED_BINARY(DL_CASE)
#undef DL_CASE
    default: return -1;
  }
}

// How an instruction's operand is read: the value in registers (the instruction just
// before), a slot, an input in place, one value, a gathered input buffer, or the chunk
// of copies of a scalar instruction's number; None: a unary instruction's b.
enum class From : uint8_t { Registers, Slot, Dense, One, Gathered, Number, None };

struct Route {
  From from = From::None;
  int8_t index = 0;   // Slot, Number: the instruction; inputs: the input
};

// What an instruction does after its arithmetic, as bits.
enum After : uint8_t { kToSlot = 1, kToFold = 2, kToOutput = 4 };

// What a program's structure decides, planned once for it (Note [Checked programs]).
struct Routes {
  Route a[fused::kMaxCode], b[fused::kMaxCode];   // a scalar instruction's number as its operand
  int kase[fused::kMaxCode];                      // case_of's
  uint8_t after[fused::kMaxCode];                 // kToSlot and kToOutput
  int8_t outputs[fused::kMaxCode][fused::kMaxOutputs];
  int8_t noutputs[fused::kMaxCode];
  bool one[fused::kMaxInputs], dense[fused::kMaxInputs];
};

void plan_routes(const fused::Program& p, Routes& r) {
  for (int k = 0; k < p.ninputs; ++k) {
    const fused::Input& in = p.inputs[k];
    r.one[k] = in.repeat == 1 && in.period == 1;
    r.dense[k] = in.repeat == 1 && in.period == p.numel;
  }
  for (int c = 0; c < p.ncode; ++c) r.after[c] = 0, r.noutputs[c] = 0;
  auto route = [&](int c, int8_t ref) {
    Route x;
    if (ref >= 0) {
      x.index = ref;
      if (ref == c - 1) {
        x.from = From::Registers;
      } else {
        x.from = From::Slot;
        r.after[ref] |= kToSlot;
      }
      return x;
    }
    x.index = int8_t(-1 - ref);
    x.from = r.one[x.index] ? From::One : r.dense[x.index] ? From::Dense : From::Gathered;
    return x;
  };
  for (int c = 0; c < p.ncode; ++c) {
    const fused::Instr& in = p.code[c];
    const bool unary = in.code == fused::Instr::Unary;
    Route a = route(c, in.a), b;
    if (in.code == fused::Instr::Binary) {
      b = route(c, in.b);
    } else if (!unary) {
      b = Route{From::Number, int8_t(c)};
      if (in.code == fused::Instr::ScalarLeft) std::swap(a, b);
    }
    r.a[c] = a, r.b[c] = b;
    const bool ra = a.from == From::Registers, rb = b.from == From::Registers;
    auto one = [](const Route& x) { return x.from == From::One || x.from == From::Number; };
    const Pair pair = unary ? (ra ? RR : MM) : ra ? (rb ? RR : one(b) ? RB : RM) : rb ? (one(a) ? BR : MR) : MM;
    r.kase[c] = case_of(in.op, unary, pair);
  }
  for (int o = 0; o < p.noutputs; ++o) {
    const int c = p.outputs[o].code;
    r.outputs[c][r.noutputs[c]++] = int8_t(o);
    r.after[c] |= kToOutput;
  }
}

// Elements [begin, end) of every output (and of the fold, if any), N vectors of VB bytes
// at a time (a chunk, or 64 bytes for a program shorter than a chunk: Note [Short
// programs]); begin a multiple of the chunk's size. An operand of one value, or a
// scalar instruction's number, is read from a chunk of copies of it.
template <typename T, int VB, int N>
[[gnu::always_inline]] inline void run_body(const fused::Program& p, const Routes& r, int64_t begin, int64_t end,
                                            const Folding& folding, Scratch<T>& scratch) {
  using V = typename Vec<T, VB>::V;
  constexpr int L = Vec<T, VB>::kLanes, W = L * N;
  auto& slots = scratch.slots;
  auto& gathered = scratch.gathered;
  auto& numbers = scratch.numbers;
  auto& tails = scratch.tails;
  T* values = scratch.values;
  int64_t nvalues = 0;
  for (int k = 0; k < p.ninputs; ++k)
    if (r.one[k]) std::fill_n(gathered[k], W, *static_cast<const T*>(p.inputs[k].data));
  for (int c = 0; c < p.ncode; ++c)
    if (p.code[c].code == fused::Instr::ScalarLeft || p.code[c].code == fused::Instr::ScalarRight)
      std::fill_n(numbers[c], W, fn::convert<T>(p.code[c].s));
  // Per instruction, decided once for the whole chunks and again for the short last
  // one: where its operands in memory are (a dense input's chunk at data + o, its
  // `moves` all ones; anything else at a fixed place, `moves` zero), and the case to
  // take. The outputs likewise: at data + o, or a short last chunk's buffer.
  // (No member initializers: the array is left as it is and each instruction's entry
  // is zeroed as it is decoded, not all kMaxCode of them for every run.)
  struct Decoded {
    const T* a;
    const T* b;
    int64_t a_moves, b_moves;
    int kase;        // case_of's
    uint8_t after;   // After's bits
  };
  Decoded d[fused::kMaxCode];
  T* out_at[fused::kMaxOutputs];
  int64_t out_moves[fused::kMaxOutputs];
  bool out_streams[fused::kMaxOutputs];   // Note [Results past the caches]
  bool streamed = false;
  int ngather = 0;
  int8_t gather[fused::kMaxInputs];   // the inputs read_block copies for each chunk
  auto memory = [&](const Route& from, bool whole, const T** at, int64_t* moves) {
    switch (from.from) {
      case From::Registers:
      case From::None: break;
      case From::Slot: *at = slots[from.index]; break;
      case From::Number: *at = numbers[from.index]; break;
      case From::Dense:
        if (whole) {
          *at = static_cast<const T*>(p.inputs[from.index].data), *moves = -1;
          break;
        }
        [[fallthrough]];
      default: *at = gathered[from.index]; break;   // One, Gathered, a dense input's short chunk
    }
  };
  auto decode = [&](bool whole) {
    for (int c = 0; c < p.ncode; ++c) {
      Decoded& x = d[c];
      x = Decoded{};
      memory(r.a[c], whole, &x.a, &x.a_moves);
      memory(r.b[c], whole, &x.b, &x.b_moves);
      x.kase = r.kase[c];
      x.after = uint8_t(r.after[c] | (c == folding.code ? kToFold : 0));
    }
    for (int k = 0; k < p.noutputs; ++k) {
      out_at[k] = whole ? static_cast<T*>(p.outputs[k].data) : tails[k];
      out_moves[k] = whole ? -1 : 0;
      out_streams[k] = kCanStream && whole && p.numel * int64_t(sizeof(T)) >= kStreamBytes &&
                       reinterpret_cast<uintptr_t>(out_at[k]) % sizeof(V) == 0;
      streamed = streamed || out_streams[k];
    }
    ngather = 0;
    for (int k = 0; k < p.ninputs; ++k)
      if (!r.one[k] && (!r.dense[k] || !whole)) gather[ngather++] = int8_t(k);
  };
  const int64_t whole_end = begin + (end - begin) / W * W;
  decode(true);
  for (int64_t o = begin; o < end; o += W) {
    if (o == whole_end) decode(false);
    const int64_t n = std::min<int64_t>(W, end - o);
    // An op out of line computes the short last chunk's elements only, to a whole
    // vector: the lanes after them are never stored.
    const int64_t lanes = n == W ? W : (n + L - 1) / L * L;
    for (int g = 0; g < ngather; ++g)
      fused::read_block(p.inputs[gather[g]], p.numel, o, n, sizeof(T), gathered[gather[g]]);
    V acc[N] = {};
    for (int c = 0; c < p.ncode; ++c) {
      const Decoded& x = d[c];
      const T* a = x.a + (o & x.a_moves);
      const T* b = x.b + (o & x.b_moves);
      // The ops of the other tiers read the chunk from memory and write it there.
      auto through_memory = [&](auto&& f) {
        alignas(kAlign) T xa[W], xb[W], xr[W];
        if (r.a[c].from == From::Registers) store_all(xa, acc), a = xa;
        if (r.b[c].from == From::Registers) store_all(xb, acc), b = xb;
        f(xr, a, b);
        load_all(acc, xr);
      };
      switch (x.kase) {
#define DL_CASE(Name, Fn)                                                      \
        case kVector##Name * kPairs + RR: step1<RR, T, N>(acc, a, Fn{}); break; \
        case kVector##Name * kPairs + MM: step1<MM, T, N>(acc, a, Fn{}); break;
        DL_FUSED_VECTOR_UNARY(DL_CASE)
#undef DL_CASE
#define DL_PAIR(Name, Fn, P) \
        case kVector##Name * kPairs + P: step2<P, T, N>(acc, a, b, Fn{}); break;
#define DL_CASE(Name, Fn)                                                                  \
        DL_PAIR(Name, Fn, RR) DL_PAIR(Name, Fn, RM) DL_PAIR(Name, Fn, MR) DL_PAIR(Name, Fn, MM) \
        DL_PAIR(Name, Fn, RB) DL_PAIR(Name, Fn, BR)
        DL_FUSED_VECTOR_BINARY(DL_CASE)
#undef DL_CASE
#undef DL_PAIR
#define DL_CASE(Name, Fn)                                                                              \
        case kCached + kCached##Name:                                                                 \
          through_memory([&](T* xr, const T* xa, const T* xb) { cached<W>(xr, xa, xb, Fn{}); }); \
          break;
        DL_FUSED_CACHED_BINARY(DL_CASE)
#undef DL_CASE
        default:
          through_memory([&](T* xr, const T* xa, const T* xb) {
            out_of_line<T>(p.code[c].op, p.code[c].code == fused::Instr::Unary, xr, xa, xb, lanes);
          });
      }
      if (x.after) {
        if (x.after & kToSlot) store_all(slots[c], acc);
        if (x.after & kToFold) {
          store_all(values + nvalues, acc);
          nvalues += n;
        }
        // (The short last chunk goes to a buffer first, copied out after the chunk: no
        // call while the chunk is in registers, which a call would clobber.)
        for (int k = 0; k < r.noutputs[c]; ++k) {
          const int out = r.outputs[c][k];
          if (out_streams[out]) stream_all(out_at[out] + o, acc);
          else store_all(out_at[out] + (o & out_moves[out]), acc);
        }
      }
    }
    if (n < W)
      for (int k = 0; k < p.noutputs; ++k)
        std::memcpy(static_cast<T*>(p.outputs[k].data) + o, tails[k], size_t(n) * sizeof(T));
    if (nvalues == kFoldValues || (nvalues > 0 && o + W >= end)) {
      fold::add(folding.op, p.dtype, *folding.st, values, nvalues, folding.len);
      nvalues = 0;
    }
  }
  if (streamed) stream_fence();
}

// Note [Short programs]
// A program of fewer elements than a chunk (a small model's, or a scalar's gradient)
// runs 64 bytes at a time: a whole chunk would compute every instruction on up to eight times
// the elements there are. bench/'s `chainc` (the compiled gradient of a 16-element
// chain: two programs a call) measures it (docs/performance-compile.md, "The compiled call's
// own cost").
template <typename T, int VB>
[[gnu::always_inline]] inline void run_width(const fused::Program& p, const Routes& r, int64_t begin, int64_t end,
                                             const Folding& folding, Scratch<T>& scratch) {
  constexpr int kVectors = kChunkVectors<VB>;
  if (p.numel < kVectors * Vec<T, VB>::kLanes) run_body<T, VB, 64 / VB>(p, r, begin, end, folding, scratch);
  else run_body<T, VB, kVectors>(p, r, begin, end, folding, scratch);
}

// One build per vector width (Note [Builds for each vector width] in loops.h).
#ifdef DL_WIDTH_BUILDS
template <typename T>
DL_TARGET_AVX512 void run_avx512(const fused::Program& p, const Routes& r, int64_t begin, int64_t end,
                                 const Folding& folding, Scratch<T>& scratch) {
  run_width<T, 64>(p, r, begin, end, folding, scratch);
}
template <typename T>
DL_TARGET_AVX2 void run_avx2(const fused::Program& p, const Routes& r, int64_t begin, int64_t end,
                             const Folding& folding, Scratch<T>& scratch) {
  run_width<T, 32>(p, r, begin, end, folding, scratch);
}
#endif
template <typename T>
void run_base(const fused::Program& p, const Routes& r, int64_t begin, int64_t end, const Folding& folding,
              Scratch<T>& scratch) {
  run_width<T, 16>(p, r, begin, end, folding, scratch);
}
template <typename T>
void run_build(const fused::Program& p, const Routes& r, int64_t begin, int64_t end, const Folding& folding,
               Scratch<T>& scratch) {
#ifdef DL_WIDTH_BUILDS
  switch (vector_bytes()) {
    case 64: return run_avx512<T>(p, r, begin, end, folding, scratch);
    case 32: return run_avx2<T>(p, r, begin, end, folding, scratch);
  }
#endif
  run_base<T>(p, r, begin, end, folding, scratch);
}

// The scratch of each thread of a region, made by the thread that starts the region:
// nothing inside a parallel region may allocate (or throw). Kept for the next program.
struct Scratches {
  std::vector<std::unique_ptr<Scratch<float>>> f;
  std::vector<std::unique_ptr<Scratch<double>>> d;
};
Scratches& scratches_for(DType dt, int threads) {
  thread_local Scratches s;
  auto make = [&](auto& pool) {
    if (int(pool.size()) < threads) pool.resize(size_t(threads));
    for (auto& one : pool)
      if (!one) one = std::make_unique<typename std::decay_t<decltype(*one)>>();
  };
  if (dt == DType::Float32) make(s.f);
  else make(s.d);
  return s;
}

// Elements [begin, end) on region thread t.
void run_range(const fused::Program& p, const Routes& r, int64_t begin, int64_t end, const Folding& folding,
               Scratches& s, int t) {
  if (p.dtype == DType::Float32) run_build<float>(p, r, begin, end, folding, *s.f[size_t(t)]);
  else run_build<double>(p, r, begin, end, folding, *s.d[size_t(t)]);
}

// Split between the threads in whole chunks from this many elements.
constexpr int64_t kParallelElements = int64_t(1) << 16;

void run(const fused::Program& p, const Routes& r) {
  const int64_t W = p.dtype == DType::Float32 ? Chunk<float>::kElements : Chunk<double>::kElements;
  const int64_t n = p.numel, chunks = (n + W - 1) / W;
  Scratches& s = scratches_for(p.dtype, max_threads());
  parallel_units(chunks, n < kParallelElements ? 0.0 : double(kParallelGrain), [&](int64_t c0, int64_t c1, int t) {
    run_range(p, r, c0 * W, std::min(n, c1 * W), Folding{}, s, t);
  });
}

// Checks a program before it runs, and plans its routes.
void check_and_plan(const fused::Program& p, Routes& r) {
  DL_CHECK(p.dtype == DType::Float32 || p.dtype == DType::Float64,
           "fused: a program computes in float32 or float64, not ", dtype_name(p.dtype));
  DL_CHECK(p.ncode > 0 && p.ncode <= fused::kMaxCode && p.ninputs <= fused::kMaxInputs &&
               p.noutputs <= fused::kMaxOutputs,
           "fused: a program of ", p.ncode, " instructions, ", p.ninputs, " inputs and ", p.noutputs,
           " outputs is out of bounds");
  // (A program comes from dl.compile's lowering; checked all the same, as it is cheap.)
  for (int c = 0; c < p.ncode; ++c) {
    const fused::Instr& in = p.code[c];
    const OpInfo& info = op_info(in.op);
    DL_CHECK((info.family == OpFamily::Unary && in.op != Op::Logical_not) || info.family == OpFamily::Binary,
             "fused: instruction ", c, " is ", info.lua_name, ", not a pointwise op of a float result");
    auto valid = [&](int8_t ref) { return ref >= 0 ? ref < c : -1 - ref < p.ninputs; };
    DL_CHECK(valid(in.a) && (in.code != fused::Instr::Binary || valid(in.b)),
             "fused: instruction ", c, " reads a value that is neither an input nor an earlier instruction's");
  }
  for (int o = 0; o < p.noutputs; ++o)
    DL_CHECK(p.outputs[o].code >= 0 && p.outputs[o].code < p.ncode, "fused: output ", o, " names no instruction");
  plan_routes(p, r);
}

// Note [Checked programs]
// What check_and_plan works out depends on a program's structure alone: its dtype and
// size, each instruction's kind, op and operands, how each input is read (its period
// and repeat, not its data) and which instructions are outputs, not the addresses or
// the Lua numbers (Instr::s). A compiled call runs the same programs on every call with
// new memory, so the last few structures checked on this thread are kept with their
// routes, and a program of one of them takes its routes as they are: the check and the
// plan were 3 to 4% of the instructions of bench/'s compiled calls (`chainc`, `replay16
// d`; docs/performance-compile.md, "The compiled call's own cost"). A program that
// carries a structure id (a schedule's kept program, Note [Lowered programs kept] in
// compile/plan.cpp) is found by it, without comparing its instructions.
struct Checked {
  bool used = false;
  fused::Program shape;   // the structure; data pointers and scalars not compared
  Routes routes;
};

bool same_structure(const fused::Program& a, const fused::Program& b) {
  if (a.dtype != b.dtype || a.numel != b.numel || a.ncode != b.ncode || a.ninputs != b.ninputs ||
      a.noutputs != b.noutputs)
    return false;
  for (int c = 0; c < a.ncode; ++c) {
    const fused::Instr &x = a.code[c], &y = b.code[c];
    if (x.code != y.code || x.op != y.op || x.a != y.a || (x.code == fused::Instr::Binary && x.b != y.b)) return false;
  }
  for (int k = 0; k < a.ninputs; ++k)
    if (a.inputs[k].period != b.inputs[k].period || a.inputs[k].repeat != b.inputs[k].repeat) return false;
  for (int o = 0; o < a.noutputs; ++o)
    if (a.outputs[o].code != b.outputs[o].code) return false;
  return true;
}

// p's routes, checked and planned, or as kept for a program of its structure. The
// reference stays valid until this thread's next check.
const Routes& check(const fused::Program& p) {
  constexpr int kKept = 8;
  // (On the heap: 19 KB is more than a thread's static TLS should carry.)
  thread_local std::unique_ptr<Checked[]> kept;
  thread_local int next = 0;
  if (!kept) kept = std::make_unique<Checked[]>(kKept);
  if (p.structure != 0)
    for (int i = 0; i < kKept; ++i)
      if (kept[i].used && kept[i].shape.structure == p.structure) return kept[i].routes;
  for (int i = 0; i < kKept; ++i)
    if (kept[i].used && same_structure(kept[i].shape, p)) {
      kept[i].shape.structure = p.structure;   // (the same structure under the latest id)
      return kept[i].routes;
    }
  Checked& k = kept[next];
  k.used = false;
  check_and_plan(p, k.routes);   // (throws before the entry is marked used)
  k.shape = p;
  k.used = true;
  next = (next + 1) % kKept;
  return k.routes;
}

}  // namespace

void fused(const fused::Program& p, int) {
  run(p, check(p));
}

}  // namespace dl::cpu

namespace dl::fused {

namespace {
template <typename T>
void read_runs(const Input& in, int64_t numel, int64_t o, int64_t n, T* to) {
  const T* d = static_cast<const T*>(in.data);
  if (in.repeat != 1) {   // one value for each run of `repeat` elements
    int64_t i = o / in.repeat, r = o % in.repeat;
    for (int64_t done = 0; done < n; ++i, r = 0) {
      const int64_t len = std::min(n - done, in.repeat - r);
      std::fill_n(to + done, len, d[i]);
      done += len;
    }
    return;
  }
  int64_t i = in.period == numel ? o : o % in.period;   // dense, or cycled
  for (int64_t done = 0; done < n; i = 0) {
    const int64_t len = std::min(n - done, in.period - i);
    std::memcpy(to + done, d + i, size_t(len) * sizeof(T));
    done += len;
  }
}
}  // namespace

void read_block(const Input& in, int64_t numel, int64_t o, int64_t n, size_t itemsize, void* to) {
  if (itemsize == sizeof(float)) read_runs(in, numel, o, n, static_cast<float*>(to));
  else read_runs(in, numel, o, n, static_cast<double*>(to));
}

// Note [Trailing reductions in programs]
// The fold's chunks (fold::kChunk elements) go to the threads, each run as a range of
// the program with its own lanes; a program's chunk (64 float32 or 32 float64, a
// multiple of fold::kPiece) is added to them as soon as it is computed, so the
// additions are reduce()'s, in its order (tensor/fold.h), whatever the threads.
uint64_t new_structure() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void run_folded(const Program& p, int code, Op op, void* out) {
  const cpu::Routes& r = cpu::check(p);
  DL_CHECK(code >= 0 && code < p.ncode, "fused: the folded instruction ", code, " is not one of the program's");
  DL_CHECK(fold::served(op, p.dtype), "fused: ", op_name(op), " of ", dtype_name(p.dtype), " cannot be folded");
  const int64_t n = p.numel, nchunks = std::max<int64_t>(1, (n + fold::kChunk - 1) / fold::kChunk);
  thread_local std::vector<fold::Part> parts;
  parts.resize(size_t(nchunks));
  fold::Part* part = parts.data();
  cpu::Scratches& s = cpu::scratches_for(p.dtype, cpu::max_threads());
  cpu::parallel_units(nchunks, n < cpu::kParallelElements ? 0.0 : double(cpu::kParallelGrain),
                      [&](int64_t c0, int64_t c1, int t) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t b = c * fold::kChunk, e = std::min(n, b + fold::kChunk);
      fold::State st;
      fold::start(op, p.dtype, st);
      cpu::run_range(p, r, b, e, cpu::Folding{code, op, &st, e - b}, s, t);
      part[c] = fold::close(op, p.dtype, st, e - b);
    }
  });
  fold::finish(op, p.dtype, part, nchunks, n, out);
}

}  // namespace dl::fused

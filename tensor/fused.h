// A fused pointwise program: a chain of unary and binary ops over one shape, run element
// by element through the kernels' functors (tensor/functors.h), on any backend.
//
//   fused::Program p{};                  // y = relu(x * 2 + b), b a bias cycled per row
//   p.dtype = DType::Float32;
//   p.numel = rows * cols;
//   p.inputs[0] = {x_data, p.numel};     // dense: element i
//   p.inputs[1] = {b_data, cols};        // cycled: element i % cols
//   p.ninputs = 2;
//   p.code[0] = fused::Instr::scalar(Op::Mul, fused::input(0), 2.0, false);
//   p.code[1] = fused::Instr::binary(Op::Add, 0, fused::input(1));
//   p.code[2] = fused::Instr::unary(Op::Relu, 1);
//   p.ncode = 3;
//   p.outputs[0] = {2, y_data};          // instruction 2's value is written to y
//   p.noutputs = 1;
//   backend_for(device, "compile").fused(p, device.index);
//
// dl.compile lowers the pointwise groups of its plan to programs (compile/plan.cpp).
// The host runs them a chunk at a time with the value being computed in registers
// (tensor/cpu/fused.cpp); a CUDA device runs fused::run_elements below (gpu/fused.cu),
// which tests/cpp/test_fused.cpp runs on the host with the kernel's indexing against the
// host's runner, so the device kernel interprets code the CPU tests ran. Each
// element's value is the functor's in the program's dtype, as the one-op kernels of the
// same backend compute it: a program's results equal that backend's eager results.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/functors.h"
#include "tensor/ops.h"

namespace dl::fused {

constexpr int kMaxCode = 48;      // instructions of a program
constexpr int kMaxInputs = 16;
constexpr int kMaxOutputs = 16;

// An instruction's operand: an earlier instruction's value (>= 0) or input -1 - k.
constexpr int8_t input(int k) { return int8_t(-1 - k); }

struct Instr {
  enum Code : uint8_t { Unary, Binary, ScalarRight, ScalarLeft } code = Unary;
  Op op = Op::Neg;
  int8_t a = 0, b = 0;
  double s = 0;   // ScalarRight: a op s; ScalarLeft: s op a (a Lua number)
  static Instr unary(Op op, int8_t a) { return Instr{Unary, op, a, 0, 0}; }
  static Instr binary(Op op, int8_t a, int8_t b) { return Instr{Binary, op, a, b, 0}; }
  static Instr scalar(Op op, int8_t a, double s, bool first) {
    return Instr{first ? ScalarLeft : ScalarRight, op, a, 0, s};
  }
};

// An input of numel elements is read densely, of 1 as one value, of any other count
// (which divides the program's) cyclically: element i reads element i % period. With
// `repeat` above 1, runs of that many elements read one value each: element i reads
// element i / repeat (a row's statistic, as x:mean(-1, true) keeps).
struct Input {
  const void* data = nullptr;
  int64_t period = 1;
  int64_t repeat = 1;
};

struct Output {
  int8_t code = 0;       // the instruction whose value is written
  void* data = nullptr;  // contiguous, numel elements of the program's dtype
};

// Plain data: a kernel takes it by value (about 1.3 KB, under CUDA's 4 KB of kernel
// parameters).
struct Program {
  DType dtype = DType::Float32;   // Float32 or Float64: every input, value and output
  int64_t numel = 0;
  // Nonzero: every program with this id has this one's structure (all but its addresses
  // and numbers), so a backend may keep what it works out from the structure by the id
  // (Note [Checked programs] in tensor/cpu/fused.cpp). new_structure() gives one.
  uint64_t structure = 0;
  int ncode = 0, ninputs = 0, noutputs = 0;
  Instr code[kMaxCode];
  Input inputs[kMaxInputs];
  Output outputs[kMaxOutputs];
};

// r[j] = op(a[j]) (or op(a[j], b[j])) for the K elements: the op's case is taken once
// for all of them.
// Note [Long ops in fused programs]
// An interpreter's registers are those of its most demanding case: every thread of the
// kernel is given what the longest functor in its switch needs, whatever the program
// runs. The special functions (Bessel, gamma family, erfinv, zeta) need 34 to 60
// registers alone, where add, tanh or sigmoid need under 30; in one switch they had
// raised the float32 kernel from 48 registers to 80 with spills, and every program ran
// slower for it (docs/performance.md, "On a GPU"). So the rows
// whose functor alone needs more than 32 registers (nvcc -Xptxas -v on a one-op kernel)
// carry kLong, and the CUDA runner has two interpreters: Ops::Short, built without the
// kLong ops, for the programs that hold none (has_long_ops), and Ops::All for the rest.
// Ops that cannot meet a program's dtype (the integer-only ops) are left out of both.
enum class Ops : uint8_t { All, Short };

template <Ops S>
constexpr bool interprets(unsigned flags) { return S == Ops::All || !(flags & kLong); }

// (an op outside the interpreter's set copies its operand: no program given to it holds one)
template <typename T, int K, Ops S = Ops::All>
DL_HD void apply_unary(Op op, const T (&a)[K], T (&r)[K]) {
  switch (op) {
#define DL_UNARY(Name, lua, Fn, flags)                                       \
    case Op::Name:                                                          \
      if constexpr (op_accepts<T>(flags) && interprets<S>(flags)) {         \
        for (int j = 0; j < K; ++j) r[j] = T(fn::Fn{}(a[j]));               \
        return;                                                             \
      }                                                                     \
      break;
#include "tensor/ops.def"
    default: break;
  }
  for (int j = 0; j < K; ++j) r[j] = a[j];
}

template <typename T, int K, Ops S = Ops::All>
DL_HD void apply_binary(Op op, const T (&a)[K], const T (&b)[K], T (&r)[K]) {
  switch (op) {
#define DL_BINARY(Name, lua, Fn, flags)                                      \
    case Op::Name:                                                          \
      if constexpr (op_accepts<T>(flags) && interprets<S>(flags)) {         \
        for (int j = 0; j < K; ++j) r[j] = T(fn::Fn{}(a[j], b[j]));         \
        return;                                                             \
      }                                                                     \
      break;
#include "tensor/ops.def"
    default: break;
  }
  for (int j = 0; j < K; ++j) r[j] = a[j];
}

// Whether a program holds an op of kLong (Note [Long ops in fused programs]).
inline bool has_long_ops(const Program& p) {
  for (int c = 0; c < p.ncode; ++c)
    if (op_info(p.code[c].op).flags & kLong) return true;
  return false;
}

// On the host: runs the program and a full reduction (op: sum, mean, amax or amin) of
// instruction `code`'s values, folded as they are computed, with reduce()'s bits
// (tensor/fold.h); its result, one element of the program's dtype, is written to out.
// The program's outputs are written as by the backend's fused(). (tensor/cpu/fused.cpp)
void run_folded(const Program& p, int code, Op op, void* out);

// A structure id no program had before.
uint64_t new_structure();

// On the host: elements [o, o + n) of an input of a program of numel elements, as
// read_input reads them, copied to `to` (itemsize bytes each: 4 or 8); runs of an input
// cycled or repeated are copied or filled whole. (tensor/cpu/fused.cpp)
void read_block(const Input& in, int64_t numel, int64_t o, int64_t n, size_t itemsize, void* to);

template <typename T>
DL_HD T read_input(const Program& p, int k, int64_t i) {
  const Input& in = p.inputs[k];
  const T* d = static_cast<const T*>(in.data);
  if (in.repeat != 1) return d[i / in.repeat];
  return in.period == p.numel ? d[i] : (in.period == 1 ? d[0] : d[i % in.period]);
}

// Elements i0, i0 + stride, ..., i0 + (K - 1) * stride of every output, those below numel
// (i0 must be). Each instruction is decoded once for the K elements, so a device thread
// pays the interpreter's switch once for K and has K loads in flight (one element a
// thread ran a 16M-float program far below the device's bandwidth: docs/performance.md,
// "On a GPU"). `v` holds K values per instruction.
template <typename T, int K, Ops S = Ops::All>
DL_HD void run_elements(const Program& p, int64_t i0, int64_t stride) {
  int64_t at[K];
  for (int j = 0; j < K; ++j) {
    const int64_t i = i0 + j * stride;
    at[j] = i < p.numel ? i : i0;   // past the end: element i0 again, never written
  }
  T v[kMaxCode][K];
  for (int c = 0; c < p.ncode; ++c) {
    const Instr& in = p.code[c];
    T a[K], b[K];
    for (int j = 0; j < K; ++j) a[j] = in.a >= 0 ? v[in.a][j] : read_input<T>(p, -1 - in.a, at[j]);
    switch (in.code) {
      case Instr::Unary: apply_unary<T, K, S>(in.op, a, v[c]); break;
      case Instr::Binary:
        for (int j = 0; j < K; ++j) b[j] = in.b >= 0 ? v[in.b][j] : read_input<T>(p, -1 - in.b, at[j]);
        apply_binary<T, K, S>(in.op, a, b, v[c]);
        break;
      case Instr::ScalarRight:
        for (int j = 0; j < K; ++j) b[j] = fn::convert<T>(in.s);
        apply_binary<T, K, S>(in.op, a, b, v[c]);
        break;
      case Instr::ScalarLeft:
        for (int j = 0; j < K; ++j) b[j] = fn::convert<T>(in.s);
        apply_binary<T, K, S>(in.op, b, a, v[c]);
        break;
    }
  }
  for (int o = 0; o < p.noutputs; ++o) {
    T* out = static_cast<T*>(p.outputs[o].data);
    for (int j = 0; j < K; ++j)
      if (i0 + j * stride < p.numel) out[i0 + j * stride] = v[p.outputs[o].code][j];
  }
}

}  // namespace dl::fused

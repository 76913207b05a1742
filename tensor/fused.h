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
// dl.compile lowers the groups of its plan to programs for devices other than the host
// (compile/plan.cpp); the host runs its groups a block at a time instead, and runs a
// program element by element only to check a lowering (tests/cpp/test_compile.cpp), so
// the device kernel (gpu/fused.cu) interprets exactly the code the CPU tests ran. Each
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
  int ncode = 0, ninputs = 0, noutputs = 0;
  Instr code[kMaxCode];
  Input inputs[kMaxInputs];
  Output outputs[kMaxOutputs];
};

template <typename T>
DL_HD T apply_unary(Op op, T x) {
  switch (op) {
#define DL_UNARY(Name, lua, Fn, flags) \
    case Op::Name: return T(fn::Fn{}(x));
#include "tensor/ops.def"
    default: return x;
  }
}

template <typename T>
DL_HD T apply_binary(Op op, T x, T y) {
  switch (op) {
#define DL_BINARY(Name, lua, Fn, flags) \
    case Op::Name: return T(fn::Fn{}(x, y));
#include "tensor/ops.def"
    default: return x;
  }
}

template <typename T>
DL_HD T read_input(const Program& p, int k, int64_t i) {
  const Input& in = p.inputs[k];
  const T* d = static_cast<const T*>(in.data);
  if (in.repeat != 1) return d[i / in.repeat];
  return in.period == p.numel ? d[i] : (in.period == 1 ? d[0] : d[i % in.period]);
}

// Element i of every output. `v` holds one value per instruction.
template <typename T>
DL_HD void run_element(const Program& p, int64_t i) {
  T v[kMaxCode];
  for (int c = 0; c < p.ncode; ++c) {
    const Instr& in = p.code[c];
    const T a = in.a >= 0 ? v[in.a] : read_input<T>(p, -1 - in.a, i);
    switch (in.code) {
      case Instr::Unary: v[c] = apply_unary<T>(in.op, a); break;
      case Instr::Binary:
        v[c] = apply_binary<T>(in.op, a, in.b >= 0 ? v[in.b] : read_input<T>(p, -1 - in.b, i));
        break;
      case Instr::ScalarRight: v[c] = apply_binary<T>(in.op, a, fn::convert<T>(in.s)); break;
      case Instr::ScalarLeft: v[c] = apply_binary<T>(in.op, fn::convert<T>(in.s), a); break;
    }
  }
  for (int o = 0; o < p.noutputs; ++o) static_cast<T*>(p.outputs[o].data)[i] = v[p.outputs[o].code];
}

}  // namespace dl::fused

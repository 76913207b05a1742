// Fused pointwise programs (tensor/fused.h): the host's runner (tensor/cpu/fused.cpp, a
// chunk at a time with the value being computed in registers) against the interpreter
// that the CUDA kernel runs (fused::run_elements), run here on the host with the
// kernel's grid-stride indexing. Both apply the one-op kernels' functors in the
// program's dtype, so they agree bit for bit, for every op of the table, every kind of
// input and every chunk boundary; the device kernel's code is checked this way without
// a device. Each build of the host's runner this CPU can run (its vector widths) is
// checked in turn.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cpu/loops.h"
#include "tensor/fused.h"
#include "tensor/ops.h"

using namespace dl;

namespace {

// The ops a program may hold: the table's unary and binary families, float results.
std::vector<Op> ops_of(OpFamily family) {
  std::vector<Op> ops;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(Op(i));
    // (fused programs compute in float: not logical_not's bool, nor the int-only ops)
    if (info.family == family && info.op != Op::Logical_not && !(info.flags & kIntOnly)) ops.push_back(info.op);
  }
  return ops;
}

// Those without kLong (Note [Long ops in fused programs] in tensor/fused.h).
std::vector<Op> short_ops(const std::vector<Op>& ops) {
  std::vector<Op> out;
  for (Op op : ops)
    if (!(op_info(op).flags & kLong)) out.push_back(op);
  return out;
}

// What gpu/fused.cu's kernel computes, on the host: thread t of n takes elements
// t, t + n, ... four at a time, then moves on by 4n, with the interpreter without the
// long ops where the program holds none.
template <typename T>
void run_as_the_device(const fused::Program& p, int64_t threads) {
  const bool all = fused::has_long_ops(p);
  for (int64_t t = 0; t < threads; ++t)
    for (int64_t i = t; i < p.numel; i += threads * 4) {
      if (all) fused::run_elements<T, 4>(p, i, threads);
      else fused::run_elements<T, 4, fused::Ops::Short>(p, i, threads);
    }
}

// Bit for bit, except that a NaN equals any NaN (its sign and payload may differ).
template <typename T>
bool same(const T* x, const T* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&x[i], &y[i], sizeof(T)) == 0) continue;
    if (x[i] != x[i] && y[i] != y[i]) continue;
    return false;
  }
  return true;
}

template <typename T>
void check_random_programs(DType dt, uint32_t seed) {
  const std::vector<Op> every_unary = ops_of(OpFamily::Unary), every_binary = ops_of(OpFamily::Binary);
  const std::vector<Op> short_unary = short_ops(every_unary), short_binary = short_ops(every_binary);
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
  std::normal_distribution<double> normal(0.0, 2.0);
  int64_t checked = 0, short_programs = 0;
  for (int trial = 0; trial < 120; ++trial) {
    // Every other program of the short ops only: the device's other interpreter.
    const std::vector<Op>& unary = trial % 2 ? every_unary : short_unary;
    const std::vector<Op>& binary = trial % 2 ? every_binary : short_binary;
    // Sizes around a chunk (128 float32 or 64 float64 with AVX-512, half that with
    // narrower vectors), under and over the split between threads (65,536), and with a
    // short last chunk.
    const int64_t sizes[] = {1, 5, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 1000, 4099, 70001};
    const int64_t numel = sizes[pick(15)];
    const int64_t cols = std::max<int64_t>(1, numel / (1 + pick(7)));   // a bias's period
    fused::Program p{};
    p.dtype = dt;
    p.numel = numel;
    std::vector<std::vector<T>> inputs;
    const int ninputs = 1 + pick(5);
    for (int k = 0; k < ninputs; ++k) {
      fused::Input in;
      int64_t count = numel;
      switch (pick(4)) {
        case 0: in.period = numel; break;                                  // dense
        case 1: in.period = 1, count = 1; break;                           // one value
        case 2: in.period = numel % cols == 0 ? cols : numel, count = in.period; break;   // cycled
        default:                                                           // one per run
          in.repeat = numel % cols == 0 ? cols : 1;
          in.period = numel / in.repeat;
          count = in.period;
      }
      std::vector<T> v(static_cast<size_t>(count));
      // Now and then a zero of either sign, an infinity or a NaN: the ops with selects
      // must pick as the one-op kernels do.
      const double special[] = {0.0, -0.0, 1.0 / 0.0, -1.0 / 0.0, std::nan("")};
      for (T& x : v) x = T(pick(16) == 0 ? special[pick(5)] : normal(rng));
      inputs.push_back(std::move(v));
      in.data = inputs.back().data();
      p.inputs[k] = in;
    }
    p.ninputs = ninputs;
    // A chain that reads out of turn now and then, and every op of the table.
    p.ncode = 1 + pick(trial % 10 == 0 ? fused::kMaxCode : 16);
    auto operand = [&](int c) -> int8_t {
      if (c > 0 && pick(4) != 0) return int8_t(pick(3) == 0 ? pick(c) : c - 1);
      return fused::input(pick(ninputs));
    };
    for (int c = 0; c < p.ncode; ++c) {
      switch (pick(3)) {
        case 0: p.code[c] = fused::Instr::unary(unary[size_t(pick(int(unary.size())))], operand(c)); break;
        case 1:
          p.code[c] = fused::Instr::binary(binary[size_t(pick(int(binary.size())))], operand(c), operand(c));
          break;
        default:
          p.code[c] = fused::Instr::scalar(binary[size_t(pick(int(binary.size())))], operand(c),
                                           0.5 * (1 + pick(6)), pick(2) == 1);
      }
    }
    // Some values written out, always the last.
    std::vector<std::vector<T>> host, device;
    std::vector<int8_t> codes;
    for (int c = 0; c < p.ncode && int(codes.size()) < fused::kMaxOutputs - 1; ++c)
      if (pick(4) == 0) codes.push_back(int8_t(c));
    codes.push_back(int8_t(p.ncode - 1));
    p.noutputs = int(codes.size());
    for (size_t o = 0; o < codes.size(); ++o) {
      host.emplace_back(size_t(numel), T(-7));
      device.emplace_back(size_t(numel), T(-7));
    }
    fused::Program on_device = p;
    for (size_t o = 0; o < codes.size(); ++o) {
      p.outputs[o] = fused::Output{codes[o], host[o].data()};
      on_device.outputs[o] = fused::Output{codes[o], device[o].data()};
    }
    backend_for(Device{}, "test").fused(p, 0);
    run_as_the_device<T>(on_device, 1 + pick(300));
    short_programs += !fused::has_long_ops(p);
    for (size_t o = 0; o < codes.size(); ++o) {
      INFO(dtype_name(dt) << " trial " << trial << ": " << numel << " elements, " << p.ncode
                          << " instructions, output " << o << " (instruction " << int(codes[o]) << ")");
      CHECK(same(host[o].data(), device[o].data(), host[o].size()));
      ++checked;
    }
  }
  CHECK(checked > 120);
  CHECK(short_programs >= 60);
}

// Runs check() with each build of the host's runner this CPU can run (Note [Builds for
// each vector width] in tensor/cpu/loops.h), then lifts the limit.
template <typename F>
void each_build(F&& check) {
  const int widest = cpu::vector_bytes();
  for (int bytes = widest; bytes >= 16; bytes /= 2) {
    cpu::limit_vector_bytes(bytes);
    INFO("the build for vectors of " << bytes << " bytes");
    check();
  }
  cpu::limit_vector_bytes(0);
}

// x * 1.5, tanh of it, minus x: three instructions over x's n elements (outputs unset).
fused::Program three_instructions(const Tensor& x) {
  fused::Program p{};
  p.dtype = x.dtype();
  p.numel = x.numel();
  p.inputs[0] = fused::Input{x.raw_data(), x.numel(), 1};
  p.ninputs = 1;
  p.code[0] = fused::Instr::scalar(Op::Mul, fused::input(0), 1.5, false);
  p.code[1] = fused::Instr::unary(Op::Tanh, 0);
  p.code[2] = fused::Instr::binary(Op::Sub, 1, fused::input(0));
  p.ncode = 3;
  return p;
}

}  // namespace

TEST_CASE("fused programs: the host runner and the device kernel's interpreter agree bit for bit", "[fused]") {
  each_build([] {
    check_random_programs<float>(DType::Float32, 7);
    check_random_programs<double>(DType::Float64, 8);
  });
}

TEST_CASE("fused programs: a program with a long op is told apart for the device's interpreters", "[fused]") {
  fused::Program p{};
  p.dtype = DType::Float32;
  p.code[0] = fused::Instr::unary(Op::Tanh, fused::input(0));
  p.code[1] = fused::Instr::scalar(Op::Mul, 0, 2.0, false);
  p.ncode = 2;
  CHECK_FALSE(fused::has_long_ops(p));
  p.code[2] = fused::Instr::binary(Op::Zeta, 1, fused::input(0));
  p.ncode = 3;
  CHECK(fused::has_long_ops(p));
  p.ncode = 2;   // (only the instructions in use count)
  CHECK_FALSE(fused::has_long_ops(p));
  // Only pointwise rows carry the flag: nothing else is interpreted.
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(Op(i));
    if (info.flags & kLong) CHECK((info.family == OpFamily::Unary || info.family == OpFamily::Binary));
  }
}

TEST_CASE("fused programs: every op of the table through the host runner equals eager", "[fused]") {
  // One instruction per op, on a value and on a chunk's edge, against the eager kernel.
  each_build([] {
    for (DType dt : {DType::Float32, DType::Float64}) {
      const Shape s{67};
      Tensor x = randn(s, dt), y = randn(s, dt);
      // Zeros of either sign, infinities and NaNs, against each other and against numbers.
      const double special[] = {0.0, -0.0, 1.0 / 0.0, -1.0 / 0.0, std::nan("")};
      for (int i = 0; i < 10; ++i) {
        const double xv = special[i % 5], yv = i < 5 ? special[(i + 1) % 5] : 0.75;
        if (dt == DType::Float32) {
          static_cast<float*>(x.raw_data())[i] = float(xv), static_cast<float*>(y.raw_data())[i] = float(yv);
          static_cast<float*>(x.raw_data())[40 + i] = -0.5f, static_cast<float*>(y.raw_data())[40 + i] = float(xv);
        } else {
          static_cast<double*>(x.raw_data())[i] = xv, static_cast<double*>(y.raw_data())[i] = yv;
          static_cast<double*>(x.raw_data())[40 + i] = -0.5, static_cast<double*>(y.raw_data())[40 + i] = xv;
        }
      }
      for (OpFamily family : {OpFamily::Unary, OpFamily::Binary}) {
        for (Op op : ops_of(family)) {
          Tensor out = empty(s, dt, Device{}, "test");
          fused::Program p{};
          p.dtype = dt;
          p.numel = 67;
          p.inputs[0] = fused::Input{x.raw_data(), 67, 1};
          p.inputs[1] = fused::Input{y.raw_data(), 67, 1};
          p.ninputs = 2;
          p.code[0] = family == OpFamily::Unary ? fused::Instr::unary(op, fused::input(0))
                                                : fused::Instr::binary(op, fused::input(0), fused::input(1));
          p.ncode = 1;
          p.outputs[0] = fused::Output{0, out.raw_data()};
          p.noutputs = 1;
          backend_for(Device{}, "test").fused(p, 0);
          Tensor eager = family == OpFamily::Unary ? unary(op, x) : binary(op, x, y);
          INFO(op_info(op).lua_name << " " << dtype_name(dt));
          if (dt == DType::Float32)
            CHECK(same(static_cast<const float*>(out.raw_data()), static_cast<const float*>(eager.raw_data()), 67));
          else
            CHECK(same(static_cast<const double*>(out.raw_data()), static_cast<const double*>(eager.raw_data()), 67));
        }
      }
    }
  });
}

TEST_CASE("fused programs: outputs past the caches (32 MB and more) have the same bits", "[fused]") {
  // Written with non-temporal stores (Note [Results past the caches] in
  // tensor/cpu/fused.cpp): engine tensors, aligned as the allocator aligns them, and a
  // short last chunk; against the device kernel's interpreter.
  each_build([] {
    for (DType dt : {DType::Float32, DType::Float64}) {
      const int64_t n = (int64_t(33) << 20) / int64_t(itemsize(dt)) + 77;
      Tensor x = randn(Shape{n}, dt);
      Tensor out1 = empty(Shape{n}, dt, Device{}, "test"), out2 = empty(Shape{n}, dt, Device{}, "test");
      Tensor dev1 = empty(Shape{n}, dt, Device{}, "test"), dev2 = empty(Shape{n}, dt, Device{}, "test");
      fused::Program p = three_instructions(x);
      p.noutputs = 2;
      fused::Program on_device = p;
      p.outputs[0] = fused::Output{0, out1.raw_data()};
      p.outputs[1] = fused::Output{2, out2.raw_data()};
      on_device.outputs[0] = fused::Output{0, dev1.raw_data()};
      on_device.outputs[1] = fused::Output{2, dev2.raw_data()};
      backend_for(Device{}, "test").fused(p, 0);
      if (dt == DType::Float32) run_as_the_device<float>(on_device, 1);
      else run_as_the_device<double>(on_device, 1);
      INFO(dtype_name(dt) << ", " << n << " elements");
      const size_t bytes = size_t(n) * size_t(itemsize(dt));
      CHECK(std::memcmp(out1.raw_data(), dev1.raw_data(), bytes) == 0);
      CHECK(std::memcmp(out2.raw_data(), dev2.raw_data(), bytes) == 0);
    }
  });
}

TEST_CASE("fused programs: a folded instruction's reduction has reduce()'s bits", "[fused]") {
  // x * 1.5, tanh of it, minus x (three instructions), every one folded in turn, at sizes
  // around the fold's pieces (32), the runner's batches of values (2,048) and the fold's
  // chunks (16,384), and large enough to fold on threads.
  const int64_t sizes[] = {1, 31, 64, 65, 2047, 2048, 2049, 16383, 16384, 16385, 16384 * 5 + 64, 70001};
  each_build([&] {
    for (DType dt : {DType::Float32, DType::Float64}) {
      for (int64_t n : sizes) {
        Tensor x = randn(Shape{n}, dt);
        if (n == 2049) x = unary(Op::Log, x);   // NaNs, which win amax and amin
        Tensor values[3] = {empty(Shape{n}, dt, Device{}, "test"), empty(Shape{n}, dt, Device{}, "test"),
                            empty(Shape{n}, dt, Device{}, "test")};
        fused::Program p = three_instructions(x);
        for (int c = 0; c < 3; ++c) p.outputs[c] = fused::Output{int8_t(c), values[c].raw_data()};
        p.noutputs = 3;
        for (Op op : {Op::Sum, Op::Mean, Op::Amax, Op::Amin}) {
          for (int code = 0; code < 3; ++code) {
            Tensor folded = empty(Shape{}, dt, Device{}, "test");
            fused::run_folded(p, code, op, folded.raw_data());
            Tensor want = reduce(op, values[code], {}, false);
            INFO(op_name(op) << " of instruction " << code << ", " << n << " " << dtype_name(dt));
            if (dt == DType::Float32)
              CHECK(same(static_cast<const float*>(folded.raw_data()), static_cast<const float*>(want.raw_data()), 1));
            else
              CHECK(same(static_cast<const double*>(folded.raw_data()), static_cast<const double*>(want.raw_data()), 1));
          }
        }
      }
    }
  });
}

TEST_CASE("fused programs: the host runner refuses a program out of bounds", "[fused]") {
  fused::Program p{};
  p.dtype = DType::Float32;
  p.numel = 4;
  p.ncode = fused::kMaxCode + 1;
  CHECK_THROWS_WITH(backend_for(Device{}, "test").fused(p, 0), Catch::Contains("out of bounds"));
  p.ncode = 1;
  p.ninputs = 1;
  p.code[0] = fused::Instr::unary(Op::Exp, fused::input(3));   // no input 3
  CHECK_THROWS_WITH(backend_for(Device{}, "test").fused(p, 0), Catch::Contains("instruction 0"));
  p.code[0] = fused::Instr::unary(Op::Exp, 0);                 // reads itself
  CHECK_THROWS_WITH(backend_for(Device{}, "test").fused(p, 0), Catch::Contains("instruction 0"));
  p.code[0] = fused::Instr::unary(Op::Logical_not, fused::input(0));
  CHECK_THROWS_WITH(backend_for(Device{}, "test").fused(p, 0), Catch::Contains("logical_not"));
  p.code[0] = fused::Instr::unary(Op::Exp, fused::input(0));
  float x = 1, out = 0;
  p.inputs[0] = fused::Input{&x, 4, 1};
  CHECK_THROWS_WITH(fused::run_folded(p, 1, Op::Sum, &out), Catch::Contains("not one of the program's"));
  CHECK_THROWS_WITH(fused::run_folded(p, 0, Op::Prod, &out), Catch::Contains("cannot be folded"));
  p.dtype = DType::Int32;
  CHECK_THROWS_WITH(backend_for(Device{}, "test").fused(p, 0), Catch::Contains("float32 or float64"));
}

TEST_CASE("fused programs: a program's structure, not its memory, decides the routes kept for it", "[fused]") {
  // Note [Checked programs] in tensor/cpu/fused.cpp: the same code reading an input
  // densely, cycled, as one value or per run must each get its own routes, and new
  // memory and scalars must be read on every run.
  const Backend& cpu = backend_for(Device{}, "test");
  auto run = [&](const float* b, int64_t period, int64_t repeat, float scale) {
    std::vector<float> x(8), y(8, -1.0f);
    for (int i = 0; i < 8; ++i) x[size_t(i)] = float(i + 1);
    fused::Program p{};
    p.dtype = DType::Float32;
    p.numel = 8;
    p.inputs[0] = fused::Input{x.data(), 8, 1};
    p.inputs[1] = fused::Input{b, period, repeat};
    p.ninputs = 2;
    p.code[0] = fused::Instr::binary(Op::Mul, fused::input(0), fused::input(1));
    p.code[1] = fused::Instr::scalar(Op::Mul, 0, scale, false);
    p.ncode = 2;
    p.outputs[0] = fused::Output{1, y.data()};
    p.noutputs = 1;
    cpu.fused(p, 0);
    return y;
  };
  const float dense[8] = {1, 2, 3, 4, 5, 6, 7, 8}, pair[2] = {10, 20}, one[1] = {3}, rows[4] = {1, 2, 3, 4};
  for (int round = 0; round < 2; ++round) {   // the second round finds every structure kept
    INFO("round " << round);
    std::vector<float> y = run(dense, 8, 1, 1.0f);
    for (int i = 0; i < 8; ++i) CHECK(y[size_t(i)] == float((i + 1) * (i + 1)));
    y = run(pair, 2, 1, 2.0f);
    for (int i = 0; i < 8; ++i) CHECK(y[size_t(i)] == float(i + 1) * pair[i % 2] * 2.0f);
    y = run(one, 1, 1, 0.5f);
    for (int i = 0; i < 8; ++i) CHECK(y[size_t(i)] == float(i + 1) * 3.0f * 0.5f);
    y = run(rows, 4, 2, 1.0f);
    for (int i = 0; i < 8; ++i) CHECK(y[size_t(i)] == float(i + 1) * rows[i / 2]);
  }
  // An op that a kept structure does not have is checked again.
  fused::Program bad{};
  bad.dtype = DType::Float32;
  bad.numel = 8;
  float x[8] = {};
  bad.inputs[0] = fused::Input{x, 8, 1};
  bad.inputs[1] = fused::Input{dense, 8, 1};
  bad.ninputs = 2;
  bad.code[0] = fused::Instr::binary(Op::Mul, fused::input(0), fused::input(1));
  bad.code[1] = fused::Instr::unary(Op::Logical_not, 0);
  bad.ncode = 2;
  CHECK_THROWS_WITH(cpu.fused(bad, 0), Catch::Contains("logical_not"));
}

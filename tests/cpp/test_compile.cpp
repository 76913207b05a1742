// dl.compile's engine side (compile/): the fused executor gives eager's bits whatever
// its operands' layout, writes only what is wanted, and the traces match, grow and stop.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <random>

#include "compile/plan.h"
#include "compile/trace.h"
#include "tensor/ops.h"
#include "tests/cpp/bits.h"

using namespace dl;
using dl::test::same_bits;
using namespace dl::compile;

namespace {

Step unary_step(Op op, Operand a, DType dt, const Shape& s) {
  Step st;
  st.kind = Kind::Unary;
  st.op = op;
  st.a = std::move(a);
  st.dtype = dt;
  st.shape = s;
  return st;
}

Step binary_step(Op op, Operand a, Operand b, DType dt, const Shape& s) {
  Step st;
  st.kind = Kind::Binary;
  st.op = op;
  st.a = std::move(a);
  st.b = std::move(b);
  st.dtype = dt;
  st.shape = s;
  return st;
}

Step scalar_step(Op op, Operand a, double v, bool first, DType dt, const Shape& s) {
  Step st;
  st.kind = Kind::BinaryScalar;
  st.op = op;
  st.a = std::move(a);
  st.s = v;
  st.scalar_first = first;
  st.dtype = dt;
  st.shape = s;
  return st;
}

// Host groups run this way while it lives: Programs as on a CUDA device (every group a
// fused program, tensor/fused.h), Blocks a block at a time, Auto as dl.compile runs them.
struct HostGroupsAre {
  explicit HostGroupsAre(HostGroups how) { set_host_groups(how); }
  ~HostGroupsAre() { set_host_groups(HostGroups::Auto); }
};
const char* name_of(HostGroups how) {
  return how == HostGroups::Programs ? ", programs" : how == HostGroups::Blocks ? ", blocks" : ", auto";
}

// Bit for bit, except that a NaN equals any NaN (the sign of a NaN that an operation
// made is not specified, and a vectorised loop may differ there from an element-wise one).
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor x = contiguous(a), y = contiguous(b);
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    double u, v;
    if (x.dtype() == DType::Float32) {
      float fu = static_cast<const float*>(x.raw_data())[i], fv = static_cast<const float*>(y.raw_data())[i];
      if (std::memcmp(&fu, &fv, sizeof fu) == 0) continue;
      u = fu, v = fv;
    } else {
      u = static_cast<const double*>(x.raw_data())[i], v = static_cast<const double*>(y.raw_data())[i];
      if (std::memcmp(&u, &v, sizeof u) == 0) continue;
    }
    if (!(u != u && v != v)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("a fused group gives eager's bits for every kind of operand", "[compile]") {
  const HostGroups how = GENERATE(HostGroups::Auto, HostGroups::Programs, HostGroups::Blocks);
  HostGroupsAre on(how);
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int64_t m : {3, 67, 400}) {   // one block, and (400 x 333) many blocks on threads
      const int64_t n = m == 400 ? 333 : 5;
      const Shape s{m, n};
      Tensor x = randn(s, dt);
      Tensor row = randn(Shape{n}, dt);           // cycled: the group's trailing dim
      Tensor col = randn(Shape{m, 1}, dt);        // repeated: one value a row
      Tensor one = randn(Shape{1, 1}, dt);        // one value, step 0
      Tensor xt = contiguous(transpose(randn(Shape{n, m}, dt), 0, 1));
      Tensor strided = transpose(randn(Shape{n, m}, dt), 0, 1);   // not contiguous
      std::vector<Step> steps;
      steps.push_back(binary_step(Op::Mul, Operand::bound(x), Operand::bound(row), dt, s));        // 0
      steps.push_back(binary_step(Op::Add, Operand::of(0), Operand::bound(col), dt, s));           // 1
      steps.push_back(unary_step(Op::Tanh, Operand::of(1), dt, s));                                // 2
      steps.push_back(scalar_step(Op::Sub, Operand::of(2), 0.25, true, dt, s));                    // 3
      steps.push_back(binary_step(Op::Div, Operand::of(3), Operand::bound(one), dt, s));           // 4
      steps.push_back(binary_step(Op::Maximum, Operand::of(4), Operand::bound(strided), dt, s));   // 5
      steps.push_back(binary_step(Op::Atan2, Operand::bound(xt), Operand::of(5), dt, s));          // 6
      std::vector<Tensor> results(steps.size());
      std::vector<uint8_t> want(steps.size(), 1);
      execute(steps, 0, steps.size(), results, want);
      Tensor e0 = binary(Op::Mul, x, row);
      Tensor e1 = binary(Op::Add, e0, col);
      Tensor e2 = unary(Op::Tanh, e1);
      Tensor e3 = binary(Op::Sub, e2, Scalar::from_lua(0.25), true);
      Tensor e4 = binary(Op::Div, e3, one);
      Tensor e5 = binary(Op::Maximum, e4, strided);
      Tensor e6 = binary(Op::Atan2, xt, e5);
      const Tensor* eager[] = {&e0, &e1, &e2, &e3, &e4, &e5, &e6};
      for (size_t i = 0; i < steps.size(); ++i) {
        INFO("step " << i << ", " << dtype_name(dt) << ", " << s << name_of(how));
        CHECK(same_bits(results[i], *eager[i]));
      }
    }
  }
}

TEST_CASE("random groups lowered to fused programs equal the block executor", "[compile]") {
  // Chains of 3 to 70 steps (beyond a program's kMaxCode: run a step at a time) over
  // dense, cycled, one-value, expanded and strided operands, some results unwanted.
  const Op unary_ops[] = {Op::Neg, Op::Abs, Op::Exp, Op::Log, Op::Sqrt, Op::Tanh, Op::Sigmoid,
                          Op::Relu, Op::Sin, Op::Floor, Op::Softplus, Op::Erf};
  const Op binary_ops[] = {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Maximum, Op::Minimum,
                           Op::Pow, Op::Atan2, Op::Mod, Op::TanhBackward, Op::ReluBackward};
  std::mt19937 rng(19);
  auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
  int64_t lowered_groups = 0, unlowered = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const DType dt = trial % 2 ? DType::Float64 : DType::Float32;
    const int64_t m = 1 + pick(70), n = 1 + pick(300);
    const Shape s{m, n};
    // (The last two: views with stride 0, one value expanded to the group's shape and
    // a row expanded down its rows.)
    std::vector<Tensor> outside = {randn(s, dt), randn(Shape{n}, dt), randn(Shape{1}, dt),
                                   randn(Shape{m, 1}, dt), transpose(randn(Shape{n, m}, dt), 0, 1),
                                   expand(randn(Shape{1}, dt), s), expand(randn(Shape{1, n}, dt), s)};
    const int nsteps = 3 + pick(trial % 5 == 0 ? 68 : 20);
    std::vector<Step> steps;
    // An earlier step, or a tensor from outside: of the group's shape (`full`) or any
    // that broadcasts to it.
    auto operand = [&](int upto, bool full) {
      if (upto > 0 && pick(3) != 0) return Operand::of(int32_t(upto - 1 - pick(std::min(upto, 4))));
      const size_t o = full ? size_t(pick(2)) * 4 : size_t(pick(int(outside.size())));
      return Operand::bound(outside[o]);
    };
    for (int k = 0; k < nsteps; ++k) {
      const int kind = pick(3);
      if (kind == 0)
        steps.push_back(unary_step(unary_ops[pick(12)], operand(k, true), dt, s));
      else if (kind == 1)
        steps.push_back(binary_step(binary_ops[pick(11)], operand(k, true), operand(k, false), dt, s));
      else
        steps.push_back(scalar_step(binary_ops[pick(7)], operand(k, true), 0.5 + pick(5), pick(2) == 1, dt, s));
    }
    std::vector<uint8_t> want(steps.size());
    for (auto& w : want) w = pick(3) == 0;
    want.back() = 1;
    std::vector<Tensor> block(steps.size()), program(steps.size()), automatic(steps.size());
    {
      HostGroupsAre on(HostGroups::Blocks);
      execute(steps, 0, steps.size(), block, want);
    }
    execute(steps, 0, steps.size(), automatic, want);
    {
      HostGroupsAre on(HostGroups::Programs);
      const ExecStats before = exec_stats();
      execute(steps, 0, steps.size(), program, want);
      lowered_groups += exec_stats().groups - before.groups;
      unlowered += exec_stats().unlowered - before.unlowered;
    }
    std::vector<Tensor> eager(steps.size());
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& st = steps[i];
      const Tensor& a = st.a.step >= 0 ? eager[size_t(st.a.step)] : st.a.input;
      if (st.kind == Kind::Unary)
        eager[i] = unary(st.op, a);
      else if (st.kind == Kind::Binary)
        eager[i] = binary(st.op, a, st.b.step >= 0 ? eager[size_t(st.b.step)] : st.b.input);
      else
        eager[i] = binary(st.op, a, Scalar::from_lua(st.s), st.scalar_first);
      if (!want[i]) continue;
      INFO("trial " << trial << ", step " << i << " of " << nsteps << ", " << dtype_name(dt) << " " << s);
      REQUIRE(program[i].defined());
      REQUIRE(block[i].defined());
      REQUIRE(automatic[i].defined());
      CHECK(same_values(block[i], eager[i]));
      CHECK(same_values(automatic[i], eager[i]));
      CHECK(same_values(program[i], eager[i]));
    }
  }
  CHECK(lowered_groups > unlowered);
  CHECK(unlowered > 0);   // the longest chains
}

TEST_CASE("the executor writes only the results that are wanted", "[compile]") {
  const Shape s{4, 6};
  Tensor x = randn(s, DType::Float32);
  std::vector<Step> steps;
  steps.push_back(scalar_step(Op::Mul, Operand::bound(x), 2, false, DType::Float32, s));   // 0: read in-group
  steps.push_back(unary_step(Op::Exp, Operand::of(0), DType::Float32, s));                 // 1: read by the sum
  steps.push_back(unary_step(Op::Neg, Operand::bound(x), DType::Float32, s));             // 2: dead
  Step sum;
  sum.kind = Kind::Reduce;
  sum.op = Op::Sum;
  sum.a = Operand::of(1);
  sum.dtype = DType::Float32;
  steps.push_back(sum);                                                                  // 3: wanted
  std::vector<Tensor> results(steps.size());
  const ExecStats before = exec_stats();
  execute(steps, 0, steps.size(), results, {0, 0, 0, 1});
  CHECK_FALSE(results[0].defined());
  CHECK_FALSE(results[1].defined());   // folded by the sum as it is computed
  CHECK_FALSE(results[2].defined());
  REQUIRE(results[3].defined());
  CHECK(same_bits(results[3], reduce(Op::Sum, unary(Op::Exp, binary(Op::Mul, x, Scalar::from_lua(2))), {}, false)));
  CHECK(exec_stats().elided - before.elided == 3);
}

TEST_CASE("a kept schedule serves the same steps again with other tensors, and only them", "[compile]") {
  // Note [Schedules]: what execute works out from the steps is kept; each later run with
  // a cache reads its own tensors (contiguous or not, one value or not) and gives what a
  // run without one gives, and steps that differ (a shape, what is wanted) get their own.
  const HostGroups how = GENERATE(HostGroups::Auto, HostGroups::Programs, HostGroups::Blocks);
  HostGroupsAre on(how);
  auto steps_of = [](const Tensor& x, const Tensor& w, const Shape& s) {
    std::vector<Step> steps;
    steps.push_back(binary_step(Op::Mul, Operand::bound(x), Operand::bound(w), DType::Float32, s));   // 0
    steps.push_back(scalar_step(Op::Add, Operand::of(0), 0.25, false, DType::Float32, s));            // 1
    steps.push_back(unary_step(Op::Tanh, Operand::of(1), DType::Float32, s));                         // 2
    steps.push_back(binary_step(Op::Mul, Operand::of(2), Operand::bound(w), DType::Float32, s));      // 3
    Step sum;
    sum.kind = Kind::Reduce;
    sum.op = Op::Sum;
    sum.a = Operand::of(3);
    sum.dtype = DType::Float32;
    steps.push_back(sum);                                                                            // 4
    steps.push_back(unary_step(Op::Exp, Operand::of(1), DType::Float32, s));                          // 5
    return steps;
  };
  Schedules cache;
  const std::vector<uint8_t> want{0, 0, 1, 0, 1, 0};
  auto check_run = [&](const Tensor& x, const Tensor& w, const Shape& s, const std::vector<uint8_t>& wanted) {
    const std::vector<Step> steps = steps_of(x, w, s);
    std::vector<Tensor> cached(steps.size()), plain(steps.size());
    execute(steps, 0, steps.size(), cached, wanted, &cache);
    execute(steps, 0, steps.size(), plain, wanted);
    for (size_t i = 0; i < steps.size(); ++i) {
      INFO("step " << i);
      REQUIRE(cached[i].defined() == plain[i].defined());
      if (plain[i].defined()) CHECK(same_bits(cached[i], plain[i]));
    }
    return cached;
  };
  const Shape s{8, 12};
  Tensor x = randn(s, DType::Float32), w = randn(s, DType::Float32);
  auto kept = [&] {
    size_t n = 0;
    for (const auto& sc : cache.at) n += sc != nullptr;
    return n;
  };
  check_run(x, w, s, want);
  REQUIRE(kept() == 1);
  // The same steps on other tensors: a transposed (strided) x, a one-value w, a row w.
  Tensor xt = transpose(randn(Shape{12, 8}, DType::Float32), 0, 1);
  const std::vector<Tensor> r = check_run(xt, full(Shape{1}, Scalar::from_lua(0.5), DType::Float32), s, want);
  CHECK(same_bits(r[4], reduce(Op::Sum,
                               binary(Op::Mul,
                                      unary(Op::Tanh, binary(Op::Add, binary(Op::Mul, xt, Scalar::from_lua(0.5)),
                                                             Scalar::from_lua(0.25))),
                                      Scalar::from_lua(0.5)),
                               {}, false)));
  check_run(x, randn(Shape{12}, DType::Float32), s, want);
  CHECK(kept() == 1);
  // Other wanted results, another shape: worked out again (in the place of the range's
  // start), and right.
  check_run(x, w, s, {1, 1, 1, 1, 1, 1});
  const Shape small{5};
  check_run(randn(small, DType::Float32), randn(small, DType::Float32), small, want);
  check_run(x, w, s, want);
  CHECK(kept() == 1);
  // A range that starts elsewhere has a schedule of its own.
  const std::vector<Step> steps = steps_of(x, w, s);
  std::vector<Tensor> cached(steps.size()), plain(steps.size());
  execute(steps, 0, 2, cached, {1, 1}, &cache);
  execute(steps, 2, steps.size(), cached, {1, 0, 1, 0}, &cache);
  execute(steps, 0, 2, plain, {1, 1});
  execute(steps, 2, steps.size(), plain, {1, 0, 1, 0});
  CHECK(kept() == 2);
  for (size_t i : {0, 1, 2, 4}) CHECK(same_bits(cached[i], plain[i]));
}

TEST_CASE("a row's statistic is read repeated, block and program alike", "[compile]") {
  // Operands with the group's leading dims and 1s after them are repeated along the rest
  // (Source::Rows); one that is not (its leading dim 1 where the group's is not) is
  // expanded into a copy. Rows of 50 and of 150 elements cross the 2,048-element blocks.
  const HostGroups how = GENERATE(HostGroups::Auto, HostGroups::Programs, HostGroups::Blocks);
  HostGroupsAre on(how);
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int64_t m : {4, 300}) {
      const Shape s{m, 3, 50};
      Tensor x = randn(s, dt);
      for (const Shape& ts : {Shape{m, 1, 1}, Shape{m, 3, 1}, Shape{3, 1}, Shape{1, 3, 1}}) {
        Tensor t = randn(ts, dt);
        std::vector<Step> steps;
        steps.push_back(binary_step(Op::Sub, Operand::bound(x), Operand::bound(t), dt, s));   // 0
        steps.push_back(binary_step(Op::Div, Operand::bound(t), Operand::of(0), dt, s));      // 1
        steps.push_back(unary_step(Op::Exp, Operand::of(1), dt, s));                          // 2
        std::vector<Tensor> results(steps.size());
        execute(steps, 0, steps.size(), results, {1, 1, 1});
        Tensor e0 = binary(Op::Sub, x, t), e1 = binary(Op::Div, t, e0), e2 = unary(Op::Exp, e1);
        INFO(dtype_name(dt) << " " << s << " with " << ts << name_of(how));
        CHECK(same_bits(results[0], e0));
        CHECK(same_bits(results[1], e1));
        CHECK(same_bits(results[2], e2));
      }
    }
  }
}

TEST_CASE("a result not wanted after the range is released at its last read", "[compile]") {
  // Note [Results released at their last read]: the product is read by the group after
  // it and by nothing else, so once the group has run only the wanted sum holds memory;
  // with every result wanted (a flush: Lua may read any of them) all are kept.
  Tensor x = randn(Shape{8, 16}, DType::Float32), w = randn(Shape{16, 32}, DType::Float32);
  std::vector<Step> steps;
  Step mm;
  mm.kind = Kind::MatMul;
  mm.op = Op::MatMul;
  mm.a = Operand::bound(x);
  mm.b = Operand::bound(w);
  mm.dtype = DType::Float32;
  mm.shape = Shape{8, 32};
  steps.push_back(mm);                                                                            // 0
  steps.push_back(unary_step(Op::Tanh, Operand::of(0), DType::Float32, Shape{8, 32}));            // 1
  steps.push_back(binary_step(Op::Mul, Operand::of(1), Operand::of(0), DType::Float32, Shape{8, 32}));  // 2
  Step sum;
  sum.kind = Kind::Reduce;
  sum.op = Op::Sum;
  sum.a = Operand::of(2);
  sum.ndims = 1;
  sum.dims[0] = 1;
  sum.dtype = DType::Float32;
  sum.shape = Shape{8};
  steps.push_back(sum);                                                                           // 3
  Tensor e0 = matmul(x, w);
  Tensor want_sum = reduce(Op::Sum, binary(Op::Mul, unary(Op::Tanh, e0), e0), {1}, false);
  std::vector<Tensor> results(steps.size());
  execute(steps, 0, steps.size(), results, {0, 0, 0, 1});
  CHECK_FALSE(results[0].defined());
  CHECK_FALSE(results[2].defined());
  REQUIRE(results[3].defined());
  CHECK(same_bits(results[3], want_sum));
  std::vector<Tensor> all(steps.size());
  execute(steps, 0, steps.size(), all, {1, 1, 1, 1});
  for (const Tensor& r : all) CHECK(r.defined());
  CHECK(same_bits(all[0], e0));
  CHECK(same_bits(all[3], want_sum));
}

TEST_CASE("a trailing reduction folded into its group gives reduce()'s bits", "[compile]") {
  // Sizes around the fold's lanes (32), the group's blocks (2,048) and the fold's chunks
  // (16,384), and one large enough to run on threads; folded by the program (Auto) and by
  // the blocks.
  const HostGroups how = GENERATE(HostGroups::Auto, HostGroups::Blocks);
  HostGroupsAre on(how);
  const int64_t sizes[] = {1, 5, 31, 32, 33, 2047, 2048, 2049, 16383, 16384, 16385, 16384 * 3 + 31,
                           16384 * 3 + 32, 100000, 1 << 20};
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (Op op : {Op::Sum, Op::Mean, Op::Amax, Op::Amin}) {
      for (int64_t n : sizes) {
        const Shape s = n % 2 ? Shape{n} : Shape{2, n / 2};
        Tensor x = randn(s, dt);
        if (n == 2049) x = unary(Op::Log, x);   // NaNs, which win amax and amin
        std::vector<Step> steps;
        steps.push_back(scalar_step(Op::Mul, Operand::bound(x), 1.5, false, dt, s));   // 0
        steps.push_back(unary_step(Op::Tanh, Operand::of(0), dt, s));                 // 1
        steps.push_back(binary_step(Op::Sub, Operand::of(1), Operand::of(0), dt, s));  // 2
        Step red;
        red.kind = Kind::Reduce;
        red.op = op;
        red.a = Operand::of(n % 3 ? 2 : 1);
        red.dtype = dt;
        red.keepdim = n % 4 == 0;
        if (n % 5 == 0) {   // every dim named
          red.ndims = int8_t(s.size());
          for (int d = 0; d < s.size(); ++d) red.dims[d] = int8_t(d);
        }
        Shape out;
        if (red.keepdim) out.resize(s.size(), 1);
        red.shape = out;
        steps.push_back(red);
        std::vector<Tensor> results(steps.size());
        const ExecStats before = exec_stats();
        execute(steps, 0, steps.size(), results, {0, 0, 0, 1});
        CHECK(exec_stats().single_steps == before.single_steps);   // nothing ran alone
        Tensor e0 = binary(Op::Mul, x, Scalar::from_lua(1.5));
        Tensor e1 = unary(Op::Tanh, e0);
        Tensor e2 = binary(Op::Sub, e1, e0);
        Tensor want = reduce(op, n % 3 ? e2 : e1, {}, red.keepdim);
        INFO(op_name(op) << " " << dtype_name(dt) << " of " << s << name_of(how));
        REQUIRE(results[3].defined());
        CHECK(results[3].shape() == want.shape());
        CHECK(same_bits(results[3], want));
        CHECK_FALSE(results[2].defined());
      }
    }
  }
  // A reduction over some dims only reads its operand from memory, as before.
  const Shape s{40, 50};
  Tensor x = randn(s, DType::Float32);
  std::vector<Step> steps;
  steps.push_back(unary_step(Op::Exp, Operand::bound(x), DType::Float32, s));
  steps.push_back(scalar_step(Op::Mul, Operand::of(0), 2, false, DType::Float32, s));
  Step red;
  red.kind = Kind::Reduce;
  red.op = Op::Sum;
  red.a = Operand::of(1);
  red.dtype = DType::Float32;
  red.ndims = 1;
  red.dims[0] = 1;
  red.shape = Shape{40};
  steps.push_back(red);
  std::vector<Tensor> results(steps.size());
  const ExecStats before = exec_stats();
  execute(steps, 0, steps.size(), results, {0, 0, 1});
  CHECK(exec_stats().single_steps - before.single_steps == 1);   // the reduction, alone
  CHECK(exec_stats().elided - before.elided == 1);               // step 0; step 1 was written for it
  CHECK_FALSE(results[1].defined());   // and released once read (Note [Results released at their last read])
  CHECK(same_bits(results[2], reduce(Op::Sum, binary(Op::Mul, unary(Op::Exp, x), Scalar::from_lua(2)), {1}, false)));
}

TEST_CASE("infer refuses what the executor does not take and raises eager's errors", "[compile]") {
  Step st;
  st.kind = Kind::Binary;
  st.op = Op::Add;
  CHECK(infer(st, DType::Float32, Shape{2, 3}, DType::Float32, Shape{3}));
  CHECK(st.shape == Shape{2, 3});
  CHECK_FALSE(infer(st, DType::Float32, Shape{3}, DType::Float64, Shape{3}));   // mixed dtypes
  CHECK_FALSE(infer(st, DType::Int64, Shape{3}, DType::Int64, Shape{3}));       // integers
  CHECK_THROWS_WITH(infer(st, DType::Float32, Shape{2}, DType::Float32, Shape{3}), Catch::Contains("add"));
  st.kind = Kind::Reduce;
  st.op = Op::Sum;
  st.ndims = 1;
  st.dims[0] = 1;
  st.keepdim = true;
  CHECK(infer(st, DType::Float64, Shape{2, 3, 4}, DType::Float64, Shape{}));
  CHECK(st.shape == Shape{2, 1, 4});
  st.op = Op::Var;   // its correction and empty-input rules stay eager's
  CHECK_FALSE(infer(st, DType::Float64, Shape{2, 3, 4}, DType::Float64, Shape{}));
}

TEST_CASE("traces: matched, grown into a tree, and at most kMaxTraces", "[compile]") {
  auto fn = std::make_shared<Function>("f", 1);
  // nops tanh ops in a row on ones(s), as the bindings make them: an op that is not
  // deferred runs eagerly and its result is bound for the next.
  auto run = [&](const Shape& s, int nops) {
    Call& c = begin_call(fn);
    Tensor eager_value = ones(s, DType::Float32);
    int32_t last_step = -1;
    std::vector<int> r;
    for (int i = 0; i < nops; ++i) {
      Step st;
      st.kind = Kind::Unary;
      st.op = Op::Tanh;
      OperandKey a, none;
      if (last_step < 0) {
        st.a = Operand::bound(eager_value);
        a.dtype = eager_value.dtype();
        a.shape = eager_value.shape();
      } else {
        st.a = Operand::of(last_step);
        a.step = last_step;
        a.shape = s;
      }
      const int d = defer(c, std::move(st), a, none);
      r.push_back(d);
      if (d == 0) {
        flush(c);
        eager_value = unary(Op::Tanh, last_step < 0 ? eager_value : c.results[size_t(last_step)]);
        last_step = -1;
      } else {
        last_step = int32_t(c.steps.size() - 1);
      }
    }
    finish_call(c);
    Tensor last = last_step < 0 ? eager_value : c.results[size_t(last_step)];
    end_call();
    Tensor want = ones(s, DType::Float32);
    for (int i = 0; i < nops; ++i) want = unary(Op::Tanh, want);
    CHECK(same_bits(last, want));
    return r;
  };
  CHECK(run(Shape{3}, 2) == std::vector<int>{2, 2});   // recorded
  CHECK(run(Shape{3}, 2) == std::vector<int>{1, 1});   // replayed
  CHECK(fn->traces.size() == 1);
  CHECK(run(Shape{3}, 3).back() == 2);                 // grows past the trace's end: a child
  CHECK(fn->traces.size() == 2);
  CHECK(run(Shape{3}, 3) == std::vector<int>{1, 1, 1});
  for (int64_t n = 4; n < 12; ++n) run(Shape{n}, 2);
  CHECK(fn->traces.size() == kMaxTraces);
  CHECK(fn->eager_calls > 0);
  CHECK(fn->report().find("calls ran partly eagerly") != std::string::npos);
}

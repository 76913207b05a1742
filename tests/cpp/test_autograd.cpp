// The autograd engine: textbook derivatives, nesting, in-place rules, and the
// table-driven gradient check of every differentiable op in tensor/ops.def.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <array>
#include <functional>
#include <limits>
#include <memory>
#include <thread>

#include "autograd/autograd.h"
#include "autograd/engine.h"
#include "tensor/backend.h"
#include "tensor/allocator.h"

using namespace dl;
namespace ag = dl::ag;

namespace {

Tensor scalar(double v) { return full(Shape{}, Scalar(v), DType::Float64); }

// d/dx of f at x, with the computation recorded when an outer gradient is open.
Tensor d(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  ag::GradScope scope;
  Tensor w = ag::watch(x);
  Tensor y = f(w);
  return ag::grad({y}, {}, {w}, /*create_graph=*/ag::is_recording())[0];
}

Tensor mul(const Tensor& a, const Tensor& b) { return ag::binary(Op::Mul, a, b); }
Tensor add(const Tensor& a, const Tensor& b) { return ag::binary(Op::Add, a, b); }

}  // namespace

TEST_CASE("derivatives of x*x to third order", "[autograd]") {
  auto f = [](const Tensor& x) { return mul(x, x); };
  REQUIRE(d(f, scalar(3)).item() == 6);
  REQUIRE(d([&](const Tensor& x) { return d(f, x); }, scalar(3)).item() == 2);
  REQUIRE(d([&](const Tensor& x) { return d([&](const Tensor& y) { return d(f, y); }, x); },
            scalar(3)).item() == 0);
}

TEST_CASE("perturbation confusion: inner gradients do not see outer arguments", "[autograd]") {
  // d/dx [ x * (d/dy (x + y))(y = x) ] = d/dx [x * 1] = 1   (Siskind & Pearlmutter)
  Tensor r = d([](const Tensor& x) {
    Tensor inner = d([&](const Tensor& y) { return add(x, y); }, x);
    return mul(x, inner);
  }, scalar(1));
  REQUIRE(r.item() == 1);
  // d/dx [ (d/dy x*y)(y = x) ] = d/dx [x] = 1, not 2
  Tensor r2 = d([](const Tensor& x) { return d([&](const Tensor& y) { return mul(x, y); }, x); },
                scalar(3));
  REQUIRE(r2.item() == 1);
}

TEST_CASE("gradients of values used many times accumulate", "[autograd]") {
  // f(x) = x*x + x*x*x  ->  2x + 3x^2 = 33 at 3
  Tensor g = d([](const Tensor& x) { return add(mul(x, x), mul(mul(x, x), x)); }, scalar(3));
  REQUIRE(g.item() == 33);
}

TEST_CASE("broadcast gradients are summed to each input's shape", "[autograd]") {
  ag::GradScope scope;
  Tensor a = ag::watch(ones(Shape{3, 4}, DType::Float64));
  Tensor b = ag::watch(ones(Shape{4}, DType::Float64));
  Tensor y = ag::reduce(Op::Sum, ag::binary(Op::Mul, a, b), {}, false);
  TensorList g = ag::grad({y}, {}, {a, b}, false);
  REQUIRE(g[0].shape() == Shape{3, 4});
  REQUIRE(g[1].shape() == Shape{4});
  int64_t i0[] = {0};
  REQUIRE(g[1].value_at(i0) == 3);
}

// Same shape, dtype and bits.
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.raw_data(), cb.raw_data(), size_t(ca.numel()) * ca.itemsize()) == 0;
}

// Note [Slice gradients added in place] in autograd/engine.cpp.
TEST_CASE("slice gradients added in place equal the embedded ones", "[autograd]") {
  ag::GradScope scope;
  const int64_t T = 40;
  Tensor x = ag::watch(randn(Shape{T, 3, 5}, DType::Float32));
  Tensor w = randn(Shape{T, 3, 5}, DType::Float32);
  auto f = [&] {
    // A recurrence's shape: each step narrows x, plus overlapping and strided views, a
    // select, and a use of the whole of x.
    Tensor y = ag::reduce(Op::Sum, ag::binary(Op::Mul, x, x), {}, false);
    for (int64_t t = 0; t < T; ++t) {
      Tensor step = ag::binary(Op::Mul, ag::narrow(x, 0, t, 1), ag::narrow(w, 0, t, 1));
      y = ag::binary(Op::Add, y, ag::reduce(Op::Sum, ag::unary(Op::Tanh, step), {}, false));
    }
    y = ag::binary(Op::Add, y, ag::reduce(Op::Sum, ag::narrow(x, 0, 2, 4), {}, false));
    y = ag::binary(Op::Add, y, ag::reduce(Op::Sum, ag::slice(x, 2, 0, 5, 2), {}, false));
    return ag::binary(Op::Add, y, ag::reduce(Op::Sum, ag::select(x, 1, 1), {}, false));
  };
  Tensor y1 = f(), y2 = f();
  host_allocator::take_allocated_since_reset();
  Tensor fast = ag::grad({y1}, {}, {x}, false)[0];
  const int64_t fast_bytes = host_allocator::take_allocated_since_reset();
  Tensor recorded = ag::grad({y2}, {}, {x}, true)[0];   // embeds, as recorded ops
  REQUIRE(fast.shape() == recorded.shape());
  CHECK(same_bits(fast, recorded));
  // Not a full-size buffer per step (two: the embedding and the sum, 80 x's size in
  // all): the steps' gradients went into one.
  const int64_t full_bytes = x.numel() * int64_t(sizeof(float));
  INFO("allocated in the backward: " << fast_bytes << " bytes; x is " << full_bytes);
  CHECK(fast_bytes < 10 * full_bytes);
}

TEST_CASE("a slice gradient added in place never changes a tensor the caller holds", "[autograd]") {
  ag::GradScope scope;
  Tensor a = ag::watch(ones(Shape{4, 3}, DType::Float64));
  Tensor b = ag::binary(Op::Mul, a, Scalar(2.0));
  Tensor part = ag::narrow(b, 0, 1, 2);
  Tensor gfull = full(Shape{4, 3}, Scalar(1.0), DType::Float64);
  Tensor gpart = full(Shape{2, 3}, Scalar(10.0), DType::Float64);
  // b's gradient buffer starts as gfull itself; part's gradient must go into a copy.
  Tensor ga = ag::grad({b, part}, {gfull, gpart}, {a}, false)[0];
  CHECK(same_bits(gfull, full(Shape{4, 3}, Scalar(1.0), DType::Float64)));
  int64_t top[] = {0, 0}, mid[] = {1, 2}, end[] = {3, 1};
  CHECK(ga.value_at(top) == 2);
  CHECK(ga.value_at(mid) == 22);
  CHECK(ga.value_at(end) == 2);
}

// Note [Gradients accumulated in place] in autograd/engine.cpp.
TEST_CASE("a weight's gradient from many steps is summed in place, into the same bits", "[autograd]") {
  ag::GradScope scope;
  const int64_t T = 30;
  Tensor w = ag::watch(randn(Shape{64, 48}, DType::Float32));
  Tensor xs = randn(Shape{T, 8, 64}, DType::Float32);
  auto f = [&] {
    // A recurrence's shape: the same weight in every step.
    Tensor h = zeros(Shape{8, 48}, DType::Float32);
    for (int64_t t = 0; t < T; ++t)
      h = ag::unary(Op::Tanh, ag::binary(Op::Add, ag::matmul(ag::narrow(xs, 0, t, 1), w), h));
    return ag::reduce(Op::Sum, h, {}, false);
  };
  Tensor y1 = f(), y2 = f();
  host_allocator::take_allocated_since_reset();
  Tensor fast = ag::grad({y1}, {}, {w}, false)[0];
  const int64_t fast_bytes = host_allocator::take_allocated_since_reset();
  Tensor recorded = ag::grad({y2}, {}, {w}, true)[0];   // sums out of place, recorded
  CHECK(same_bits(fast, recorded));
  // A product per step for the weight, and no new sum per step besides.
  const int64_t w_bytes = w.numel() * int64_t(sizeof(float));
  INFO("allocated in the backward: " << fast_bytes << " bytes; w is " << w_bytes);
  CHECK(fast_bytes < (T + 8) * w_bytes);
}

TEST_CASE("a gradient summed in place never changes a tensor the caller holds", "[autograd]") {
  ag::GradScope scope;
  Tensor a = ag::watch(ones(Shape{3}, DType::Float64));
  // Add's gradient for a is the seed itself, so a's sum starts as the caller's tensor.
  Tensor b1 = ag::binary(Op::Add, a, Scalar(1.0)), b2 = ag::binary(Op::Mul, a, Scalar(3.0));
  Tensor b3 = ag::binary(Op::Mul, a, Scalar(5.0));
  Tensor g1 = full(Shape{3}, Scalar(1.0), DType::Float64), g2 = full(Shape{3}, Scalar(2.0), DType::Float64);
  Tensor ga = ag::grad({b1, b2, b3}, {g1, g2, g2}, {a}, false)[0];
  CHECK(same_bits(g1, full(Shape{3}, Scalar(1.0), DType::Float64)));
  CHECK(same_bits(g2, full(Shape{3}, Scalar(2.0), DType::Float64)));
  CHECK(same_bits(ga, full(Shape{3}, Scalar(17.0), DType::Float64)));
}

TEST_CASE("nothing is recorded outside a gradient", "[autograd]") {
  Tensor x = ag::watch(scalar(2));
  Tensor y = ag::binary(Op::Mul, x, x);
  REQUIRE_FALSE(bool(y.impl()->grad_node));
}

TEST_CASE("an input the output does not depend on gets zeros", "[autograd]") {
  ag::GradScope scope;
  Tensor x = ag::watch(scalar(2)), z = ag::watch(scalar(5));
  Tensor y = ag::binary(Op::Mul, x, x);
  TensorList g = ag::grad({y}, {}, {x, z}, false);
  REQUIRE(g[0].item() == 4);
  REQUIRE(g[1].item() == 0);
}

TEST_CASE("integer tensors cannot be differentiated", "[autograd]") {
  REQUIRE_THROWS_WITH(ag::watch(zeros(Shape{2}, DType::Int64)), Catch::Contains("int64"));
}

TEST_CASE("freeing a 1,000,000-op tape does not overflow the stack", "[autograd]") {
  ag::GradScope scope;
  Tensor x = ag::watch(scalar(1));
  Tensor y = x;
  for (int i = 0; i < 1000000; ++i) y = ag::binary(Op::Add, y, Scalar(0.0));
  y = Tensor();  // drops the whole chain
  SUCCEED();
}

// Each product saves its input, twice (Note [Saved tensors and versions]): no history is
// reached through the saved tensors, so the teardown stays a loop.
TEST_CASE("freeing a 1,000,000-product tape whose nodes save their inputs does not overflow the stack",
          "[autograd]") {
  ag::GradScope scope;
  Tensor x = ag::watch(scalar(1));
  Tensor y = x;
  for (int i = 0; i < 1000000; ++i) y = ag::binary(Op::Mul, y, y);
  y = Tensor();
  SUCCEED();
}

TEST_CASE("a saved input keeps the history it was recorded with", "[autograd]") {
  // y = x * x saves x; x then becomes a constant (as a discarded tape makes its values)
  // and the gradient and second derivative still follow the recorded graph.
  ag::GradScope scope;
  Tensor w = ag::watch(scalar(3));
  Tensor x = ag::binary(Op::Mul, w, Scalar(2.0));   // x = 2w, recorded
  Tensor y = ag::binary(Op::Mul, x, x);             // 4w^2
  ag::forget_history(x);
  Tensor g = ag::grad({y}, {}, {w}, true)[0];       // 8w = 24, recorded
  CHECK(g.item() == 24);
  CHECK(ag::grad({g}, {}, {w}, false)[0].item() == 8);
}

TEST_CASE("an input written in place after it was saved leaves no reference cycle", "[autograd]") {
  // h:copy_(relu(h)): relu saved h, and h's new history leads back to relu. Saved as
  // itself rather than as an alias, h would hold that history and the graph would never
  // be freed (Note [Saved tensors and versions]).
  const int64_t before = host_allocator::stats().in_use;
  {
    ag::GradScope scope;
    Tensor w = ag::watch(full(Shape{64}, Scalar(1.0), DType::Float32));   // 256 bytes a tensor
    Tensor h = ag::binary(Op::Mul, w, Scalar(2.0));
    Tensor r = ag::unary(Op::Relu, h);
    ag::copy_(h, r);
    Tensor hh = ag::binary(Op::Mul, h, h);
    ag::binary_(Op::Mul, hh, hh);                                       // a:mul_(a)
    CHECK(host_allocator::stats().in_use > before);
  }
  CHECK(host_allocator::stats().in_use == before);
}

TEST_CASE("a node with more inputs than it keeps inline routes every gradient", "[autograd]") {
  // cat of 10 tensors, every other one watched: the edges past the inline ones take the
  // heap path of the node's recording (autograd/table.cpp).
  ag::GradScope scope;
  TensorList xs;
  for (int k = 0; k < 10; ++k) {
    Tensor x = full(Shape{2}, Scalar(double(k)), DType::Float64);
    xs.push_back(k % 2 ? ag::watch(x) : x);
  }
  Tensor w = arange(1, 21, 1, DType::Float64);   // d(sum(w * cat))/dx_k = w's slice
  Tensor y = ag::reduce(Op::Sum, ag::binary(Op::Mul, ag::cat(xs, 0), w), {}, false);
  TensorList wanted;
  for (int k = 1; k < 10; k += 2) wanted.push_back(xs[size_t(k)]);
  TensorList g = ag::grad({y}, {}, wanted, false);
  REQUIRE(g.size() == 5);
  for (int j = 0; j < 5; ++j) {
    const int k = 2 * j + 1;
    int64_t i0 = 0, i1 = 1;
    CHECK(g[size_t(j)].value_at(&i0) == 2 * k + 1);
    CHECK(g[size_t(j)].value_at(&i1) == 2 * k + 2);
  }
}

TEST_CASE("a backward pass through a long chain is iterative", "[autograd]") {
  ag::GradScope scope;
  Tensor x = ag::watch(scalar(1));
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = ag::binary(Op::Add, y, Scalar(1.0));
  REQUIRE(ag::grad({y}, {}, {x}, false)[0].item() == 1);
}

TEST_CASE("a backward pass over a wide graph: fan-out, a sum tree and a multi-output node", "[autograd]") {
  ag::GradScope scope;
  Tensor x = ag::watch(view(arange(0, 12, 1, DType::Float64), Shape{3, 4}));
  // 3,000 multiples of x summed as a tree: x feeds 3,000 nodes, each node two parents
  // away from the root (the task's index grows many times over).
  std::vector<Tensor> terms;
  double total = 0;
  for (int k = 1; k <= 3000; ++k) {
    terms.push_back(ag::binary(Op::Mul, x, Scalar(0.001 * k)));
    total += 0.001 * k;
  }
  while (terms.size() > 1) {
    std::vector<Tensor> next;
    for (size_t i = 0; i + 1 < terms.size(); i += 2) next.push_back(add(terms[i], terms[i + 1]));
    if (terms.size() % 2) next.push_back(terms.back());
    terms.swap(next);
  }
  // max over dim 1 gives values and indices (a node of two outputs); its values are
  // used twice, so their gradients meet before the node runs.
  Tensor m = ag::view(ag::max_dim(x, 1, false).first, Shape{3, 1});
  Tensor y = ag::reduce(Op::Sum, add(add(terms[0], ag::binary(Op::Mul, m, Scalar(2.0))), m), {}, false);
  Tensor g = ag::grad({y}, {}, {x}, false)[0];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      int64_t at[2] = {i, j};
      // the row's largest element is its last: 2m + m, broadcast over the row's 4 columns
      REQUIRE(g.value_at(at) == Approx(total + (j == 3 ? 12 : 0)).epsilon(1e-12));
    }
}

TEST_CASE("in-place change of a saved value is an error, not a wrong gradient", "[autograd]") {
  ag::GradScope scope;
  Tensor x = ag::watch(full(Shape{3}, Scalar(2.0), DType::Float64));
  Tensor y = ag::unary(Op::Exp, x);       // saves y
  Tensor s = ag::reduce(Op::Sum, y, {}, false);
  ag::NoGradScope off;
  dl::binary_(Op::Add, y, Scalar(1.0));   // overwrites the saved output behind autograd's back
  ag::GradScope on;
  REQUIRE_THROWS_WITH(ag::grad({s}, {}, {x}, false), Catch::Contains("exp") && Catch::Contains("in-place"));
}

TEST_CASE("writing into a view rewrites the base's history", "[autograd]") {
  ag::GradScope scope;
  Tensor w = ag::watch(full(Shape{3}, Scalar(2.0), DType::Float64));
  Tensor x = zeros(Shape{3}, DType::Float64);
  Tensor v = ag::select(x, 0, 1);           // a view of x
  Tensor src = ag::binary(Op::Mul, ag::select(w, 0, 1), Scalar(5.0));
  ag::copy_(v, src);                         // x[1] = 5 * w[1]
  Tensor s = ag::reduce(Op::Sum, ag::binary(Op::Mul, x, x), {}, false);  // 25 w1^2
  Tensor g = ag::grad({s}, {}, {w}, false)[0];
  int64_t i0[] = {0}, i1[] = {1};
  REQUIRE(g.value_at(i0) == 0);
  REQUIRE(g.value_at(i1) == Approx(100));    // 50 w1 at w1 = 2
}

TEST_CASE("in-place arithmetic on a recorded tensor keeps gradients right", "[autograd]") {
  ag::GradScope scope;
  Tensor x = ag::watch(full(Shape{2}, Scalar(3.0), DType::Float64));
  Tensor y = ag::binary(Op::Mul, x, Scalar(1.0));
  ag::binary_(Op::Mul, y, x);                // y = x * x, in place
  Tensor s = ag::reduce(Op::Sum, y, {}, false);
  Tensor g = ag::grad({s}, {}, {x}, false)[0];
  int64_t i0[] = {0};
  REQUIRE(g.value_at(i0) == 6);
}

TEST_CASE("a view taken before an in-place write sees the new history", "[autograd]") {
  ag::GradScope scope;
  Tensor x = ag::watch(full(Shape{2}, Scalar(3.0), DType::Float64));
  Tensor y = ag::binary(Op::Mul, x, Scalar(1.0));
  Tensor v = ag::select(y, 0, 0);            // view taken first
  ag::binary_(Op::Mul, y, Scalar(4.0));      // then the base is scaled in place
  Tensor g = ag::grad({v}, {}, {x}, false)[0];
  int64_t i0[] = {0}, i1[] = {1};
  REQUIRE(g.value_at(i0) == 4);
  REQUIRE(g.value_at(i1) == 0);
}

TEST_CASE("variables are recorded only while a gradient is taken, and logged", "[autograd]") {
  Tensor v = full(Shape{}, Scalar(3.0), DType::Float64);
  ag::mark_variable(v);
  Tensor y0 = ag::binary(Op::Mul, v, v);
  REQUIRE_FALSE(bool(y0.impl()->grad_node));
  ag::GradScope scope;
  ag::VariableLog log;
  Tensor y = ag::binary(Op::Mul, v, v);
  REQUIRE(log.used().size() == 1);
  REQUIRE(ag::grad({y}, {}, {v}, false)[0].item() == 6);
  REQUIRE_THROWS_WITH(ag::fill_(v, Scalar(1.0)), Catch::Contains("Variable"));
}

TEST_CASE("backward through huge geometry: a slice step near 2^63, an empty input's sizes", "[autograd]") {
  // The step was kept as a double, and 2^63 - 1 rounds to 2^63, which does not convert
  // back; the reduced count of an empty (2^62, 2^62, 0) multiplied past 2^63.
  const int64_t top = std::numeric_limits<int64_t>::max();
  Tensor g = d([&](const Tensor& x) { return ag::reduce(Op::Sum, ag::slice(x, 0, 0, 3, top), {}, false); },
               ones(Shape{3}, DType::Float64));
  CHECK(g.shape() == Shape{3});
  int64_t at = 0;
  CHECK(g.value_at(&at) == 1);
  at = 2;
  CHECK(g.value_at(&at) == 0);
  const int64_t half = int64_t(1) << 62;
  for (Op op : {Op::Sum, Op::Mean}) {
    auto f = [&](const Tensor& x) { return ag::reduce(Op::Sum, ag::reduce(op, x, {0, 1}, false), {}, false); };
    Tensor e = d(f, zeros(Shape{half, half, 0}, DType::Float64));
    CHECK(e.shape() == Shape{half, half, 0});
  }
}

TEST_CASE("matmul's gradient for an operand stored transposed comes in the operand's layout", "[autograd]") {
  // y = x W^T, as in a Linear layer: W's gradient g^T x arrives contiguous, so the
  // optimizer's step needs no copy; the values are those of the plain formula.
  ag::GradScope scope;
  double xv[] = {1, 2, 3, 4, 5, 6, 7, 8}, wv[] = {1, -1, 2, 0.5, 3, -2};
  Tensor x = ag::watch(from_values(xv, 8, Shape{4, 2}, DType::Float64));
  Tensor w = ag::watch(from_values(wv, 6, Shape{3, 2}, DType::Float64));
  Tensor wt = ag::transpose(w, 0, 1);
  Tensor y = ag::matmul(x, wt);
  Tensor loss = ag::reduce(Op::Sum, ag::binary(Op::Mul, y, y), {}, false);
  TensorList g = ag::grad({loss}, {}, {w, wt, x}, false);
  CHECK(g[0].is_contiguous());
  // dL/dW = (2 y)^T x; dL/dx = (2 y) W
  Tensor gy = dl::binary(Op::Mul, dl::matmul(x, dl::transpose(w, 0, 1)), Scalar(2.0));
  Tensor want_w = dl::matmul(dl::transpose(gy, 0, 1), x), want_x = dl::matmul(gy, w);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      int64_t at[] = {i, j}, at_t[] = {j, i};
      CHECK(g[0].value_at(at) == Approx(want_w.value_at(at)));
      CHECK(g[1].value_at(at_t) == Approx(want_w.value_at(at)));
    }
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      int64_t at[] = {i, j};
      CHECK(g[2].value_at(at) == Approx(want_x.value_at(at)));
    }
}

// Note [Backward task buffers]: a task's vectors outlive it, kept by the thread for the
// next task. They must hold nothing once a task ends (no tensor, no node), whether it
// ran, failed in its set-up or was abandoned; and tasks may nest and differ in size.
TEST_CASE("backward tasks reuse their buffers and keep nothing of a finished task", "[autograd]") {
  namespace ha = dl::host_allocator;
  const int64_t before = ha::stats().in_use;
  auto square_sum = [](const Tensor& x) { return ag::reduce(Op::Sum, mul(x, x), {}, false); };
  {
    ag::GradScope scope;
    Tensor x = ag::watch(full(Shape{1 << 18}, Scalar(2.0), DType::Float32));  // 1 MB
    Tensor g = ag::grad({square_sum(x)}, {}, {x}, false)[0];
    CHECK(g.value_at(std::array<int64_t, 1>{7}.data()) == 4);
    // A set-up that fails (a non-scalar output without output gradients)...
    CHECK_THROWS_WITH(ag::grad({mul(x, x)}, {}, {x}, false), Catch::Contains("single-element"));
    // ...a task made and dropped without running...
    { ag::GraphTask abandoned({square_sum(x)}, {}, {x}, false, false); }
    // ...and a task held while a nested one runs to its end.
    Tensor y = square_sum(x);
    ag::GraphTask outer({y}, {}, {x}, false, false);
    {
      Tensor w = ag::watch(scalar(3));
      CHECK(ag::grad({mul(w, w)}, {}, {w}, false)[0].item() == 6);
    }
    REQUIRE(outer.run());
    CHECK(outer.take_results()[0].value_at(std::array<int64_t, 1>{0}.data()) == 4);
  }
  CHECK(ha::stats().in_use == before);  // the buffers kept by the thread hold no tensor
  // A large graph, then small ones: the same answers with reused buffers.
  ag::GradScope scope;
  Tensor x = ag::watch(scalar(1));
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = ag::binary(Op::Add, y, x);
  CHECK(ag::grad({y}, {}, {x}, false)[0].item() == 20001);
  for (int k = 1; k <= 3; ++k) {
    Tensor z = ag::watch(scalar(k));
    CHECK(d([](const Tensor& t) { return mul(t, mul(t, t)); }, z).item() == 3 * k * k);
  }
}

// A task can outlive its thread's pool of buffers: a thread-local that holds it (the
// binding keeps its tasks in one) may be destroyed after the pool's own. Its buffers
// are then freed, not handed to the destroyed pool (the sanitizer build checks this).
TEST_CASE("a backward task alive at its thread's exit is freed after the pool", "[autograd]") {
  double got = 0;
  std::thread([&got] {
    struct Holder {
      std::unique_ptr<ag::GraphTask> task;
    };
    thread_local Holder holder;  // made before the pool's first use, so destroyed after it
    holder.task.reset();
    ag::GradScope scope;
    Tensor x = ag::watch(scalar(2));
    got = ag::grad({mul(x, x)}, {}, {x}, false)[0].item();  // the pool now holds buffers
    holder.task = std::make_unique<ag::GraphTask>(TensorList{mul(x, x)}, TensorList{}, TensorList{x}, false, false);
  }).join();
  CHECK(got == 4);
}

// Note [Gradient ready]: each input's gradient is reported once, when final: inputs the
// outputs do not reach at once (zeros), the others after their node ran, in the order
// the backward pass finishes them (the last layer first); a replaced gradient becomes
// the result.
TEST_CASE("a backward task reports each input's gradient when it is final", "[autograd]") {
  ag::GradScope scope;
  Tensor a = ag::watch(scalar(2)), b = ag::watch(scalar(3)), unused = ag::watch(scalar(5));
  Tensor h = mul(a, a);          // a is used first...
  Tensor y = mul(h, b);          // ...b last: b's gradient is final before a's
  ag::GraphTask task({y}, {}, {a, unused, b, a}, false, false);
  struct Seen {
    std::vector<size_t> order;
    std::vector<double> values;
  } seen;
  task.on_ready(
      [](void* ctx, size_t k, Tensor& g) {
        auto* s = static_cast<Seen*>(ctx);
        s->order.push_back(k);
        s->values.push_back(g.item());
        if (k == 1) g = scalar(-1);   // a replacement is what the task returns
      },
      &seen);
  REQUIRE(seen.order == std::vector<size_t>{1});   // the unreachable one, at once
  CHECK(seen.values[0] == 0);
  REQUIRE(task.run());
  REQUIRE(seen.order.size() == 4);
  CHECK(seen.order[1] == 2);                        // b before a
  CHECK(seen.values[1] == 4);                       // d(a^2 b)/db = a^2
  CHECK(seen.values[2] == 12);                      // d/da = 2ab, for both listings of a
  CHECK(seen.values[3] == 12);
  TensorList r = task.take_results();
  CHECK(r[1].item() == -1);
  CHECK(r[0].item() == 12);
  CHECK(r[2].item() == 4);
}

TEST_CASE("a value moved to another device gets its gradient on its own device", "[autograd]") {
  // x:cuda() inside a gradient: the move's backward moves the gradient back, at every
  // order. The "cuda" backend here is the CPU's under another name (host memory).
  Backend fake = cpu_backend();
  fake.name = "cuda";
  register_backend(DeviceType::CUDA, &fake);
  {
    const Device dev{DeviceType::CUDA, 0};
    ag::GradScope scope;
    Tensor x = ag::watch(full(Shape{3}, Scalar(2.0), DType::Float64));
    Tensor xd = ag::to_device(x, dev);
    CHECK(xd.device() == dev);
    CHECK(ag::to_device(xd, dev).impl() == xd.impl());           // already there: itself
    Tensor y = ag::reduce(Op::Sum, ag::binary(Op::Mul, ag::binary(Op::Mul, xd, xd), xd), {}, false);   // sum x^3
    Tensor g = ag::grad({y}, {}, {x}, true)[0];                   // 3x^2 = 12, on the cpu
    CHECK(g.device().is_cpu());
    int64_t i0[] = {0};
    CHECK(g.value_at(i0) == 12);
    Tensor g2 = ag::grad({ag::reduce(Op::Sum, g, {}, false)}, {}, {x}, false)[0];   // 6x = 12
    CHECK(g2.device().is_cpu());
    CHECK(g2.value_at(i0) == 12);
    // integers move without a history
    CHECK_FALSE(ag::to_device(ones(Shape{2}, DType::Int64), dev).impl()->grad_node);
  }
  register_backend(DeviceType::CUDA, nullptr);
}

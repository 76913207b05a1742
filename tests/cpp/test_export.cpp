// dl.export's engine side (export/): a capture from the engine's own ops, graphs through
// their JSON, what the reader refuses, and the runner's limits.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <string>

#include "export/capture.h"
#include "export/model.h"
#include "export/vmap.h"
#include "tensor/backend.h"
#include "tensor/error.h"
#include "tensor/nn.h"
#include "tensor/ops.h"
#include "tests/cpp/bits.h"

using namespace dl;
using dl::test::same_bits;
using namespace dl::graph;

namespace {

std::string temp_path(const char* name) { return std::string("/tmp/dlua_test_export_") + name + ".dlg"; }

// A graph's JSON with one node replaced: the reader's verdict on it.
std::string verdict(const std::string& nodes, const std::string& values) {
  const std::string text = R"({"format":"dlua.graph","version":1,"ops":{"conv2d":1,"add":1,"while":1},)"
                           R"("symbols":["n"],"values":)" + values + R"(,"inputs":[{"value":0,"name":"x"}],)"
                           R"("constants":[],"nodes":)" + nodes + R"(,"outputs":[1]})";
  try {
    from_json(text, "t");
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("export: a capture of conv2d + relu runs back bit for bit", "[export]") {
  Tensor x = randn({2, 3, 8, 8}, DType::Float32), w = randn({4, 3, 3, 3}, DType::Float32);
  Tensor b = randn({4}, DType::Float32);
  Conv2dOpts o;
  o.padding[0] = o.padding[1] = 1;
  Capture cap;
  cap.input(x, "x");
  Tensor y;
  {
    Observing on(&cap);
    y = unary(Op::Relu, conv2d(x, w, b, o));
  }
  cap.output(y);
  REQUIRE(cap.error().empty());
  cap.prune();
  REQUIRE(cap.graph.nodes.size() == 2);
  REQUIRE(cap.constants.size() == 2);   // the weight and the bias
  const std::string p = temp_path("conv");
  save_model(p, cap.graph, cap.constants);
  auto m = Model::load(p);
  CHECK(same_bits(m->run({x}).at(0), y));
  std::remove(p.c_str());
}

TEST_CASE("export: an op that does not report itself is refused, not frozen", "[export]") {
  Capture cap;
  Tensor x = ones({3}, DType::Float32);
  cap.input(x, "x");
  {
    Observing on(&cap);
    Tensor r = rand({3}, DType::Float32);   // random ops allocate outside every reported op
    (void)r;
  }
  CHECK_THAT(cap.error(), Catch::Contains("rand made a tensor outside the ops the exporter sees"));
}

TEST_CASE("export: the reader refuses what a file must not hold", "[export]") {
  const std::string values = R"([{"dtype":"float32","shape":[1,3,4,4]},{"dtype":"float32","shape":[1,2,4,4]},)"
                             R"({"dtype":"float32","shape":[2,3,1,1]}])";
  // conv2d's weight is required, its bias optional.
  CHECK_THAT(verdict(R"([{"op":"conv2d","in":[0,-1,-1],"out":[1],"ints":[1,1,0,0,1,1,1]}])", values),
             Catch::Contains("out of range"));
  CHECK_THAT(verdict(R"([{"op":"add","in":[0,0],"out":[1],"ints":[{"sym":0,"mul":4294967296}]}])", values),
             Catch::Contains("out of range"));
  CHECK_THAT(verdict(R"([{"op":"add","in":[0,5],"out":[1]}])", values), Catch::Contains("out of range"));
  CHECK_THAT(verdict(R"([{"op":"add","in":[0,1],"out":[1]}])", values), Catch::Contains("before it is made"));
  CHECK_THAT(verdict(R"([{"op":"add","in":[0,0],"out":[0]}])", values), Catch::Contains("made twice"));
  CHECK_THAT(verdict(R"([{"op":"while","in":[0],"out":[1],"ints":[1]}])", values),
             Catch::Contains("wrong number of graphs"));
  CHECK_THAT(verdict(R"([{"op":"nope","in":[0],"out":[1]}])", values), Catch::Contains("not listed"));
  CHECK(verdict(R"([{"op":"add","in":[0,0],"out":[1]}])", values).empty());
}

TEST_CASE("export: the runner's plan writes a result over an operand that dies, only then", "[export]") {
  // y = (x w^T + b) * c, and the same with the product also returned.
  Tensor x = randn({3, 4}, DType::Float32), w = randn({6, 4}, DType::Float32);
  Tensor b = randn({6}, DType::Float32), c = randn({3, 6}, DType::Float32);
  for (bool keep : {false, true}) {
    Capture cap;
    cap.input(x, "x");
    Tensor p, y;
    {
      Observing on(&cap);
      p = matmul(x, transpose(w, 0, 1));
      y = binary(Op::Mul, binary(Op::Add, p, b), c);
    }
    cap.output(y);
    if (keep) cap.output(p);
    REQUIRE(cap.error().empty());
    cap.prune();
    const std::string path = temp_path("plan");
    save_model(path, cap.graph, cap.constants);
    auto m = Model::load(path);
    for (int run = 0; run < 2; ++run) {
      std::vector<Tensor> r = m->run({x});
      CHECK(same_bits(r.at(0), y));
      if (keep) CHECK(same_bits(r.at(1), p));
    }
    // the sum over the product, the product over the sum; none where the product is kept
    CHECK(m->in_place_writes() == (keep ? 2 : 4));
    std::remove(path.c_str());
  }
}

TEST_CASE("export: sizes that follow a symbol, and the runner's bound on them", "[export]") {
  // y = x + x over (n, 2): the capture's graph made symbolic by hand, as unify does.
  Capture cap;
  Tensor x = randn({3, 2}, DType::Float32);
  cap.input(x, "x");
  Tensor y;
  {
    Observing on(&cap);
    y = binary(Op::Add, x, x);
  }
  cap.output(y);
  cap.prune();
  cap.graph.symbols = {"n"};
  for (ValueInfo& v : cap.graph.values) v.shape[0] = Int::symbol(0);
  const std::string p = temp_path("sym");
  save_model(p, cap.graph, cap.constants);
  auto m = Model::load(p);
  Tensor x5 = randn({5, 2}, DType::Float32);
  CHECK(same_bits(m->run({x5}).at(0), binary(Op::Add, x5, x5)));
  // An empty input may have a huge size: refused before a symbol's value could overflow.
  Tensor huge = zeros({int64_t(1) << 40, 0}, DType::Float32);
  CHECK_THROWS_WITH(m->run({huge}), Catch::Contains("in a dim that varies"));
  std::remove(p.c_str());
  // What a reader would refuse is not written.
  cap.graph.nodes[0].ints = {Int(int64_t(1) << 40)};
  CHECK_THROWS_WITH(save_model(p, cap.graph, cap.constants), Catch::Contains("out of range"));
  std::FILE* f = std::fopen(p.c_str(), "rb");
  CHECK(f == nullptr);
  if (f) std::fclose(f);
}

TEST_CASE("export: a loop that never ends stops at the host's limit", "[export]") {
  // while (x >= -1) x = x + 1: the condition always holds.
  const std::string loop = R"({"values":[{"dtype":"float32","shape":[1]},{"dtype":"bool","shape":[1]}],)"
                           R"("inputs":[{"value":0,"name":""}],"constants":[],)"
                           R"("nodes":[{"op":"ge","in":[0],"out":[1],"ints":[0,1],"nums":[-1.0]}],"outputs":[1]})";
  const std::string body = R"({"values":[{"dtype":"float32","shape":[1]},{"dtype":"float32","shape":[1]}],)"
                           R"("inputs":[{"value":0,"name":""}],"constants":[],)"
                           R"("nodes":[{"op":"add","in":[0],"out":[1],"ints":[0,1],"nums":[1.0]}],"outputs":[1]})";
  const std::string text = R"({"format":"dlua.graph","version":1,"ops":{"ge":1,"add":1,"while":1},"symbols":[],)"
                           R"("values":[{"dtype":"float32","shape":[1]},{"dtype":"float32","shape":[1]}],)"
                           R"("inputs":[{"value":0,"name":"x"}],"constants":[],"nodes":[{"op":"while","in":[0],)"
                           R"("out":[1],"ints":[1],"graphs":[)" + loop + "," + body + R"(]}],"outputs":[1]})";
  const std::string p = temp_path("forever");
  save_model(p, from_json(text, "t"), {});
  auto m = Model::load(p);
  m->set_loop_limit(100);
  CHECK_THROWS_WITH(m->run({zeros({1}, DType::Float32)}), Catch::Contains("past its limit of 100 iterations"));
  std::remove(p.c_str());
}

TEST_CASE("vmap: a capture on a device runs its batch there", "[export]") {
  // dl.vmap on CUDA tensors: the capture takes its arguments' device, its constants stay
  // there, a full node makes its tensor there, and a tensor from another device is
  // refused naming both. The "cuda" backend here is the CPU's under another name.
  Backend fake = cpu_backend();
  fake.name = "cuda";
  register_backend(DeviceType::CUDA, &fake);
  {
    const Device dev{DeviceType::CUDA, 0};
    Tensor xs = randn({5, 4}, DType::Float64, dev), w = randn({4, 3}, DType::Float64, dev);
    Tensor x0 = contiguous(select(xs, 0, 0));
    Capture cap(dev);
    cap.input(x0, "");
    Tensor y;
    {
      Observing on(&cap);
      y = binary(Op::Add, unary(Op::Tanh, matmul(x0, w)), full({3}, Scalar(0.5), DType::Float64, dev));
    }
    cap.output(y);
    REQUIRE(cap.error().empty());
    cap.prune();
    REQUIRE(cap.constants.size() == 1);
    CHECK(cap.constants[0].device() == dev);
    Batching run(cap.graph, cap.constants, 5);
    std::vector<BatchedValue> r = run.run({{xs, true}});
    REQUIRE(r.size() == 1);
    CHECK(r[0].t.device() == dev);
    CHECK(run.looped().empty());
    CHECK(same_bits(r[0].t, binary(Op::Add, unary(Op::Tanh, matmul(xs, w)), Scalar(0.5))));

    Capture mixed(dev);
    mixed.input(x0, "");
    {
      Observing on(&mixed);
      (void)full({4}, Scalar(1.0), DType::Float64);   // on the cpu: the ops would not mix it with x0
    }
    CHECK_THAT(mixed.error(), Catch::Contains("full makes a tensor on cpu; the function's arguments are on cuda:0"));
    Capture cpu;
    cpu.input(x0, "x");
    CHECK_THAT(cpu.error(), Catch::Contains("input x is on cuda:0; export from the cpu"));
  }
  register_backend(DeviceType::CUDA, nullptr);
}

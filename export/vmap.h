// dl.vmap's engine side: a graph captured on one example (export/capture.h) run on a
// whole batch at once, each node by its op's batching rule.
//
//   // g: captured from f(x, w) with x one example of shape (4) and w shared, (4, 3)
//   std::vector<BatchedValue> in = {{xs, true}, {w, false}};   // xs: (B, 4)
//   Batching run(g, constants, 16);                           // B = 16
//   std::vector<BatchedValue> out = run.run(in);              // out[0].t: (16, 3)
//   run.looped();                       // ops that had no rule and ran once per example
//
// Note [Batching rules] in vmap.cpp says how a rule is written. Nothing here knows Lua
// or autograd: the results carry no gradient history.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "export/graph.h"
#include "tensor/tensor.h"

namespace dl::graph {

// A value of the batched run: with `batched`, its examples lie along dim 0 (the
// graph's shape is that of one example, the dims after the first); without, it is the
// same for every example, with the graph's shape.
struct BatchedValue {
  Tensor t;
  bool batched = false;
};

class Batching {
 public:
  // constants: one per g.constants entry, in order (Capture::constants).
  Batching(const Graph& g, const std::vector<Tensor>& constants, int64_t batch);
  // The graph's outputs for these inputs (one per g.inputs, in order).
  std::vector<BatchedValue> run(const std::vector<BatchedValue>& inputs);
  // The ops without a rule that ran once per example in the last run, by name.
  const std::vector<std::string>& looped() const { return looped_; }

 private:
  const Graph& g_;
  const std::vector<Tensor>& constants_;
  int64_t batch_;
  std::vector<std::string> looped_;
};

}  // namespace dl::graph

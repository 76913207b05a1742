// Helpers for the family files (autograd/pointwise.cpp, reduce.cpp, shape.cpp ...):
// deciding whether to record, making a node, and the derivative table.
//
// Every differentiable op (kDiff in tensor/ops.def) has a specialisation of
// derivative<Op::X> in its family file; the table below takes its address, so an op
// declared differentiable without a derivative does not link.
#pragma once
#include <initializer_list>

#include "autograd/autograd.h"
#include "autograd/node.h"

namespace dl::ag {

template <Op op>
Grads derivative(Node& n, const TensorList& grads);

// The backward of a table op (nullptr for ops without a gradient).
BackwardFn derivative_of(Op op);

// A new node for `name` whose inputs are `ins` (edges looked up now), or nullptr when
// nothing needs recording: not recording, or no input requires a gradient.
Ref<Node> maybe_node(const char* name, BackwardFn fn, std::initializer_list<const Tensor*> ins);
Ref<Node> maybe_node(const char* name, BackwardFn fn, const TensorList& ins);
inline Ref<Node> maybe_node(Op op, std::initializer_list<const Tensor*> ins) {
  return maybe_node(op_name(op), derivative_of(op), ins);
}

// The output of a recorded op, attached to `node` (a fresh alias when the raw op
// returned one of its inputs unchanged, so that input keeps its own history).
Tensor finish(const Ref<Node>& node, Tensor y, uint32_t nr = 0);
// Every output of a recorded op with several, each one gradient-carrying: outs[k] is
// finished as output k, and the node has outs.size() outputs.
void finish_all(const Ref<Node>& node, std::initializer_list<Tensor*> outs);

// Dims as stored in Attrs::dims.
std::vector<int> dims_of(const Attrs& a);

// Gives a view whose base was written to in place a history that reads the base.
void regenerate_view_history(const Tensor& view);

}  // namespace dl::ag

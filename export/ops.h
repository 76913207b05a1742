// The ops an exported graph may hold: one row each, with what its node carries and how
// the runner runs it (export/ops.cpp). A node's lists mean what the engine's front end
// reported when the op ran (tensor/observe.h), so a row and its front end's report are
// the two places an op's arguments are spelled.
//
//   const OpRow* r = find_op("conv2d");       // null: not an op a graph may hold
//   std::vector<Tensor> out;
//   r->run(*r, args, out);                    // the engine's conv2d, with the node's ints
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "tensor/ops.h"

namespace dl::graph {

// A node's inputs and arguments, its symbols resolved.
struct OpArgs {
  const Tensor* const* in = nullptr;   // null: an optional input not given
  int nin = 0;
  const int64_t* ints = nullptr;
  int nints = 0;
  const double* nums = nullptr;
  int nnums = 0;
  Device device;   // where a node that makes a tensor (full) makes it: the inputs' device
};

struct OpRow;
using RunFn = void (*)(const OpRow& row, const OpArgs& a, std::vector<Tensor>& out);

struct OpRow {
  std::string_view name;
  int version = 1;         // a file may name a version up to this one
  int min_in = 1, max_in = 1;        // tensor inputs (max_in -1: any number)
  int nout = 1;                      // -1: as many as the node says (a loop's state)
  int min_ints = 0, max_ints = 0;    // max_ints -1: any number (a shape)
  int nnums = 0;
  RunFn run = nullptr;
  Op op = Op::Neg;         // rows of the op table: which op
  uint32_t optional = 0;      // bit k: input k may be absent (-1)
  int ngraphs = 0;            // graphs the node runs (Model::run runs such a node itself)
};

// The row named `name`, or null. The op table's pointwise, comparison and reduction
// ops are rows by their Lua names; the others are listed in ops.cpp.
const OpRow* find_op(std::string_view name);

}  // namespace dl::graph

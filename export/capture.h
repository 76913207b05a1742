// Capturing a graph from the engine's ops as they run (dl.export).
//
//   Capture cap;
//   cap.input(x, "x");
//   {
//     Observing on(&cap);                      // every op of this thread is reported
//     y = tanh(matmul(x, w));                  // w, made before, becomes a constant
//   }
//   cap.output(y);
//   if (!cap.error().empty()) ...             // the first thing that could not be captured
//   prune(cap);                               // nodes no output needs are dropped
//
// Note [Strict capture] in capture.cpp says what is refused and why. Nothing here knows
// Lua: the bindings (bindings/capi_export.cpp) run the function and call these.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "export/graph.h"
#include "tensor/observe.h"

namespace dl::graph {

class Capture final : public Observer {
 public:
  Capture() = default;
  // A capture whose tensors live on `device` (dl.vmap's, on its arguments' device); an
  // export's are on the cpu, where the file's runner computes.
  explicit Capture(Device device) : device_(device) {}
  // A loop's condition or body (dl.while_loop), captured inside `parent`: a tensor of an
  // enclosing capture that it reads becomes an input of its own (Note [Loops]).
  explicit Capture(Capture* parent) : parent_(parent), device_(parent->device_) {}
  // A tensor the caller gives, in order, before the ops run.
  void input(const Tensor& t, const std::string& name);
  void seen(const Observed& o) override;
  void unreported(const char* op) override;
  // A result of the function, in order, after the ops ran.
  void output(const Tensor& t);
  // Drops the nodes whose results no output needs and the constants no node reads, and
  // numbers the values again in the order they are made (constants const.0, const.1 ...
  // in the order the nodes read them).
  void prune();
  // Gives the constant made from `t` (a parameter) its name in the file (after prune).
  void name(const Tensor& t, const std::string& name);
  // A loop node (dl.while_loop) from its finished condition and body captures, whose
  // first inputs were the state `init`; `final` is the state the loop ended with.
  void loop(Capture& cond, Capture& body, const std::vector<Tensor>& init, const std::vector<Tensor>& final);
  // Marks a tensor made inside a loop (its eager run, or a body's capture): read later
  // from outside the loop, it is refused instead of taken for a constant.
  void mark(const Tensor& t);
  // The first thing that could not be captured, or empty.
  const std::string& error() const { return error_; }
  // Per constant, the tensor it was taken from (a weight the function closes over).
  const std::vector<Tensor>& constant_sources() const { return sources_; }
  void set_error(const std::string& e) { if (error_.empty()) error_ = e; }

  Graph graph;
  std::vector<Tensor> constants;   // each graph.constants entry's tensor, a snapshot

 private:
  struct Known {
    int64_t offset;
    Shape sizes, strides;
    DType dtype;
    int32_t value;
    Tensor hold;   // keeps the storage alive, so that its address names it
  };
  int32_t find(const Tensor& t) const;
  int32_t value_of(const Tensor& t, const char* op);
  int32_t add_value(const Tensor& t);
  void remember(const Tensor& t, int32_t v);
  bool node_of(const Observed& o, Node* n);

  std::unordered_map<const Storage*, std::vector<Known>> known_;
  Capture& root() { return parent_ ? parent_->root() : *this; }
  Capture* parent_ = nullptr;
  Device device_;
  // Why a tensor on `d` cannot take part ("cuda:0; export from the cpu").
  std::string elsewhere(const Device& d) const;
  std::unordered_set<const Storage*> marked_;   // the root's: storages mark() saw
  std::vector<Tensor> marked_hold_;             // ... kept alive, so addresses stay theirs
  std::vector<int32_t> outer_;    // a loop graph's inputs after its state: the parent's values
  std::vector<Tensor> sources_;   // per constant: the tensor it was taken from
  std::string error_;
};

// The observer while a loop runs eagerly inside a capture (Note [Loops]): every result
// is marked in the capture.
class Marking final : public Observer {
 public:
  explicit Marking(Capture& c) : c_(c) {}
  void seen(const Observed& o) override;

 private:
  Capture& c_;
};

// Compares a second capture with the first, which ran with the symbols' values `base`;
// the second ran with `at`. Where they differ only in symbol `sym` (-1: none), the
// first's integers that differ become affine in it (mul * symbol + add); anything else
// that differs is an error (returned; empty when they agree).
std::string unify(Capture& first, const Capture& second, int sym, const std::vector<int64_t>& base,
                  const std::vector<int64_t>& at);

}  // namespace dl::graph

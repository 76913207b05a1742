// The backward engine: plays the recorded graph backwards from some outputs and
// collects the gradients reaching some inputs.
//
// A GraphTask runs in topological order by dependency counting (no recursion), sums
// gradients of values used many times, sums broadcast gradients back to each input's
// shape, and frees each node's saved values once it has run unless the graph is to be
// kept. It can stop at a custom-gradient node whose backward is a Lua function
// (docs/design.md, "C++ never calls Lua"): the binding then calls the
// function with pending_grads() and hands the results back with supply().
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "autograd/node.h"

namespace dl::ag {

class GraphTask {
 public:
  GraphTask(const TensorList& outputs, const TensorList& grad_outputs, const TensorList& inputs,
            bool create_graph, bool retain_graph);
  ~GraphTask();
  GraphTask(const GraphTask&) = delete;
  GraphTask& operator=(const GraphTask&) = delete;

  // Runs until done (true) or until a custom node needs its Lua backward (false).
  bool run();
  Node* custom_node() const { return custom_; }
  const TensorList& pending_grads() const { return pending_; }
  // The gradients for custom_node()'s inputs (undefined entries: none).
  void supply(const TensorList& grads);
  // One gradient per input (zeros for inputs the outputs do not depend on), moved out
  // of the task: call it once, after run() returned true.
  TensorList take_results();
  Tensor take_result(size_t k);   // the gradient of input k alone

  // Calls fn(ctx, k, grad) once for each input k, as soon as its gradient is final
  // (Note [Gradient ready] in engine.cpp): for inputs the outputs do not depend on, at
  // once (with zeros), the others while the task runs. fn may replace grad (with a
  // private copy, say): take_result returns what it leaves there. Set it before run().
  using ReadyFn = void (*)(void* ctx, size_t k, Tensor& grad);
  void on_ready(ReadyFn fn, void* ctx);

  // Everything a task keeps, in one object that outlives it (Note [Backward task
  // buffers] in engine.cpp, the only place that uses it).
  struct Buffers;

 private:
  // What the task knows of a node of the graph: made once per node it discovers, kept
  // in one vector (no allocation per node: the std::unordered_map it replaces allocated
  // a map node and a gradient vector per graph node, a tenth of a recorded small op).
  struct Info {
    Node* node = nullptr;
    int kids = 0;          // where its inputs' Info indices start in kids_ (Note [Inputs by index])
    int deps = 0;
    bool needed = false;   // has a path to an input
    Tensor grad0;          // incoming gradient of output 0
    TensorList more;       // of outputs 1.. (multi-output nodes only)
    Tensor* slot(uint32_t nr);              // made on demand
    const Tensor* peek(uint32_t nr) const;  // null when none arrived
    bool any() const;
    void clear() { grad0 = Tensor(); more.clear(); }
  };
  // Node* -> index in infos_, open addressing with linear probing. A slot is taken when
  // its stamp is the index's current one, so clear() is one increment.
  class Index {
   public:
    int find(const Node* n) const;
    // The index of n, inserting `next` for it when absent (*fresh then true).
    int insert(const Node* n, int next, bool* fresh);
    void clear();
    size_t capacity() const { return slots_.size(); }
   private:
    struct Slot {
      const Node* node = nullptr;
      int index = 0;
      uint32_t stamp = 0;
    };
    void grow();
    std::vector<Slot> slots_;
    size_t used_ = 0;
    uint32_t stamp_ = 1;
  };
  Info* info(const Node* n) {
    int i = index_.find(n);
    return i < 0 ? nullptr : &infos_[size_t(i)];
  }
  void discover(const std::vector<Edge>& roots);
  void add_grad(Info* inf, uint32_t nr, const Tensor& g);   // inf: null when not in the task
  // Only the engine holds t's memory (Note [Gradients accumulated in place]).
  static bool exclusive(const Tensor& t);
  // The Info of input i of the node of `inf` (null: no node there).
  Info* kid(const Info& inf, int i) {
    const int k = kids_[size_t(inf.kids + i)];
    return k < 0 ? nullptr : &infos_[size_t(k)];
  }
  void finish_node(int at, const Grads& grads);
  // A narrow/slice/select node's gradient added into its input's buffer in place, when
  // it can be (Note [Slice gradients added in place]); false: run its backward.
  bool add_region(Info& inf, int at);
  // The node's incoming gradients, one per output, in scratch_.
  const TensorList& gather_grads(Info& inf);
  void fire_ready(size_t k);


  Buffers* buf_;                  // first: the references below point into it
  TensorList& inputs_;
  std::vector<Edge>& input_edges_;
  std::vector<Tensor>& captured_;
  std::vector<Info>& infos_;
  Index& index_;
  TensorList& scratch_;
  std::vector<int>& kids_;
  std::vector<int>& ready_;       // indices in infos_
  std::vector<Ref<Node>>& keep_;  // roots stay alive while the task runs
  bool create_graph_, retain_graph_;
  Node* custom_ = nullptr;
  int custom_at_ = -1;
  TensorList& pending_;
  ReadyFn ready_fn_ = nullptr;
  std::vector<int> ready_first_, ready_next_;   // a node's inputs, for on_ready's reports
  void* ready_ctx_ = nullptr;
};

// History stamps: set_history() gives each tensor the next stamp; a view whose base
// got a newer history (an in-place write) is stale and regenerates its edge.
uint64_t next_history_stamp();

// Note [History scopes]
// Stamps increase across threads, so a scope that took next_history_stamp() when it
// opened knows the histories made under it: those stamped later. What a scope's owner
// needs of a tensor is the stamp of the history it holds now (history_stamp), and, when
// the scope ends, to drop that history if it is still the one noted, so that the value
// becomes a constant and the graph behind it is freed (forget_history_if). A
// Variable's leaf, history made under another scope, or history rewritten since by an
// in-place write stays. The bindings' arenas of recorded values are such owners
// (bindings/arenas.cpp).
//
//   const uint64_t opened = next_history_stamp();          // the scope opens
//   const uint64_t s = history_stamp(y);                   // y's history, if any
//   if (s > opened) note(y, s);                            // made under this scope
//   forget_history_if(y, s);                               // the scope ends
//
// 0 when t has no history to drop: none, or a Variable's own.
uint64_t history_stamp(const Tensor& t) noexcept;
// Drops t's history if it still holds the history stamped `stamp`.
void forget_history_if(const Tensor& t, uint64_t stamp) noexcept;

}  // namespace dl::ag

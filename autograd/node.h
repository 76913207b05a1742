// The recorded graph: nodes, edges and saved tensors.
//
// Note [Saved tensors and versions]
// A node keeps what its backward needs as SavedTensor: a history-free alias of the
// value (sharing storage, so nothing is copied) plus the storage's version counter at
// the time it was saved. In-place ops bump the counter; unpacking a saved tensor whose
// storage moved on is an error naming the op, never a silently wrong gradient.
// A saved *output* is stored without its producer (the node itself), which would be a
// reference cycle; unpack() reattaches it to the node being run (c10's SavedVariable).
// Inputs are aliased too, though their history is their producer's: saved as itself, an
// input that an in-place op later rebases onto a node reached from this one would close
// a cycle (h:copy_(h:relu()): relu saves h, h's new history leads back to relu), and
// the teardown below could not reach a saved tensor's history without recursing.
//
// Note [Teardown of long chains]
// Nodes own their input edges, so dropping the end of a 1e6-op chain would recurse a
// million frames deep. ~Node hands children whose last reference it drops to a
// thread-local list that the outermost destructor drains in a loop.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/ops.h"

namespace dl::ag {

struct Node;

// The place a gradient flows to: output `nr` of `node`.
struct Edge {
  Ref<Node> node;
  uint32_t nr = 0;
  bool valid() const { return bool(node); }
};

// A small vector with inline room for N elements: recording a node allocates nothing
// besides the node for ops of up to N inputs, and constructs (and later destroys) only
// the elements it holds: three of each of a node's edges, input shapes and saved
// tensors made and destroyed, used or not, were 3% of a recorded chain of small ops.
template <typename T, int N>
class InlineVec {
  static_assert(std::is_nothrow_move_constructible_v<T>, "elements move to the heap without throwing");

 public:
  InlineVec() = default;
  InlineVec(const InlineVec&) = delete;
  InlineVec& operator=(const InlineVec&) = delete;
  ~InlineVec() { clear(); }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](int i) { return data()[i]; }
  const T& operator[](int i) const { return data()[i]; }

  // Strong guarantee: when making the element or room for it throws, nothing changed.
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    if (n_ < N) {
      T* p = new (reinterpret_cast<T*>(buf_) + n_) T{std::forward<Args>(args)...};
      ++n_;
      return *p;
    }
    T v{std::forward<Args>(args)...};   // before anything moves: args may name an element
    if (n_ == N) {  // the inline elements move to the heap (moves that cannot throw)
      heap_.reserve(2 * N + 2);
      for (int i = 0; i < N; ++i) {
        heap_.push_back(std::move(inl()[i]));
        inl()[i].~T();
      }
    }
    heap_.push_back(std::move(v));
    ++n_;
    return heap_.back();
  }
  void push_back(T v) { emplace_back(std::move(v)); }
  void clear() {
    if (n_ <= N) {
      for (int i = 0; i < n_; ++i) inl()[i].~T();
    } else {
      heap_.clear();
    }
    n_ = 0;
  }

 private:
  T* inl() { return std::launder(reinterpret_cast<T*>(buf_)); }
  const T* inl() const { return std::launder(reinterpret_cast<const T*>(buf_)); }
  T* data() { return n_ <= N ? inl() : heap_.data(); }
  const T* data() const { return n_ <= N ? inl() : heap_.data(); }

  alignas(T) unsigned char buf_[N * sizeof(T)];
  std::vector<T> heap_;
  int n_ = 0;
};

struct SavedTensor {
  Tensor data;        // history-free alias
  Edge edge;          // the edge of a saved input (empty for outputs)
  uint64_t version = 0;
  bool is_output = false;
  uint32_t output_nr = 0;
};

// What the engine needs to know of each input to hand it a gradient of the right
// shape and dtype (broadcast gradients are summed back here, in one place).
struct InputMeta {
  Shape shape;
  DType dtype = DType::Float32;
};

// Op parameters a backward needs (dims, scalars, shapes); no heap.
struct Attrs {
  int64_t i[4] = {0, 0, 0, 0};
  double d[2] = {0, 0};
  Shape shape;
  Shape dims;
};

// A backward's results, one gradient per input (undefined: none), with room for three
// inline: a TensorList returned per node was a heap block made and freed per node, 2% of
// a recorded chain of small ops.
class Grads {
 public:
  Grads() = default;
  explicit Grads(int n) { resize(n); }
  Grads(std::initializer_list<Tensor> l) {
    for (const Tensor& t : l) push_back(t);
  }
  Grads(const TensorList& l) {   // NOLINT: implicit, for backwards built as lists
    for (const Tensor& t : l) push_back(t);
  }
  Grads(Grads&&) noexcept = default;
  Grads& operator=(Grads&&) noexcept = default;

  int size() const { return n_; }
  Tensor& operator[](int i) { return i < kInline ? inl_[i] : heap_[size_t(i - kInline)]; }
  const Tensor& operator[](int i) const { return i < kInline ? inl_[i] : heap_[size_t(i - kInline)]; }
  void push_back(Tensor t) {
    if (n_ < kInline) inl_[n_] = std::move(t);
    else heap_.push_back(std::move(t));
    ++n_;
  }
  void resize(int n) {   // grows only
    while (n_ < n) push_back(Tensor());
  }

 private:
  static constexpr int kInline = 3;
  Tensor inl_[kInline];
  TensorList heap_;   // gradients kInline.. of nodes with more inputs
  int n_ = 0;
};

using BackwardFn = Grads (*)(struct Node& n, const TensorList& grads);

struct Node : RefCounted {
  ~Node() override;
  DL_POOLED(Node)   // every recorded op makes one: per-thread free lists (tensor/pool.h)

  const char* name = "";          // for error messages: the op's Lua name
  BackwardFn backward = nullptr;
  InlineVec<Edge, 3> next;        // one per input (invalid: no gradient needed)
  InlineVec<InputMeta, 3> inputs;
  InlineVec<SavedTensor, 3> saved;
  Attrs attrs;
  uint32_t num_outputs = 1;
  bool released = false;          // saved values freed by a backward pass
  bool argument = false;          // watch(): the alias a gradient is taken with respect to
  int64_t custom_ref = 0;         // custom (Lua) gradient: the binding's function ref
  std::vector<Shape> output_shapes;  // custom nodes: shapes of their outputs

  // The saved tensor `i`, checked against in-place changes and reattached to the graph.
  Tensor unpack(int i);
  void save(const Tensor& t, bool is_output = false, uint32_t output_nr = 0);
};

// The edge a tensor's gradient flows to (invalid if none).
Edge edge_of(const Tensor& t);
// Attaches `t` to output `nr` of `node`.
void set_history(const Tensor& t, const Ref<Node>& node, uint32_t nr);

}  // namespace dl::ag

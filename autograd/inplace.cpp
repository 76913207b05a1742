// In-place writes under recording, and views whose base was written to.
//
// Writing into a tensor that takes part in a recorded computation rewrites its
// history: the tensor (or, for a view, its base) gets a new node whose backward
// routes the gradient of the written region to the new value and the rest to the
// old history. Values an earlier node saved are protected by version counters
// (Note [Saved tensors and versions]); views see the new history through stamps
// (autograd/engine.h).

#include "autograd/math.h"
#include "autograd/record.h"
#include "autograd/views.h"

namespace dl::ag {

using namespace math;

namespace {

Geometry geometry_within_base(const Tensor& view, const TensorImpl& base, const char* op) {
  DL_CHECK(base.is_contiguous(), op, ": writing into a view of a non-contiguous tensor is not "
           "supported while recording gradients (call ag::contiguous() first)");
  for (int d = 0; d < view.dim(); ++d)
    DL_CHECK(view.stride(d) != 0 || view.size(d) <= 1, op, ": cannot write into an expanded "
             "view (several elements share one memory location)");
  return Geometry{view.shape(), view.strides(), view.offset() - base.offset};
}

Tensor base_of(const Tensor& view) { return Tensor(view.impl()->view_base); }

// d(written base)/d(old base) is the gradient outside the region; d/d(value) is the
// region itself (summed to the value's shape by the engine).
Grads copy_slices_backward(Node& n, const TensorList& g) {
  Geometry geo{n.attrs.shape, n.attrs.dims, n.attrs.i[0]};
  Tensor region = strided_view(g[0], geo);
  Grads out(2);
  if (n.next[0].valid()) out[0] = g[0] - embed(region, g[0].shape(), geo);
  if (n.next[1].valid()) out[1] = region;
  return out;
}

Grads overwrite_backward(Node& n, const TensorList& g) { return {Tensor(), g[0]}; }

// After `dst` was overwritten with `value` (undefined: a constant), rewrites the
// history of dst, or of its base when dst is a view.
void rebase(const Tensor& dst, const Tensor& value, const char* op) {
  const Tensor* vp = value.defined() ? &value : nullptr;
  TensorImpl* base = dst.impl()->view_base.get();
  if (!base) {
    // The whole tensor is replaced: only the value's history matters.
    Ref<Node> n = maybe_node(op, overwrite_backward, vp ? std::initializer_list<const Tensor*>{&dst, vp}
                                                        : std::initializer_list<const Tensor*>{&dst});
    if (!n) {
      dst.impl()->grad_node.reset();
      return;
    }
    n->next[0] = Edge{};  // the old value does not reach the result
    set_history(dst, n, 0);
    return;
  }
  Tensor b = base_of(dst);
  Geometry geo = geometry_within_base(dst, *base, op);
  Tensor cst;
  Ref<Node> n = maybe_node(op, copy_slices_backward, {&b, vp ? vp : &b});
  if (!n) return;
  if (!vp) n->next[1] = Edge{};
  n->attrs.shape = geo.sizes;
  n->attrs.dims = geo.strides;
  n->attrs.i[0] = geo.offset;
  set_history(b, n, 0);
  regenerate_view_history(dst);
}

void check_writable(const Tensor& dst, const char* op, const char* suffix = "") {
  const TensorImpl* i = dst.impl();
  const TensorImpl* root = i->view_base ? i->view_base.get() : i;
  DL_CHECK(!(root->is_variable && is_recording()), op, suffix, ": a Variable cannot be modified in place "
           "while a gradient is being taken (use v:assign(...) outside the computation)");
  // A gradient's argument (watch()'s alias, made for the call) is a leaf of the gradient
  // being taken (PyTorch's leaf that requires grad): written in place, the pass would
  // differentiate the new value, not the argument. (A tape's watch, on the tensor itself,
  // outlives its tape, so it is not held to this.)
  const Node* leaf = static_cast<const Node*>(root->grad_node.get());
  DL_CHECK(!(leaf && leaf->argument && is_recording()), op, suffix,
           ": a tensor that a gradient is taken with respect to cannot be modified in place "
           "(write into a copy: x = x:clone())");
}

bool involved(const Tensor& dst, const Tensor* src) {
  if (!is_recording()) return false;
  if (src && edge_of(*src).valid()) return true;
  if (edge_of(dst).valid()) return true;
  const TensorImpl* base = dst.impl()->view_base.get();
  return base && base->grad_node;
}

}  // namespace

void regenerate_view_history(const Tensor& view) {
  TensorImpl* base = view.impl()->view_base.get();
  Tensor b(view.impl()->view_base);
  Geometry geo = geometry_within_base(view, *base, "view");
  // The view now reads the base: a strided view of its current history.
  Ref<Node> n = make_ref<Node>();
  n->name = "view";
  n->backward = [](Node& nd, const TensorList& g) -> Grads {
    return {embed(g[0], nd.inputs[0].shape, Geometry{nd.attrs.shape, nd.attrs.dims, nd.attrs.i[0]})};
  };
  n->next.push_back(Edge{Ref<Node>(static_cast<Node*>(base->grad_node.get())), base->grad_nr});
  n->inputs.push_back(InputMeta{b.shape(), b.dtype()});
  n->attrs.shape = geo.sizes;
  n->attrs.dims = geo.strides;
  n->attrs.i[0] = geo.offset;
  set_history(view, n, 0);
}

void copy_(Tensor& dst, const Tensor& src) {
  if (!involved(dst, &src)) {
    dl::copy_(dst, src);
    return;
  }
  check_writable(dst, "copy_");
  Tensor value = is_floating(dst.dtype()) ? src : Tensor();
  dl::copy_(dst, src);
  rebase(dst, value, "copy_");
}

void fill_(Tensor& dst, Scalar v) {
  if (!involved(dst, nullptr)) {
    dl::fill_(dst, v);
    return;
  }
  check_writable(dst, "fill_");
  dl::fill_(dst, v);
  rebase(dst, Tensor(), "fill_");
}

void binary_(Op op, Tensor& a, const Tensor& b) {
  if (!involved(a, &b)) {
    dl::binary_(op, a, b);
    return;
  }
  check_writable(a, op_name(op), "_");
  // Computed out of place from a copy of the old value (which the node may need),
  // then written back as an overwrite: correct gradients at the cost of one copy,
  // paid only while recording.
  Tensor result = ag::binary(op, ag::clone(a), b);
  DL_CHECK(result.shape() == a.shape(), op_name(op), "_: cannot broadcast shape ", b.shape(),
           " into the in-place target of shape ", a.shape());
  DL_CHECK_KIND(Type, can_cast(result.dtype(), a.dtype()), op_name(op), "_: result dtype ",
                dtype_name(result.dtype()), " cannot be stored in the in-place target of dtype ",
                dtype_name(a.dtype()));
  dl::copy_(a, result);
  rebase(a, result, op_name(op));
}

void binary_(Op op, Tensor& a, Scalar s) {
  if (!involved(a, nullptr)) {
    dl::binary_(op, a, s);
    return;
  }
  check_writable(a, op_name(op), "_");
  Tensor result = ag::binary(op, ag::clone(a), s);
  DL_CHECK_KIND(Type, can_cast(result.dtype(), a.dtype()), op_name(op), "_: result dtype ",
                dtype_name(result.dtype()), " cannot be stored in the in-place target of dtype ",
                dtype_name(a.dtype()));
  dl::copy_(a, result);
  rebase(a, result, op_name(op));
}

// copy_ as a table op (x:copy_(src) from the bindings goes through ag::copy_); its
// gradient is the overwrite/copy-slices backward above.
template <> Grads derivative<Op::Copy>(Node& n, const TensorList& g) { return overwrite_backward(n, g); }

}  // namespace dl::ag

#include "tensor/optim.h"

#include "tensor/backend.h"
#include "tensor/error.h"
#include "tensor/half_ops.h"
#include "tensor/ops.h"

namespace dl {

namespace {

// The parameter `p` and a tensor `t` of its update: same device, shape and dtype
// (`convert`: the dtype is converted instead, for the gradient).
Tensor checked(const Tensor& p, const Tensor& t, const char* op, const char* what, bool convert) {
  DL_CHECK(t.defined(), op, ": ", what, " is missing");
  DL_CHECK(t.device() == p.device(), op, ": expected ", what, " on the parameter's device (",
           p.device(), "), got ", t.device());
  DL_CHECK(t.shape() == p.shape(), op, ": expected ", what, " of the parameter's shape ", p.shape(),
           ", got ", t.shape());
  if (convert) {
    Tensor c = t.dtype() == p.dtype() ? t : cast(t, p.dtype());
    // A gradient laid out unlike its parameter (a Linear weight's arrives transposed) is
    // made contiguous first: one tiled copy, then the update streams through memory.
    return p.is_contiguous() && !c.is_contiguous() ? contiguous(c) : c;
  }
  DL_CHECK_KIND(Type, t.dtype() == p.dtype(), op, ": expected ", what, " of the parameter's dtype ",
                dtype_name(p.dtype()), ", got ", dtype_name(t.dtype()));
  return t;
}

void check_param(const Tensor& p, const char* op) {
  DL_CHECK(p.defined(), op, ": the parameter is missing");
  DL_CHECK_KIND(Type, p.is_floating(), op, ": expected a floating-point parameter, got ",
                dtype_name(p.dtype()));
}

// Writes a float32 working copy back into the half tensor it was made from.
void write_back(const Tensor& half, const Tensor& work) {
  if (!half.defined() || half.dtype() == work.dtype()) return;
  Tensor dst = half;
  copy_(dst, work);
}

}  // namespace

void sgd_step_(const Tensor& p, const Tensor& g, const Tensor& buf, const fn::SgdStep& s) {
  const char* op = "sgd_step";
  check_param(p, op);
  if (any_half({&p, &buf})) {   // updated in float32 (Note [Half-precision storage])
    Tensor pw = widened(p), bw = widened(buf);
    sgd_step_(pw, widened(g), bw, s);
    write_back(p, pw);
    if (s.momentum != 0) write_back(buf, bw);
    return;
  }
  Tensor gc = checked(p, g, op, "the gradient", true);
  Tensor b = s.momentum != 0 ? checked(p, buf, op, "the momentum buffer", false) : p;
  if (p.numel() == 0) return;
  kernel(p.device(), &Backend::sgd_step, op)(p, gc, b, s);
  p.storage().bump_version();
  if (s.momentum != 0) b.storage().bump_version();
}

void adam_step_(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
                const fn::AdamStep& s) {
  const char* op = "adam_step";
  check_param(p, op);
  if (any_half({&p, &m, &v, &vmax})) {   // updated in float32 (Note [Half-precision storage])
    Tensor pw = widened(p), mw = widened(m), vw = widened(v), xw = widened(vmax);
    adam_step_(pw, widened(g), mw, vw, xw, s);
    write_back(p, pw);
    write_back(m, mw);
    write_back(v, vw);
    write_back(vmax, xw);
    return;
  }
  Tensor gc = checked(p, g, op, "the gradient", true);
  checked(p, m, op, "the first moment (exp_avg)", false);
  checked(p, v, op, "the second moment (exp_avg_sq)", false);
  if (vmax.defined()) checked(p, vmax, op, "the amsgrad maximum (max_exp_avg_sq)", false);
  DL_CHECK(s.bias_correction1 > 0 && s.bias_correction2_sqrt > 0, op,
           ": the bias corrections must be positive (a step count of at least 1)");
  if (p.numel() == 0) return;
  kernel(p.device(), &Backend::adam_step, op)(p, gc, m, v, vmax, s);
  for (const Tensor* t : {&p, &m, &v, &vmax})
    if (t->defined()) t->storage().bump_version();
}

}  // namespace dl

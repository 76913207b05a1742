// The Fourier transforms, recorded (tensor/spectral.cpp): each is linear, and the adjoint
// of the unnormalised transform is the transform of the other sign, so its gradient is
// that transform of the incoming gradient (Note [Complex values as pairs] in tensor/fft.h);
// fft_r2c and fft_c2r with one weight are each other's adjoints (Note [A real signal's
// transform] in tensor/cpu/fft.cpp).
#include "autograd/record.h"

namespace dl::ag {

Tensor fft_c2c(const Tensor& x, bool inverse) {
  Tensor y = dl::fft_c2c(x, inverse);
  Ref<Node> n = maybe_node(Op::FftC2c, {&x});
  if (!n) return y;
  n->attrs.i[0] = inverse;
  return finish(n, y);
}
template <> Grads derivative<Op::FftC2c>(Node& n, const TensorList& g) {
  return {ag::fft_c2c(g[0], n.attrs.i[0] == 0)};
}


Tensor fft_r2c(const Tensor& x, int64_t weight) {
  Tensor y = dl::fft_r2c(x, weight);
  Ref<Node> n = maybe_node(Op::FftR2c, {&x});
  if (!n) return y;
  n->attrs.i[0] = x.size(x.dim() - 1);
  n->attrs.i[1] = weight;
  return finish(n, y);
}
template <> Grads derivative<Op::FftR2c>(Node& n, const TensorList& g) {
  return {ag::fft_c2r(g[0], n.attrs.i[0], n.attrs.i[1])};
}

Tensor fft_c2r(const Tensor& y, int64_t n, int64_t weight) {
  Tensor x = dl::fft_c2r(y, n, weight);
  Ref<Node> node = maybe_node(Op::FftC2r, {&y});
  if (!node) return x;
  node->attrs.i[0] = weight;
  return finish(node, x);
}
template <> Grads derivative<Op::FftC2r>(Node& n, const TensorList& g) {
  return {ag::fft_r2c(g[0], n.attrs.i[0])};
}

}  // namespace dl::ag

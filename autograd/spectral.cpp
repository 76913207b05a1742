// The Fourier transform, recorded (tensor/spectral.cpp): it is linear, and the adjoint
// of the unnormalised transform is the transform of the other sign, so its gradient is
// that transform of the incoming gradient (Note [Complex values as pairs] in tensor/fft.h).
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

}  // namespace dl::ag

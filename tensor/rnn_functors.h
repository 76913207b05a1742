// The per-element math of an LSTM step's gates, written once for the CPU kernels
// (tensor/cpu/recurrent.cpp) and the CUDA ones (gpu/recurrent.cu) (docs/design.md,
// "Kernel math written once"). Gates in PyTorch's order i, f, g, o; a, the
// pre-activations (x W_ih^T + b_ih + h W_hh^T + b_hh), one hidden unit at a time.
#pragma once
#include "tensor/functors.h"

namespace dl::fn {

template <typename T>
struct LstmState {
  T h, c;
};
template <typename T>
struct LstmGrads {
  T ai, af, ag, ao, c;
};

// c' = f c + i g, h' = o tanh(c'); i, f, o sigmoids and g a tanh of their a.
struct LstmGates {
  template <typename T>
  DL_HD LstmState<T> operator()(T ai, T af, T ag, T ao, T c) const {
    const T i = SigmoidFn{}(ai), f = SigmoidFn{}(af), g = TanhFn{}(ag), o = SigmoidFn{}(ao);
    const T cn = f * c + i * g;
    return {o * TanhFn{}(cn), cn};
  }
};

// The gradients of the four pre-activations and of c from gh and gc, the gradients of
// h' and c'. The activations and c' are computed again from a and c (as the forward
// did), which is cheaper than saving them: the gates' pre-activations are kept anyway.
struct LstmGatesBackward {
  template <typename T>
  DL_HD LstmGrads<T> operator()(T ai, T af, T ag, T ao, T c, T gh, T gc) const {
    const T i = SigmoidFn{}(ai), f = SigmoidFn{}(af), g = TanhFn{}(ag), o = SigmoidFn{}(ao);
    const T tc = TanhFn{}(f * c + i * g);
    const T gcn = gh * o * (T(1) - tc * tc) + gc;   // the whole gradient of c'
    return {gcn * g * i * (T(1) - i), gcn * c * f * (T(1) - f), gcn * i * (T(1) - g * g),
            gh * tc * o * (T(1) - o), gcn * f};
  }
};

}  // namespace dl::fn

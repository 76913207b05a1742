// CPU kernels of an LSTM step's pointwise half (contracts in tensor/kernels.def, "neural
// networks"; the math is fn::LstmGates and fn::LstmGatesBackward). Every tensor is
// contiguous: gates (R, 4H), the others (R, H). A row's four gate blocks are read side by
// side, unit j of each at once, so the loop over j is a plain vectorisable loop; float32
// runs in loops built for AVX2 and AVX-512 too (Note [Wide loops for float
// exponentials] in pointwise.cpp: the gates' sigmoids and tanhs are that polynomial).
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/rnn_functors.h"

namespace dl::cpu {

namespace {

// Row r's four gate blocks (i, f, g, o) of a (R, 4H) tensor; the loops read unit j of
// each at once.
template <typename P>
struct GateRow {
  P* i;
  P* f;
  P* g;
  P* o;
};
template <typename P>
[[gnu::always_inline]] inline GateRow<P> gate_row(P* a, int64_t r, int64_t H) {
  P* p = a + r * 4 * H;
  return {p, p + H, p + 2 * H, p + 3 * H};
}

template <typename T>
[[gnu::always_inline]] inline void forward_rows(const T* a, const T* c, T* h, T* c2, int64_t H, int64_t b,
                                                int64_t e) {
  for (int64_t r = b; r < e; ++r) {
    const GateRow<const T> x = gate_row(a, r, H);
    const T* cr = c + r * H;
    T* hr = h + r * H;
    T* cr2 = c2 + r * H;
    // The outputs overlap no input; without the pragma GCC gives up on the loop (more
    // run-time alias checks than it will version for).
#pragma GCC ivdep
    for (int64_t j = 0; j < H; ++j) {
      const fn::LstmState<T> s = fn::LstmGates{}(x.i[j], x.f[j], x.g[j], x.o[j], cr[j]);
      hr[j] = s.h;
      cr2[j] = s.c;
    }
  }
}

template <typename T>
[[gnu::always_inline]] inline void backward_rows(const T* a, const T* c, const T* gh, const T* gc, T* da, T* dc,
                                                 int64_t H, int64_t b, int64_t e) {
  for (int64_t r = b; r < e; ++r) {
    const GateRow<const T> x = gate_row(a, r, H);
    const GateRow<T> d = gate_row(da, r, H);
    const T* cr = c + r * H;
    const T* ghr = gh + r * H;
    const T* gcr = gc + r * H;
    T* dcr = dc + r * H;
    // As in forward_rows.
#pragma GCC ivdep
    for (int64_t j = 0; j < H; ++j) {
      const fn::LstmGrads<T> v = fn::LstmGatesBackward{}(x.i[j], x.f[j], x.g[j], x.o[j], cr[j], ghr[j], gcr[j]);
      d.i[j] = v.ai;
      d.f[j] = v.af;
      d.g[j] = v.ag;
      d.o[j] = v.ao;
      dcr[j] = v.c;
    }
  }
}

DL_TARGET_CLONES void forward_float(const float* a, const float* c, float* h, float* c2, int64_t H, int64_t b,
                                    int64_t e) {
  forward_rows(a, c, h, c2, H, b, e);
}
DL_TARGET_CLONES void backward_float(const float* a, const float* c, const float* gh, const float* gc, float* da,
                                     float* dc, int64_t H, int64_t b, int64_t e) {
  backward_rows(a, c, gh, gc, da, dc, H, b, e);
}

// Roughly the elements' worth of work a unit costs (five exponentials in each direction).
constexpr double kUnitWork = 16;

template <typename T>
void forward(const Tensor& h, const Tensor& c2, const Tensor& gates, const Tensor& c) {
  const int64_t R = c.size(0), H = c.size(1);
  const T *pa = gates.data<T>(), *pc = c.data<T>();
  T *ph = h.data<T>(), *pc2 = c2.data<T>();
  parallel_units(R, kUnitWork * double(R * H), [&](int64_t b, int64_t e, int) {
    if constexpr (std::is_same_v<T, float>) forward_float(pa, pc, ph, pc2, H, b, e);
    else forward_rows(pa, pc, ph, pc2, H, b, e);
  });
}

template <typename T>
void backward(const Tensor& dgates, const Tensor& dc, const Tensor& gates, const Tensor& c, const Tensor& gh,
              const Tensor& gc) {
  const int64_t R = c.size(0), H = c.size(1);
  const T *pa = gates.data<T>(), *pc = c.data<T>(), *pgh = gh.data<T>(), *pgc = gc.data<T>();
  T *pda = dgates.data<T>(), *pdc = dc.data<T>();
  parallel_units(R, kUnitWork * double(R * H), [&](int64_t b, int64_t e, int) {
    if constexpr (std::is_same_v<T, float>) backward_float(pa, pc, pgh, pgc, pda, pdc, H, b, e);
    else backward_rows(pa, pc, pgh, pgc, pda, pdc, H, b, e);
  });
}

}  // namespace

void lstm_gates(const Tensor& h, const Tensor& c2, const Tensor& gates, const Tensor& c) {
  DL_DISPATCH_FLOAT(c.dtype(), "lstm_gates", forward<scalar_t>(h, c2, gates, c));
}

void lstm_gates_backward(const Tensor& dgates, const Tensor& dc, const Tensor& gates, const Tensor& c,
                         const Tensor& gh, const Tensor& gc) {
  DL_DISPATCH_FLOAT(c.dtype(), "lstm_gates", backward<scalar_t>(dgates, dc, gates, c, gh, gc));
}

}  // namespace dl::cpu

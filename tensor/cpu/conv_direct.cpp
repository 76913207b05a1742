// Direct float32 convolution, stride 1, one group (contract in conv_direct.h).
//
// Note [Direct convolution]
// With few output channels, im2col + GEMM is a poor fit: the column matrix is kh kw
// times the input (written, then read back), and a product with 16 rows keeps BLAS's
// kernels far from their peak (the first layer of bench/'s `cnn` row; docs/
// performance.md, "Measurements behind the code"). Here each output is accumulated in
// registers straight from the input:
//
// - The sample is copied once into a zero-padded buffer of (Hp, Wp) planes, and the
//   output is computed on a grid Ho x Wp, as wide as the padded input: then output
//   position q = oy Wp + ox reads input q + (ki dh Wp + kj dw) of each plane, one
//   offset (`shift`) per (channel, tap), so a tile of consecutive positions is one
//   unaligned vector load per tap, whatever its row. The Wp - Wo columns past each
//   row's end are computed and thrown away (2 of 26 for a 3x3 kernel on 24-pixel rows).
// - A tile is OB output channels by NV vectors of positions, OB NV accumulators in
//   registers; per (channel, tap) it loads NV input vectors and OB broadcast weights
//   (the weight reordered to (C kh kw, O)) for OB NV multiply-adds.
// - Vectors are GCC/clang vector extensions, compiled three times, picked when first
//   used: AVX-512 (16 floats, 8 x 3 accumulators), AVX2 with FMA (8 floats, 4 x 3) and
//   the x86-64 baseline, SSE2 (4 floats, 4 x 3), so each keeps its accumulators in the
//   16 or 32 vector registers it has. This file is compiled with -ffp-contract=fast:
//   a multiply-add is fused where the instruction set has one, as BLAS's kernels do.
//   The result differs from the im2col path by the order and rounding of its sums only.
// - An unpadded sample followed by the rest of its batch is read in place: its last
//   tiles read into the next sample, which reaches only thrown-away outputs. The weight
//   gradient always works on a copy: there a thrown-away position adds 0 times what it
//   reads, which is NaN if that is an infinity. (Within a sample the same can happen: a
//   thrown-away column reads the start of the next row, so an infinite input can make
//   a neighbouring tap's weight gradient NaN where im2col's would have stayed finite;
//   the loss is infinite or NaN by then.)
#include "tensor/cpu/conv_direct.h"

#include "tensor/cpu/loops.h"  // copy_run
#include "tensor/cpu/vec.h"

#include <algorithm>
#include <atomic>

namespace dl::cpu {

namespace {

constexpr int64_t kMaxOutputs = 64;  // beyond this, GEMMs do better
constexpr int64_t kMaxTaps = 4096;   // C kh kw: the weight's reordered copy stays in L1/L2
const float kZeros[kMaxOutputs] = {};

#if defined(__GNUC__) && !defined(__CUDACC__)
#define DL_INLINE __attribute__((always_inline)) inline
#else
#define DL_INLINE inline
#endif

// W floats (tensor/cpu/vec.h).
template <int W>
using VecOf = typename Vec<float, 4 * W>::V;

// Note [Vectors in registers]
// The kernels below keep every vector in a register only when each is a value: a vector
// read through std::memcpy into an array, or a broadcast written `V{} + w`, was
// compiled (GCC 12, AVX2) as 16-byte copies through the stack and a scalar addition (+0
// turns -0 into +0, so it cannot be folded), with the accumulators spilled: the forward
// ran at a fraction of the rate it has with them in registers (bench/ `cnn`;
// docs/performance.md, "Measurements behind the code"). Loads are typed vector loads
// (vec.h); broadcasts add -0 (in `tile`).

// v, loaded once: GCC folded a vector's load into each multiply-add that reads it
// (OB loads of the same address in wtile), which made the weight gradient's loop
// wait on loads. An empty asm that takes v in a register keeps the one load.
template <typename V>
DL_INLINE void in_register(V& v) {
#if defined(__x86_64__) && defined(__GNUC__)
  asm("" : "+x"(v));
#else
  (void)v;
#endif
}

// OB output rows (stride ldo) of NV W positions: ye[o][q..] = bias[o] + sum over
// (channel, tap) ct of wt[ct][o] * xp[q + shift[ct]].
template <int W, int OB, int NV>
DL_INLINE void tile(const float* xp, const int64_t* shift, int64_t taps, const float* wt, int64_t O,
                    const float* bias, float* ye, int64_t ldo) {
  using V = VecOf<W>;
  static_assert(sizeof(V) == 4 * W);
  V acc[OB][NV];
  for (int o = 0; o < OB; ++o) {
    // bias[o] in every lane, once a tile: `+ -V{}` as for the weights below made GCC
    // 12 see acc as maybe uninitialised here; +0 added turns a -0 bias into +0, which
    // no sum tells apart.
    const V b = V{} + bias[o];
    for (int j = 0; j < NV; ++j) acc[o][j] = b;
  }
  for (int64_t ct = 0; ct < taps; ++ct) {
    const float* x = xp + shift[ct];
    V xv[NV];
    for (int j = 0; j < NV; ++j) xv[j] = load<4 * W>(x + j * W);
    const float* w = wt + ct * O;
    for (int o = 0; o < OB; ++o) {
      // w[o] in every lane: added to -0, which leaves every value as it is (-0 and
      // NaN included), so the addition folds away and w[o] is broadcast straight from
      // memory, a load only (as in small_gemm.cpp's tiles). Not `V{} + w[o]`, which
      // must add (+0 turns -0 into +0): GCC 12 built that, in the AVX-512 build, as a
      // scalar addition and a register broadcast per weight, on the two ports the
      // multiply-adds need (docs/performance.md, "Direct convolution with AVX-512").
      // The same expression in a helper function was assembled lane by lane there.
      const V wb = w[o] + -V{};
      for (int j = 0; j < NV; ++j) acc[o][j] += wb * xv[j];
    }
  }
  for (int o = 0; o < OB; ++o)
    for (int j = 0; j < NV; ++j) store<4 * W>(ye + o * ldo + j * W, acc[o][j]);
}

// Every tile of the output grid: tiles of positions outside, so that their input
// vectors are reused from L1 by every block of output channels.
template <int W, int OB, int NV>
DL_INLINE void all_tiles(const DirectConv& d, const float* xp, const float* wt, const int64_t* shift,
                         const float* bias, float* ye) {
  constexpr int64_t kTile = int64_t(W) * NV;
  for (int64_t q = 0; q < d.ldo; q += kTile) {
    int64_t o = 0;
    for (; o + OB <= d.O; o += OB)
      tile<W, OB, NV>(xp + q, shift, d.taps, wt + o, d.O, bias + o, ye + o * d.ldo + q, d.ldo);
    for (; o < d.O; ++o) tile<W, 1, NV>(xp + q, shift, d.taps, wt + o, d.O, bias + o, ye + o * d.ldo + q, d.ldo);
  }
}

// The weight gradient of one sample, accumulated transposed and in lanes: the W lanes
// of acc[ct][o] (W floats) += the lanes of the sum over q of ge[o][q] * xp[q +
// shift[ct]], with ge the output gradient on the same Ho x Wp grid, zero in the
// thrown-away columns. A tile is OB output channels by TB (channel, tap) pairs, OB TB
// vector accumulators added to acc at the end; the lanes are summed once, after the
// last sample (direct_conv_weight_grad_total): summed here, W - 1 scalar additions an
// accumulator against a loop of only Ho Wp / W steps, they were a large part of the
// kernel's time (docs/performance.md, "Direct convolution with AVX-512").
template <int W, int OB, int TB>
DL_INLINE void wtile(const float* xp, const float* ge, const int64_t* shift, int64_t ldo, float* acc, int64_t O) {
  using V = VecOf<W>;
  V part[OB][TB];
  for (int o = 0; o < OB; ++o)
    for (int t = 0; t < TB; ++t) part[o][t] = V{};
  for (int64_t q = 0; q < ldo; q += W) {
    V g[OB];
    for (int o = 0; o < OB; ++o) g[o] = load<4 * W>(ge + o * ldo + q);
    for (int t = 0; t < TB; ++t) {
      V xv = load<4 * W>(xp + shift[t] + q);
      in_register(xv);
      for (int o = 0; o < OB; ++o) part[o][t] += g[o] * xv;
    }
  }
  for (int o = 0; o < OB; ++o)
    for (int t = 0; t < TB; ++t) {
      float* a = acc + (t * O + o) * W;
      store<4 * W>(a, load<4 * W>(a) + part[o][t]);
    }
}

// Every (output channels, taps) tile: output channels outside, so that a block's rows of
// ge (OB Ho Wp floats) stay in L1 while every tap reads them; the input planes are read
// once per block. (Taps outside read all of ge, O Ho Wp floats, from L2 for every block
// of taps: 24 times a sample for a 16-channel 3x3 layer.)
template <int W, int OB, int TB>
DL_INLINE void wtiles_of(const DirectConv& d, const float* xp, const float* ge, const int64_t* shift, float* acc) {
  int64_t ct = 0;
  for (; ct + TB <= d.taps; ct += TB) wtile<W, OB, TB>(xp, ge, shift + ct, d.ldo, acc + ct * d.O * W, d.O);
  for (; ct < d.taps; ++ct) wtile<W, OB, 1>(xp, ge, shift + ct, d.ldo, acc + ct * d.O * W, d.O);
}

template <int W, int OB, int TB>
DL_INLINE void all_wtiles(const DirectConv& d, const float* xp, const float* ge, const int64_t* shift, float* acc) {
  int64_t o = 0;
  for (; o + OB <= d.O; o += OB) wtiles_of<W, OB, TB>(d, xp, ge + o * d.ldo, shift, acc + o * W);
  for (; o < d.O; ++o) wtiles_of<W, 1, TB>(d, xp, ge + o * d.ldo, shift, acc + o * W);
}

using RunFn = void (*)(const DirectConv&, const float*, const float*, const int64_t*, const float*, float*);
using WRunFn = void (*)(const DirectConv&, const float*, const float*, const int64_t*, float*);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
#define DL_CONV_X86 1
__attribute__((target("avx512f"))) void run_avx512(const DirectConv& d, const float* xp, const float* wt,
                                                   const int64_t* shift, const float* bias, float* ye) {
  all_tiles<16, 8, 3>(d, xp, wt, shift, bias, ye);
}
__attribute__((target("avx512f"))) void wrun_avx512(const DirectConv& d, const float* xp, const float* ge,
                                                    const int64_t* shift, float* acc) {
  all_wtiles<16, 4, 6>(d, xp, ge, shift, acc);
}
__attribute__((target("avx2,fma"))) void run_avx2(const DirectConv& d, const float* xp, const float* wt,
                                                  const int64_t* shift, const float* bias, float* ye) {
  all_tiles<8, 4, 3>(d, xp, wt, shift, bias, ye);
}
__attribute__((target("avx2,fma"))) void wrun_avx2(const DirectConv& d, const float* xp, const float* ge,
                                                   const int64_t* shift, float* acc) {
  all_wtiles<8, 2, 5>(d, xp, ge, shift, acc);
}
#endif
void run_base(const DirectConv& d, const float* xp, const float* wt, const int64_t* shift, const float* bias,
              float* ye) {
  all_tiles<4, 4, 3>(d, xp, wt, shift, bias, ye);
}
void wrun_base(const DirectConv& d, const float* xp, const float* ge, const int64_t* shift, float* acc) {
  all_wtiles<4, 2, 5>(d, xp, ge, shift, acc);
}

struct Variant {
  const char* name;
  int64_t tile;   // positions a tile covers
  int64_t lanes;  // floats a vector holds
  RunFn run;
  WRunFn wrun;
};

// The variants this CPU can run, best first.
struct Variants {
  Variant v[3];
  int n = 0;
  Variants() {
#ifdef DL_CONV_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) v[n++] = {"avx512", 48, 16, run_avx512, wrun_avx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) v[n++] = {"avx2", 24, 8, run_avx2, wrun_avx2};
#endif
    v[n++] = {"baseline", 12, 4, run_base, wrun_base};
  }
};
const Variants& variants() {
  static const Variants vs;
  return vs;
}
std::atomic<int> g_variant{0};

}  // namespace

int direct_conv_variants() { return variants().n; }
const char* direct_conv_use(int i) {
  const Variants& vs = variants();
  i = std::clamp(i, 0, vs.n - 1);
  g_variant.store(i, std::memory_order_relaxed);
  return vs.v[i].name;
}

namespace {
int64_t round_lines(int64_t floats) { return (floats + 15) / 16 * 16; }
}  // namespace

bool direct_conv_suits(int64_t C, int64_t O, int64_t kh, int64_t kw) {
  return O <= kMaxOutputs && kh * kw > 1 && C * kh * kw <= kMaxTaps;
}

DirectConv direct_conv_plan(int64_t C, int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw, int64_t ph,
                            int64_t pw, int64_t dh, int64_t dw) {
  DirectConv d{};
  d.C = C; d.H = H; d.W = W; d.O = O; d.kh = kh; d.kw = kw;
  d.ph = ph; d.pw = pw; d.dh = dh; d.dw = dw;
  d.Hp = H + 2 * ph;
  d.Wp = W + 2 * pw;
  d.Ho = d.Hp - dh * (kh - 1);
  d.Wo = d.Wp - dw * (kw - 1);
  d.taps = C * kh * kw;
  d.variant = g_variant.load(std::memory_order_relaxed);
  const int64_t tile = variants().v[d.variant].tile;
  d.ldo = (d.Ho * d.Wp + tile - 1) / tile * tile;
  // The last tile of the last plane reads up to ldo - 1 + its largest shift.
  d.xp_len = std::max(C * d.Hp * d.Wp, (C - 1) * d.Hp * d.Wp + dh * (kh - 1) * d.Wp + dw * (kw - 1) + d.ldo);
  // Every buffer starts on a 64-byte line (as the scratch does): the weight gradient's
  // loads of the output gradient are then aligned (docs/performance.md, "Direct
  // convolution with AVX-512").
  d.xp_len = round_lines(d.xp_len);
  d.scratch_len = round_lines(d.xp_len + O * d.ldo);
  d.lanes = variants().v[d.variant].lanes;
  d.acc_len = round_lines(d.taps * O * d.lanes);
  d.wt_len = round_lines(d.taps * O);
  return d;
}

void direct_conv_prepare(const DirectConv& d, const float* w, float* wt, int64_t* shift) {
  const int64_t T = d.kh * d.kw, plane = d.Hp * d.Wp;
  if (w)
    for (int64_t o = 0; o < d.O; ++o)
      for (int64_t ct = 0; ct < d.taps; ++ct) wt[ct * d.O + o] = w[o * d.taps + ct];
  for (int64_t c = 0; c < d.C; ++c)
    for (int64_t ki = 0; ki < d.kh; ++ki)
      for (int64_t kj = 0; kj < d.kw; ++kj) shift[c * T + ki * d.kw + kj] = c * plane + ki * d.dh * d.Wp + kj * d.dw;
}

namespace {

// The padded planes of x into xp, every element written once; then the tail the last
// tiles read (zeros: what thrown-away columns read must not be a slow denormal).
void pad_input(const DirectConv& d, const float* x, float* xp) {
  float* p = xp;
  for (int64_t c = 0; c < d.C; ++c) {
    std::fill(p, p + d.ph * d.Wp, 0.0f);
    p += d.ph * d.Wp;
    for (int64_t r = 0; r < d.H; ++r) {
      std::fill(p, p + d.pw, 0.0f);
      copy_run(p + d.pw, x + (c * d.H + r) * d.W, d.W);
      std::fill(p + d.pw + d.W, p + d.Wp, 0.0f);
      p += d.Wp;
    }
    std::fill(p, p + d.ph * d.Wp, 0.0f);
    p += d.ph * d.Wp;
  }
  std::fill(p, xp + d.xp_len, 0.0f);
}

// The padded sample the kernels read: x itself when it needs no padding and what the
// tiles read past it is readable, else its copy in scratch.
const float* padded(const DirectConv& d, const float* x, int64_t readable, float* scratch) {
  if (d.ph == 0 && d.pw == 0 && readable >= d.xp_len) return x;
  pad_input(d, x, scratch);
  return scratch;
}

}  // namespace

void direct_conv_sample(const DirectConv& d, const float* x, int64_t readable, const float* wt,
                        const int64_t* shift, const float* bias, float* y, float* scratch) {
  const float* xp = padded(d, x, readable, scratch);
  float* ye = scratch + d.xp_len;
  variants().v[d.variant].run(d, xp, wt, shift, bias ? bias : kZeros, ye);
  for (int64_t o = 0; o < d.O; ++o)
    for (int64_t r = 0; r < d.Ho; ++r)
      copy_run(y + (o * d.Ho + r) * d.Wo, ye + o * d.ldo + r * d.Wp, d.Wo);
}

void direct_conv_weight_grad_sample(const DirectConv& d, const float* x, const float* gy, const int64_t* shift,
                                    float* acc, float* scratch) {
  float* xp = scratch;
  float* ge = scratch + d.xp_len;
  pad_input(d, x, xp);
  for (int64_t o = 0; o < d.O; ++o) {
    float* row = ge + o * d.ldo;
    for (int64_t r = 0; r < d.Ho; ++r) {
      copy_run(row + r * d.Wp, gy + (o * d.Ho + r) * d.Wo, d.Wo);
      std::fill(row + r * d.Wp + d.Wo, row + (r + 1) * d.Wp, 0.0f);
    }
    std::fill(row + d.Ho * d.Wp, row + d.ldo, 0.0f);
  }
  variants().v[d.variant].wrun(d, xp, ge, shift, acc);
}

void direct_conv_weight_grad_total(const DirectConv& d, const float* acc, float* acc_t) {
  const int64_t n = d.taps * d.O;
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int64_t l = 0; l < d.lanes; ++l) s += acc[i * d.lanes + l];
    acc_t[i] = s;  // in place: entry i's lanes start at i lanes >= i, read already
  }
}

}  // namespace dl::cpu

// Direct float32 convolution with stride 1 and one group, for layers with few output
// channels (tensor/cpu/conv.cpp picks it; Note [Direct convolution] in
// conv_direct.cpp). One sample at a time: the caller runs samples on its threads.
#pragma once
#include <cstdint>

namespace dl::cpu {

struct DirectConv {
  int64_t C, H, W, O, kh, kw, ph, pw, dh, dw;  // input (C, H, W), weight (O, C, kh, kw)
  int64_t Hp, Wp, Ho, Wo;                      // padded input, output
  int64_t taps;                                // C kh kw
  int64_t ldo;                                 // an output row block: Ho Wp, rounded up to a tile
  // Floats, each a whole number of 64-byte lines: the padded input, then the whole
  // scratch; the reordered weight; a weight gradient's partial sums, `lanes` floats
  // an entry (the kernels' vector width).
  int64_t xp_len, scratch_len, wt_len, acc_len, lanes;
  int variant;                                 // the kernels planned for (direct_conv_use)
};

// Whether the direct kernels serve C input and O output channels with a kh x kw kernel
// (stride 1 and one group assumed; the image size bounds only the scratch, which the
// caller checks against the plan's scratch_len, and acc_len for a weight gradient), and
// the plan.
bool direct_conv_suits(int64_t C, int64_t O, int64_t kh, int64_t kw);
DirectConv direct_conv_plan(int64_t C, int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw,
                            int64_t ph, int64_t pw, int64_t dh, int64_t dw);

// The weight (O, C, kh, kw) reordered to (C kh kw, O) into `wt` (wt_len floats; skipped
// when w is null), and each tap's offset in the padded input into `shift` (taps entries).
void direct_conv_prepare(const DirectConv& d, const float* w, float* wt, int64_t* shift);

// y (O, Ho, Wo) = the convolution of one sample x (C, H, W), plus bias (O floats, or
// null); `scratch` holds d.scratch_len floats. `readable`: how many floats from x on
// may be read (the rest of the batch); an unpadded sample followed by enough of them
// is read in place instead of copied (what its last tiles read past it only feeds
// outputs that are thrown away).
void direct_conv_sample(const DirectConv& d, const float* x, int64_t readable, const float* wt,
                        const int64_t* shift, const float* bias, float* y, float* scratch);

// acc (C kh kw, O, d.lanes) += the weight gradient of one sample x (C, H, W) given its
// output gradient gy (O, Ho, Wo): the weight's gradient transposed, as
// direct_conv_prepare lays the weight out, each entry kept as d.lanes partial sums (the
// kernel's vector lanes; acc holds d.acc_len floats, zero before the first sample);
// `scratch` holds d.scratch_len floats. (x is always copied here: a thrown-away position
// contributes 0 times what it reads, which must not be the next sample's infinity.)
void direct_conv_weight_grad_sample(const DirectConv& d, const float* x, const float* gy, const int64_t* shift,
                                    float* acc, float* scratch);

// acc_t (C kh kw, O) = the sums of acc's partial sums, after the last sample; acc_t may
// be acc itself (its first C kh kw O floats).
void direct_conv_weight_grad_total(const DirectConv& d, const float* acc, float* acc_t);

// The kernel variants this CPU can run (AVX-512, AVX2 with FMA, baseline: those it
// supports, best first) and, for tests, which one later plans use (0: the best);
// returns its name.
int direct_conv_variants();
const char* direct_conv_use(int variant);

}  // namespace dl::cpu

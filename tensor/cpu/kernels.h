// The CPU kernels behind dl::cpu_backend() (see tensor/backend.h for the contract).
#pragma once
#include "tensor/ops.h"
#include "tensor/optim_functors.h"
#include "tensor/random.h"

namespace dl::fused { struct Program; }

namespace dl::cpu {

void unary(Op op, const Tensor& out, const Tensor& x);
void binary(Op op, const Tensor& out, const Tensor& a, const Tensor& b);
void binary_scalar(Op op, const Tensor& out, const Tensor& a, double s, bool scalar_first);
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
void clamp(const Tensor& out, const Tensor& x, double lo, double hi);
void copy(const Tensor& out, const Tensor& src);
// Contiguous float32 <-> float16/bfloat16 conversions (tensor/cpu/half.cpp). `vector`
// false runs the portable rounding for float16 even where F16C exists (for tests).
void half_from_float(DType to, const float* s, void* d, int64_t n, bool vector = true);
void half_to_float(DType from, const void* s, float* d, int64_t n, bool vector = true);
// copy() of a contiguous float32 tensor into a half one of the same size or back, as
// one vector loop; false (nothing done) for anything else.
bool convert_half(const Tensor& out, const Tensor& src);
void fill(const Tensor& out, double value);
// tensor/cpu/fused.cpp
void fused(const fused::Program& p, int device_index);

// reductions (tensor/cpu/reduce.cpp)
void reduce(Op op, const Tensor& out, const Tensor& x, const std::vector<int>& dims,
            const ReduceOpts& opts);
void arg_reduce(Op op, const Tensor& values, const Tensor& indices, const Tensor& x, int dim);
void softmax(Op op, const Tensor& out, const Tensor& x, int dim);
void scan(Op op, const Tensor& out, const Tensor& x, int dim, bool reverse);

// sorting and selection (tensor/cpu/sorting.cpp)
void sort(const Tensor& indices, const Tensor& x, bool descending);
void nonzero(const Tensor& out, const Tensor& x);
void searchsorted(const Tensor& out, const Tensor& seq, const Tensor& values, bool right);
// indexing and linear algebra (tensor/cpu/index.cpp, tensor/cpu/matmul.cpp)
void cat(const Tensor& out, const TensorList& xs, int dim);
void index_select(const Tensor& out, const Tensor& x, int dim, const Tensor& index);
void gather(const Tensor& out, const Tensor& x, int dim, const Tensor& index);
void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src);
void matmul(const Tensor& out, const Tensor& a, const Tensor& b);
// decompositions and solves (tensor/cpu/lapack.cpp)
void linalg(Op op, const TensorList& outs, const TensorList& ins, const LinalgOpts& o);

// random numbers (tensor/cpu/random.cpp)
void random(const Tensor& out, const fn::RandomSpec& spec);

// optim.cpp
void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const fn::SgdStep& s);
void adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
               const fn::AdamStep& s);

}  // namespace dl::cpu

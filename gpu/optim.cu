// CUDA kernels of the fused optimizer updates (tensor/optim.h): the rules of
// tensor/optim_functors.h, the very functions the CPU kernels run, once per element.
#include "gpu/loops.cuh"
#include "tensor/optim_functors.h"

namespace dl::gpu {

namespace {

template <typename T>
struct SgdOp {
  fn::SgdStep f;
  fn::SgdStep::Consts<T> c;
  __device__ void operator()(char* const (&p)[3], int64_t) const {
    f(c, *reinterpret_cast<T*>(p[0]), *reinterpret_cast<const T*>(p[1]), *reinterpret_cast<T*>(p[2]));
  }
};

template <typename T>
struct AdamOp {
  fn::AdamStep f;
  bool amsgrad;
  __device__ void operator()(char* const (&p)[5], int64_t) const {
    f(*reinterpret_cast<T*>(p[0]), *reinterpret_cast<const T*>(p[1]), *reinterpret_cast<T*>(p[2]),
      *reinterpret_cast<T*>(p[3]), amsgrad ? reinterpret_cast<T*>(p[4]) : nullptr);
  }
};

}  // namespace

void sgd_step(const Tensor& p, const Tensor& g, const Tensor& buf, const fn::SgdStep& s) {
  const DeviceContext& c = activate(p, "sgd_step");
  DL_DISPATCH_FLOAT(p.dtype(), "sgd_step", {
    launch_elementwise<3>(c, make_geom<3>({&p, &g, &buf}), SgdOp<scalar_t>{s, s.consts<scalar_t>()}, "sgd_step");
  });
}

void adam_step(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
               const fn::AdamStep& s) {
  const DeviceContext& c = activate(p, "adam_step");
  const bool ams = vmax.defined();
  DL_DISPATCH_FLOAT(p.dtype(), "adam_step", {
    launch_elementwise<5>(c, make_geom<5>({&p, &g, &m, &v, ams ? &vmax : &v}), AdamOp<scalar_t>{s, ams},
                          "adam_step");
  });
}

}  // namespace dl::gpu

// Which reducer (tensor/reduce_functors.h) each reduction op runs, and in which dtypes:
// one switch for every backend. A backend's reduce() hands it a runner with three
// members, its own loops over the plan (tensor/geometry.h):
//   template <typename Out, typename R> void plain(R r);        one pass, results in Out
//   template <typename T, typename R1, typename R2>
//   void centered(R1 first, R2 second);                         a first pass (a mean, a max)
//                                                               that the second centres on
//   template <typename T> void norm(double p);                  the p-norm
#pragma once
#include "tensor/dtype.h"
#include "tensor/ops.h"
#include "tensor/reduce_functors.h"

namespace dl {

template <typename Runner>
void dispatch_reduction(Op op, DType dt, const ReduceOpts& opts, Runner& run) {
  const char* name = op_name(op);
  switch (op) {
    case Op::Sum:
      DL_DISPATCH_ALL(dt, name, run.template plain<fn::sum_out_t<scalar_t>>(fn::SumRed<scalar_t>{}));
      return;
    case Op::Prod:
      DL_DISPATCH_ALL(dt, name, run.template plain<fn::sum_out_t<scalar_t>>(fn::ProdRed<scalar_t>{}));
      return;
    case Op::Mean:
      DL_DISPATCH_FLOAT(dt, name, run.template plain<scalar_t>(fn::MeanRed<scalar_t>{}));
      return;
    case Op::Amax:
      DL_DISPATCH_ALL(dt, name, run.template plain<scalar_t>(fn::AmaxRed<scalar_t>{}));
      return;
    case Op::Amin:
      DL_DISPATCH_ALL(dt, name, run.template plain<scalar_t>(fn::AminRed<scalar_t>{}));
      return;
    case Op::Var:
    case Op::Std:
      DL_DISPATCH_FLOAT(dt, name, {
        fn::VarRed<scalar_t> r;
        r.correction = opts.correction;
        r.take_sqrt = op == Op::Std;
        run.template centered<scalar_t>(fn::MeanRed<scalar_t>{}, r);
      });
      return;
    case Op::Norm:
      DL_DISPATCH_FLOAT(dt, name, run.template norm<scalar_t>(opts.p));
      return;
    case Op::Logsumexp:
      DL_DISPATCH_FLOAT(dt, name, run.template centered<scalar_t>(fn::AmaxRed<scalar_t>{}, fn::LogsumexpRed<scalar_t>{}));
      return;
    case Op::Any:
      DL_DISPATCH_ALL(dt, name, run.template plain<bool>(fn::AnyRed<scalar_t>{}));
      return;
    case Op::All:
      DL_DISPATCH_ALL(dt, name, run.template plain<bool>(fn::AllRed<scalar_t>{}));
      return;
    default:
      break;
  }
  fail(ErrorKind::Internal, "reduce: not a reduction: ", name);
}

}  // namespace dl

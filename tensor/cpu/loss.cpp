// CPU kernel of the fused log-softmax cross-entropy. Contract in tensor/kernels.def
// ("neural networks").
//
// Each row's loss is logsumexp(row) - row[target], with the row's maximum taken out
// before exponentiating, so logits of any finite size (1e4, 1e30) neither overflow
// nor lose the answer; the sum of exponentials is accumulated in double. Rows are
// split between threads; a bad target is reported after the threads are done (an
// exception must not leave an OpenMP region).
#include <atomic>
#include <cmath>

#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace dl::cpu {

namespace {

template <typename T>
void rows(const Tensor& loss, const Tensor& logits, const Tensor& target, std::optional<int64_t> ignore) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const T* px = logits.data<T>();
  const int64_t* pt = target.data<int64_t>();
  T* pl = loss.data<T>();
  std::atomic<bool> any_bad{false};
  std::atomic<int64_t> bad{0};
  parallel_units(N, 2 * N * C, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t t = pt[i];
      if (ignore && t == *ignore) {
        pl[i] = T(0);
        continue;
      }
      if (t < 0 || t >= C) {
        bad.store(t, std::memory_order_relaxed);
        any_bad.store(true, std::memory_order_relaxed);
        pl[i] = T(0);
        continue;
      }
      const T* row = px + i * C;
      T m = row[0];
      for (int64_t j = 1; j < C; ++j) m = row[j] > m ? row[j] : m;
      double sum = 0;
      for (int64_t j = 0; j < C; ++j) sum += std::exp(double(row[j]) - double(m));
      pl[i] = T(double(m) + std::log(sum) - double(row[t]));
    }
  });
  if (any_bad.load())
    fail(ErrorKind::Index, "cross_entropy: target ", bad.load(), " is out of range for ", C,
         " classes (expected 0..", C - 1, ")");
}

}  // namespace

void cross_entropy(const Tensor& loss, const Tensor& logits, const Tensor& target,
                   std::optional<int64_t> ignore_index) {
  DL_DISPATCH_FLOAT(logits.dtype(), "cross_entropy", rows<scalar_t>(loss, logits, target, ignore_index));
}

}  // namespace dl::cpu

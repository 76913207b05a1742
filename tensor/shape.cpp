#include "tensor/shape.h"

#include <limits>

namespace dl {

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '(';
  for (int i = 0; i < s.size(); ++i) {
    if (i) os << ", ";
    os << s[i];
  }
  if (s.size() == 1) os << ',';
  return os << ')';
}

int64_t checked_numel(const Shape& s, const char* op) {
  bool empty = false;
  for (int64_t d : s) {
    DL_CHECK(d >= 0, op, ": negative dimension ", d, " in shape ", s);
    empty = empty || d == 0;
  }
  if (empty) return 0;  // however large the other dims: (2^62, 4, 0) is empty
  int64_t n = 1;
  for (int64_t d : s) {
    if (__builtin_mul_overflow(n, d, &n))
      fail(ErrorKind::Memory, op, ": shape ", s, " has too many elements");
  }
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st;
  st.resize(s.size());
  int64_t acc = 1;
  for (int i = s.size() - 1; i >= 0; --i) {
    st[i] = acc;
    // Only an empty tensor's shape can overflow here (checked_numel refuses others),
    // e.g. (0, 2^62, 4); its strides address nothing, so saturating is harmless.
    if (__builtin_mul_overflow(acc, s[i] > 0 ? s[i] : 1, &acc)) acc = std::numeric_limits<int64_t>::max();
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int n = a.size() > b.size() ? a.size() : b.size();
  Shape out;
  out.resize(n);
  for (int i = 0; i < n; ++i) {
    int ia = a.size() - n + i, ib = b.size() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    DL_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
             " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int wrap_dim(int64_t dim, int ndim, const char* op) {
  int64_t n = ndim > 0 ? ndim : 1;
  DL_CHECK_KIND(Index, dim >= -n && dim < n, op, ": dimension ", dim,
                " out of range for a tensor of ", ndim, " dimension", ndim == 1 ? "" : "s");
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

}  // namespace dl

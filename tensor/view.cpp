// Shape ops: views that share the input's storage, computed from sizes, strides and
// the offset alone (no kernel runs). reshape() and flatten() copy only when no view
// of the input has the requested shape.
//
//   Tensor x = arange(0, 6, 1, DType::Float32);
//   Tensor m = view(x, {2, -1});           // (2, 3), same storage
//   Tensor c = select(transpose(m, 0, 1), 0, 2);   // m[:, 2], offset 2, stride 3
//
// Every function returns a new TensorImpl (make_view) even when the geometry does not
// change, so that a caller recording views (autograd/) always sees a distinct output.
// Dims are 0-based, negative ones count from the end (wrap_dim); a 0-dim tensor is
// accepted wherever PyTorch accepts one, with dim 0 / -1 naming its implicit dim.
#include <algorithm>
#include <optional>

#include "tensor/backend.h"
#include "tensor/observe.h"

namespace dl {

namespace {

int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
  return r;
}

Tensor same_view(const Tensor& x) { return make_view(x, x.shape(), x.strides(), x.offset()); }

}  // namespace

Shape infer_size(const Shape& shape, int64_t numel, const char* op) {
  int infer = -1;
  Shape known = shape;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      DL_CHECK(infer < 0, op, ": only one dimension can be inferred (-1), got shape ", shape);
      infer = i;
      known[i] = 1;
    } else {
      DL_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in shape ", shape);
    }
  }
  int64_t product = checked_numel(known, op);
  Shape out = shape;
  if (infer >= 0) {
    // With a zero in the other sizes any value would fit: refuse to guess.
    DL_CHECK(product != 0, op, ": cannot infer the -1 in shape ", shape, " for an input of size ",
             numel, " (with a zero-size dimension any size fits)");
    DL_CHECK(numel % product == 0, op, ": shape ", shape, " is invalid for an input of size ", numel);
    out[infer] = numel / product;
  } else {
    DL_CHECK(product == numel, op, ": shape ", shape, " is invalid for an input of size ", numel);
  }
  return out;
}

Layout transpose_layout(Layout x, int d0, int d1) {
  if (x.sizes.size() == 0) return x;   // a 0-dim tensor's implicit dim
  std::swap(x.sizes[d0], x.sizes[d1]);
  std::swap(x.strides[d0], x.strides[d1]);
  return x;
}

Layout squeeze_layout(const Layout& x, std::optional<int> d) {
  Layout out;
  for (int i = 0; i < x.sizes.size(); ++i) {
    if (x.sizes[i] == 1 && (!d || *d == i)) continue;
    out.sizes.push_back(x.sizes[i]);
    out.strides.push_back(x.strides[i]);
  }
  return out;
}

Layout unsqueeze_layout(Layout x, int d) {
  // The stride keeps the result contiguous when x is (any value would be valid, so it
  // saturates rather than overflow for a huge empty dim).
  const int n = x.sizes.size();
  const int64_t stride = d < n ? saturating_mul(x.sizes[d], x.strides[d]) : 1;
  x.sizes.insert(d, 1);
  x.strides.insert(d, stride);
  return x;
}

// Strides that make `new_sizes` a view of a tensor with (`sizes`, `strides`), or
// nothing when none exist (PyTorch's computeStride). The old dims are split into
// chunks that are each contiguous in memory; every new dim must fall inside one chunk.
std::optional<Shape> compute_stride(const Shape& sizes, const Shape& strides,
                                    const Shape& new_sizes) {
  Shape out;
  out.resize(new_sizes.size());
  if (sizes.empty()) {  // a 0-dim tensor: any shape of one element views it
    for (int i = 0; i < out.size(); ++i) out[i] = 1;
    return out;
  }
  const int64_t numel = checked_numel(sizes, "view");  // (an empty shape's product can overflow)
  if (numel == 0) {
    if (sizes == new_sizes) return strides;
    // Nothing can be read through any stride: use the contiguous ones.
    return contiguous_strides(new_sizes);
  }
  int view_d = new_sizes.size() - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = sizes.size() - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    // The chunk ends where the next-outer dim is not laid out right after this one.
    // (Products saturate: a size-1 dim's stride can be anything a host lent, even 2^63 - 1,
    // and a saturated stride only ever lands on a size-1 dim of the view.)
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != saturating_mul(tensor_numel, chunk_base_stride))) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = saturating_mul(view_numel, chunk_base_stride);
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

namespace {
Tensor view_impl(const Tensor& x, const Shape& shape) {
  Shape sizes = infer_size(shape, x.numel(), "view");
  std::optional<Shape> strides = compute_stride(x.shape(), x.strides(), sizes);
  DL_CHECK(strides.has_value(), "view: shape ", shape, " is not compatible with the input's size ",
           x.shape(), " and stride ", x.strides(),
           " (a new dimension would span memory that is not contiguous); use reshape");
  return make_view(x, sizes, *strides, x.offset());
}
}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  return observed([&] { return view_impl(x, shape); },
                  [&](Observed& o) { o.fn = Fn::View; o.in[0] = &x; o.nin = 1; o.shape = shape; });
}

namespace {
Tensor reshape_impl(const Tensor& x, const Shape& shape) {
  Shape sizes = infer_size(shape, x.numel(), "reshape");
  if (std::optional<Shape> strides = compute_stride(x.shape(), x.strides(), sizes))
    return make_view(x, sizes, *strides, x.offset());
  // No view exists: a fresh tensor (not a view of a temporary) with x's values in
  // row-major order, copied through a throwaway view of it shaped like x.
  Tensor out = empty(sizes, x.dtype(), x.device(), "reshape");
  Tensor dst = make_view(out, x.shape(), contiguous_strides(x.shape()), 0);
  backend_for(x.device(), "reshape").copy(dst, x);
  return out;
}
}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  return observed([&] { return reshape_impl(x, shape); },
                  [&](Observed& o) { o.fn = Fn::Reshape; o.in[0] = &x; o.nin = 1; o.shape = shape; });
}

namespace {
Tensor transpose_impl(const Tensor& x, int d0, int d1) {
  int a = wrap_dim(d0, x.dim(), "transpose"), b = wrap_dim(d1, x.dim(), "transpose");
  const Layout l = transpose_layout({x.shape(), x.strides()}, a, b);
  return make_view(x, l.sizes, l.strides, x.offset());
}
}  // namespace

Tensor transpose(const Tensor& x, int d0, int d1) {
  return observed([&] { return transpose_impl(x, d0, d1); },
                  [&](Observed& o) { o.fn = Fn::Transpose; o.in[0] = &x; o.nin = 1; o.dims = {d0, d1}; });
}

static Tensor permute_impl(const Tensor& x, const std::vector<int>& order) {
  int n = x.dim();
  DL_CHECK(int(order.size()) == n, "permute: expected an order of ", n, " dims for a tensor of shape ",
           x.shape(), ", got ", order.size());
  Shape sizes, strides;
  bool seen[kMaxDims] = {};
  for (int d : order) {
    int w = wrap_dim(d, n, "permute");
    DL_CHECK(!seen[w], "permute: dim ", pos(d), " appears twice in the order");
    seen[w] = true;
    sizes.push_back(x.size(w));
    strides.push_back(x.stride(w));
  }
  return make_view(x, sizes, strides, x.offset());
}

Tensor permute(const Tensor& x, const std::vector<int>& order) {
  return observed_other("permute", [&] { return permute_impl(x, order); }, [&](Observed& o, const Tensor&) {
    o.ins = {&x};
    o.ints.assign(order.begin(), order.end());
  });
}

namespace {
// x's offset moved k steps along dim d. Only an empty view can reach past every element
// (a start equal to the size, or a size-1 dim whose stride is a saturated placeholder),
// and its offset addresses nothing: it keeps x's own rather than overflow.
int64_t moved_offset(const Tensor& x, int d, int64_t k) {
  int64_t step = 0, off = 0;
  if (__builtin_mul_overflow(k, x.stride(d), &step) || __builtin_add_overflow(x.offset(), step, &off))
    return x.offset();
  return off;
}
}  // namespace

static Tensor narrow_impl(const Tensor& x, int dim, int64_t start, int64_t length) {
  DL_CHECK(x.dim() > 0, "narrow: cannot be applied to a 0-dim tensor");
  int d = wrap_dim(dim, x.dim(), "narrow");
  int64_t size = x.size(d);
  DL_CHECK_KIND(Index, start >= -size && start <= size, "narrow: start ", start,
                " out of range for dimension ", pos(d), " of size ", size);
  if (start < 0) start += size;
  DL_CHECK_KIND(Index, length >= 0 && length <= size - start, "narrow: start (", pos(start),
                ") + length (", length, ") exceeds dimension ", pos(d), " of size ", size);
  Shape sizes = x.shape();
  sizes[d] = length;
  return make_view(x, sizes, x.strides(), moved_offset(x, d, start));
}

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  return observed_other("narrow", [&] { return narrow_impl(x, dim, start, length); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {dim, start, length}; });
}

static Tensor slice_impl(const Tensor& x, int dim, int64_t start, int64_t stop, int64_t step) {
  DL_CHECK(x.dim() > 0, "slice: cannot be applied to a 0-dim tensor");
  int d = wrap_dim(dim, x.dim(), "slice");
  DL_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t size = x.size(d);
  // Python's slice clamping: negative bounds count from the end, then clamp to [0, size].
  auto clamp_bound = [size](int64_t v) {
    if (v < 0) v = v < -size ? 0 : v + size;
    return v > size ? size : v;
  };
  start = clamp_bound(start);
  stop = std::max(clamp_bound(stop), start);
  int64_t len = (stop - start) / step + ((stop - start) % step != 0);
  Shape sizes = x.shape(), strides = x.strides();
  sizes[d] = len;
  // The stride times the step, as PyTorch has it. When that overflows (a huge step
  // such as INT64_MAX) at most one element is selected and the stride is never used.
  if (__builtin_mul_overflow(strides[d], step, &strides[d])) strides[d] = x.stride(d);
  return make_view(x, sizes, strides, moved_offset(x, d, start));
}

Tensor slice(const Tensor& x, int dim, int64_t start, int64_t stop, int64_t step) {
  return observed_other("slice", [&] { return slice_impl(x, dim, start, stop, step); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {dim, start, stop, step}; });
}

static Tensor select_impl(const Tensor& x, int dim, int64_t index) {
  DL_CHECK(x.dim() > 0, "select: cannot be applied to a 0-dim tensor");
  int d = wrap_dim(dim, x.dim(), "select");
  int64_t size = x.size(d);
  DL_CHECK_KIND(Index, index >= -size && index < size, "select: index ", pos(index),
                " is out of range for dimension ", pos(d), " of size ", size, " (shape ", x.shape(), ")");
  if (index < 0) index += size;
  Shape sizes = x.shape(), strides = x.strides();
  sizes.erase(d);
  strides.erase(d);
  return make_view(x, sizes, strides, moved_offset(x, d, index));
}

Tensor select(const Tensor& x, int dim, int64_t index) {
  return observed_other("select", [&] { return select_impl(x, dim, index); },
                        [&](Observed& o, const Tensor&) { o.ins = {&x}; o.ints = {dim, index}; });
}

namespace {
Tensor expand_impl(const Tensor& x, const Shape& shape) {
  int n = shape.size(), xd = x.dim();
  DL_CHECK(n >= xd, "expand: the number of sizes given (", n,
           ") must be at least the tensor's number of dimensions (", xd, "); shape ", x.shape(),
           " cannot expand to ", shape);
  Shape sizes, strides;
  sizes.resize(n);
  strides.resize(n);
  // PyTorch's inferExpandGeometry, from the last dim backwards.
  for (int i = n - 1; i >= 0; --i) {
    int j = i - (n - xd);
    int64_t size = j >= 0 ? x.size(j) : 1;
    // A new leading dim's stride only matters when its size stays 1 (where any value
    // addresses nothing new): saturate rather than overflow.
    int64_t stride = j >= 0 ? x.stride(j) : (i + 1 < n ? saturating_mul(sizes[i + 1], strides[i + 1]) : 1);
    int64_t target = shape[i];
    if (target == -1) {
      DL_CHECK(j >= 0, "expand: size -1 is not allowed in the new leading dimension ", pos(i),
               " (shape ", x.shape(), " to ", shape, ")");
      target = size;
    }
    DL_CHECK(target >= 0, "expand: invalid size ", target, " at dimension ", pos(i), " (shape ",
             x.shape(), " to ", shape, ")");
    if (size != target) {
      DL_CHECK(size == 1, "expand: the size ", target, " must match the existing size ", size,
               " at non-singleton dimension ", pos(i), " (shape ", x.shape(), " to ", shape, ")");
      size = target;
      stride = 0;
    }
    sizes[i] = size;
    strides[i] = stride;
  }
  checked_numel(sizes, "expand");
  return make_view(x, sizes, strides, x.offset());
}
}  // namespace

Tensor expand(const Tensor& x, const Shape& shape) {
  return observed([&] { return expand_impl(x, shape); },
                  [&](Observed& o) { o.fn = Fn::Expand; o.in[0] = &x; o.nin = 1; o.shape = shape; });
}

namespace {
Tensor squeeze_impl(const Tensor& x, std::optional<int> dim) {
  std::optional<int> d;   // a dim whose size is not 1: a no-op, not an error (PyTorch)
  if (dim) d = wrap_dim(*dim, x.dim(), "squeeze");
  const Layout l = squeeze_layout({x.shape(), x.strides()}, d);
  return make_view(x, l.sizes, l.strides, x.offset());
}
}  // namespace

Tensor squeeze(const Tensor& x, std::optional<int> dim) {
  return observed([&] { return squeeze_impl(x, dim); },
                  [&](Observed& o) { o.fn = Fn::Squeeze; o.in[0] = &x; o.nin = 1; if (dim) o.dims = {*dim}; });
}

namespace {
Tensor unsqueeze_impl(const Tensor& x, int dim) {
  int n = x.dim();
  int d = wrap_dim(dim, n + 1, "unsqueeze");
  DL_CHECK(n < kMaxDims, "unsqueeze: shape ", x.shape(), " already has the maximum of ", kMaxDims,
           " dimensions");
  const Layout l = unsqueeze_layout({x.shape(), x.strides()}, d);
  return make_view(x, l.sizes, l.strides, x.offset());
}
}  // namespace

Tensor unsqueeze(const Tensor& x, int dim) {
  return observed([&] { return unsqueeze_impl(x, dim); },
                  [&](Observed& o) { o.fn = Fn::Unsqueeze; o.in[0] = &x; o.nin = 1; o.dims = {dim}; });
}

Tensor flatten(const Tensor& x, int start_dim, int end_dim) {
  int n = x.dim();
  int s = wrap_dim(start_dim, n, "flatten"), e = wrap_dim(end_dim, n, "flatten");
  if (n == 0) return make_view(x, Shape{1}, Shape{1}, x.offset());
  DL_CHECK(s <= e, "flatten: start_dim ", pos(start_dim), " cannot come after end_dim ", pos(end_dim),
           " (for a tensor of shape ", x.shape(), ")");
  if (s == e) return same_view(x);
  Shape sizes;
  for (int i = 0; i < s; ++i) sizes.push_back(x.size(i));
  int64_t merged = 1;
  for (int i = s; i <= e; ++i)
    DL_CHECK(!__builtin_mul_overflow(merged, x.size(i), &merged), "flatten: dimensions ", pos(s), " to ",
             pos(e), " of shape ", x.shape(), " hold more than 2^63 - 1 elements together");
  sizes.push_back(merged);
  for (int i = e + 1; i < n; ++i) sizes.push_back(x.size(i));
  return reshape(x, sizes);
}

// ---- strided views of a contiguous layout, and their adjoint (embed) ------------------------

// Checks that the region (sizes, strides, offset) lies in a contiguous layout of `numel`
// elements (an empty region anywhere); true when it is empty.
static bool check_region(const char* op, int64_t numel, const Shape& sizes, const Shape& strides, int64_t offset) {
  DL_CHECK(strides.size() == sizes.size(), op, ": ", sizes.size(), " sizes but ", strides.size(), " strides");
  bool empty = false, overflow = false, overlap = false;
  int64_t last = offset;
  DL_CHECK(offset >= 0 && offset <= numel, op, ": the region's offset ", offset, " lies outside the ", numel,
           " elements it is taken of");
  for (int d = 0; d < sizes.size(); ++d) {
    DL_CHECK(sizes[d] >= 0 && strides[d] >= 0, op, ": a negative size or stride in the region");
    overlap |= strides[d] == 0 && sizes[d] > 1;
    if (sizes[d] == 0) empty = true;
    int64_t step;
    overflow |= __builtin_mul_overflow(sizes[d] > 0 ? sizes[d] - 1 : 0, strides[d], &step);
    overflow |= __builtin_add_overflow(last, step, &last);
  }
  DL_CHECK(empty || (!overflow && last < numel), op, ": the region (offset ", offset,
           ") lies outside the ", numel, " elements it is taken of");
  // (a view of a layout never meets an element twice: embed's writes could not agree)
  DL_CHECK(empty || !overlap, op, ": a region that meets an element twice (a stride of 0)");
  return empty;
}

static Tensor strided_view_impl(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
  check_region("strided_view", t.numel(), sizes, strides, offset);
  Tensor c = contiguous(t);
  return make_view(c, sizes, strides, c.offset() + offset);
}

Tensor strided_view(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
  return observed_other("strided_view", [&] { return strided_view_impl(t, sizes, strides, offset); },
                        [&](Observed& o, const Tensor&) {
                          o.ins = {&t};
                          o.ints = {int64_t(sizes.size())};
                          o.ints.insert(o.ints.end(), sizes.begin(), sizes.end());
                          o.ints.insert(o.ints.end(), strides.begin(), strides.end());
                          o.ints.push_back(offset);
                        });
}

static Tensor embed_impl(const Tensor& g, const Shape& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  const char* op = "embed";
  DL_CHECK(g.shape() == sizes, op, ": the values have shape ", g.shape(), ", the region ", sizes);
  const bool empty = check_region(op, checked_numel(base, op), sizes, strides, offset);
  Tensor z = zeros(base, g.dtype(), g.device());
  if (!empty) {
    Tensor region = make_view(z, sizes, strides, offset);
    copy_(region, g);
  }
  return z;
}

Tensor embed(const Tensor& g, const Shape& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  return observed_other("embed", [&] { return embed_impl(g, base, sizes, strides, offset); },
                        [&](Observed& o, const Tensor&) {
                          o.ins = {&g};
                          o.ints = {int64_t(base.size()), int64_t(sizes.size())};
                          o.ints.insert(o.ints.end(), base.begin(), base.end());
                          o.ints.insert(o.ints.end(), sizes.begin(), sizes.end());
                          o.ints.insert(o.ints.end(), strides.begin(), strides.end());
                          o.ints.push_back(offset);
                        });
}

}  // namespace dl

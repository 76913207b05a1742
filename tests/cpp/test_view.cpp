// Shape ops (tensor/view.cpp) against PyTorch: values, strides and storage offsets of
// every view (ref/view_ref.inc), aliasing through fill_/copy_, and every error path.
#include <array>
#include <limits>

#include "ref/ref_check.h"
#include "ref/view_ref.inc"

using namespace dl;

namespace {

Tensor x234() { return from_ref(ref::x234, DType::Float32); }

// The twins of tests/ref/gen_view_refs.py's N, T, P and s.
Tensor n_of(const Tensor& x) { return slice(x, 2, 0, 2, 1); }      // X[:, :, :2]
Tensor t_of(const Tensor& x) { return transpose(x, 0, 2); }        // X.transpose(0, 2)
Tensor p_of(const Tensor& x) { return permute(x, {2, 0, 1}); }     // X.permute(2, 0, 1)
Tensor s_of(const Tensor& x) { return select(select(select(x, 0, 1), 0, 2), 0, 3); }  // X[1, 2, 3]

constexpr int64_t kBig = std::numeric_limits<int64_t>::max();

}  // namespace

TEST_CASE("view and reshape match torch, including views of non-contiguous tensors", "[view]") {
  Tensor x = x234();
  check_ref(view(x, {4, -1}), ref::view_4m1);
  check_ref(view(n_of(x), {6, 2}), ref::view_n_62);
  check_ref(view(n_of(x), {2, 3, 1, 2}), ref::view_n_2312);
  check_ref(view(select(x, 1, 1), {2, 2, 2}), ref::view_sel_222);
  check_ref(view(p_of(x), {4, 6}), ref::view_perm_46);
  check_ref(view(x, {1, 24, 1}), ref::view_111);

  Tensor r = reshape(n_of(x), {6, 2});  // a view exists
  check_ref(r, ref::reshape_n_62);
  CHECK(r.same_storage(x));
  Tensor c = reshape(n_of(x), {2, 6});  // none does: a copy
  check_ref(c, ref::reshape_n_26);
  CHECK_FALSE(c.same_storage(x));
  Tensor ct = reshape(t_of(x), {-1});
  check_ref(ct, ref::reshape_t_m1);
  CHECK_FALSE(ct.same_storage(x));
}

TEST_CASE("transpose, permute, narrow, slice and select match torch", "[view]") {
  Tensor x = x234();
  check_ref(transpose(x, 0, 2), ref::transpose_02);
  check_ref(transpose(x, -1, 0), ref::transpose_m1_0);
  check_ref(transpose(narrow(x, 2, 1, 2), 1, 2), ref::transpose_of_narrow);
  check_ref(p_of(x), ref::permute_201);
  check_ref(permute(x, {-1, 0, 1}), ref::permute_201);
  check_ref(permute(t_of(x), {1, 2, 0}), ref::permute_of_t);

  check_ref(narrow(x, 2, 1, 2), ref::narrow_2_1_2);
  check_ref(narrow(x, 1, -1, 1), ref::narrow_1_m1_1);
  check_ref(select(narrow(narrow(x, 2, 1, 3), 1, 1, 2), 0, 1), ref::narrow_chain);

  check_ref(slice(x, 2, 1, 4, 2), ref::slice_step2);
  check_ref(slice(x, 1, -2, kBig, 1), ref::slice_neg_start);
  check_ref(slice(x, 1, 1, 100, 1), ref::slice_clamped_stop);
  check_ref(slice(x, 2, 3, 1, 1), ref::slice_empty);
  check_ref(slice(x, 2, 0, kBig, 3), ref::slice_step3);
  check_ref(slice(slice(x, 2, 1, kBig, 1), 2, 0, kBig, 2), ref::slice_of_slice);
  check_ref(slice(t_of(x), 0, 1, 4, 2), ref::slice_of_t);
  check_ref(slice(x, 2, -3, -1, 1), ref::slice_neg_both);
  // Python clamping: a start before the beginning and a huge step.
  Tensor one = slice(x, 2, -100, kBig, kBig);
  CHECK(one.shape() == Shape{2, 3, 1});
  CHECK(one.offset() == 0);

  check_ref(select(x, 1, -1), ref::select_1_m1);
  check_ref(select(x, 0, 1), ref::select_0_1);
  check_ref(select(t_of(x), 2, 1), ref::select_of_t);
}

TEST_CASE("expand, squeeze, unsqueeze and flatten match torch", "[view]") {
  Tensor x = x234();
  check_ref(expand(slice(x, 1, 0, 1, 1), {2, 5, 4}), ref::expand_mid);
  check_ref(expand(select(select(x, 0, 0), 0, 0), {3, 2, 4}), ref::expand_lead);
  check_ref(expand(slice(x, 1, 0, 1, 1), {-1, 3, -1}), ref::expand_keep);
  check_ref(expand(x, {1, 2, 3, 4}), ref::expand_new1);
  check_ref(expand(s_of(x), {2, 3}), ref::expand_scalar);

  Tensor row = slice(x, 1, 0, 1, 1);  // (2, 1, 4)
  check_ref(squeeze(row, std::nullopt), ref::squeeze_all);
  check_ref(squeeze(row, 1), ref::squeeze_1);
  check_ref(squeeze(row, -2), ref::squeeze_1);
  check_ref(squeeze(x, 0), ref::squeeze_noop);

  check_ref(unsqueeze(x, 1), ref::unsqueeze_1);
  check_ref(unsqueeze(x, -1), ref::unsqueeze_m1);
  check_ref(unsqueeze(x, 0), ref::unsqueeze_0);
  check_ref(unsqueeze(n_of(x), 2), ref::unsqueeze_n_2);

  check_ref(flatten(x), ref::flatten_all);
  check_ref(flatten(x, 1), ref::flatten_1);
  check_ref(flatten(x, 0, 1), ref::flatten_01);
  check_ref(flatten(t_of(x)), ref::flatten_t);
  check_ref(flatten(t_of(x), 0, 1), ref::flatten_t_01);
  CHECK(flatten(x).same_storage(x));
  CHECK_FALSE(flatten(t_of(x)).same_storage(x));
}

TEST_CASE("0-dim tensors", "[view]") {
  Tensor x = x234();
  Tensor s = s_of(x);
  check_ref(s, ref::scalar);
  check_ref(view(s, {1, 1}), ref::scalar_view11);
  check_ref(unsqueeze(s, 0), ref::scalar_unsqueeze);
  check_ref(unsqueeze(s, -1), ref::scalar_unsqueeze);
  check_ref(flatten(s), ref::scalar_flatten);
  check_ref(view(s, {-1}), ref::scalar_flatten);
  check_ref(view(s, Shape{}), ref::scalar);
  check_ref(transpose(s, 0, -1), ref::scalar);
  check_ref(permute(s, {}), ref::scalar);
  check_ref(squeeze(s, std::nullopt), ref::scalar);
  check_ref(squeeze(s, 0), ref::scalar);
  check_ref(expand(s, Shape{}), ref::scalar);
  check_ref(reshape(s, Shape{}), ref::scalar);
  // And back: a one-element tensor viewed as 0-dim.
  Tensor back = view(narrow(flatten(x), 0, 23, 1), Shape{});
  CHECK(back.dim() == 0);
  CHECK(back.offset() == 23);
  CHECK(back.item() == 23);
  CHECK_THAT(error_of([&] { narrow(s, 0, 0, 1); }), Contains("narrow: cannot be applied to a 0-dim"));
  CHECK_THAT(error_of([&] { select(s, 0, 0); }), Contains("select: cannot be applied to a 0-dim"));
  CHECK_THAT(error_of([&] { slice(s, 0, 0, 1, 1); }), Contains("slice: cannot be applied to a 0-dim"));
  CHECK_THAT(error_of([&] { transpose(s, 0, 1); }), StartsWith("transpose: dimension 1 out of range"));
  CHECK_THAT(error_of([&] { unsqueeze(s, 1); }), StartsWith("unsqueeze: dimension 1 out of range"));
  CHECK_THAT(error_of([&] { squeeze(s, 1); }), StartsWith("squeeze: dimension 1 out of range"));
  CHECK_THAT(error_of([&] { flatten(s, 0, 1); }), StartsWith("flatten: dimension 1 out of range"));
  CHECK_THAT(error_of([&] { view(s, {2}); }), StartsWith("view: shape (2,) is invalid for an input of size 1"));
}

TEST_CASE("views alias their base: writes through them change it", "[view]") {
  Tensor x = x234();
  Tensor col = select(transpose(x, 1, 2), 1, 3);  // x[:, :, 3] as (2, 3)
  fill_(col, Scalar(-1.0));
  int64_t i0[] = {1, 2, 3}, i1[] = {0, 0, 3}, i2[] = {0, 0, 2};
  CHECK(x.value_at(i0) == -1);
  CHECK(x.value_at(i1) == -1);
  CHECK(x.value_at(i2) == 2);

  // copy_ into a view of a view: offsets accumulate (x[1, 1:3, 1:3] = 100 + ...).
  Tensor block = narrow(narrow(select(x, 0, 1), 0, 1, 2), 1, 1, 2);
  CHECK(block.offset() == 12 + 4 + 1);
  double v[] = {100, 101, 102, 103};
  Tensor src = from_values(v, 4, Shape{2, 2}, DType::Float32);
  copy_(block, src);
  int64_t j0[] = {1, 1, 1}, j1[] = {1, 2, 2}, j2[] = {1, 0, 1}, j3[] = {0, 1, 1};
  CHECK(x.value_at(j0) == 100);
  CHECK(x.value_at(j1) == 103);
  CHECK(x.value_at(j2) == 13);
  CHECK(x.value_at(j3) == 5);

  // The same through view, expand (a stride-0 read) and unsqueeze of a slice.
  Tensor flat = view(x, {-1});
  Tensor e = expand(unsqueeze(slice(flat, 0, 0, 4, 2), 0), {3, 2});
  CHECK(e.strides() == Shape{0, 2});
  fill_(flat, Scalar(7.0));
  int64_t e0[] = {2, 1};
  CHECK(e.value_at(e0) == 7);
  CHECK(x.storage().version() > 0);

  // A reshape that must copy does not alias.
  Tensor c = reshape(transpose(x, 0, 1), {6, 4});
  fill_(c, Scalar(0.0));
  CHECK(x.value_at(i0) == 7);
}

TEST_CASE("view refuses incompatible strides; reshape copies instead", "[view]") {
  Tensor x = x234();
  Tensor n = n_of(x);
  CHECK_THAT(error_of([&] { view(n, {2, 6}); }),
             StartsWith("view: shape (2, 6) is not compatible with the input's size (2, 3, 2) and "
                        "stride (12, 4, 1)") && Contains("use reshape"));
  CHECK_THAT(error_of([&] { view(n, {12}); }), Contains("use reshape"));
  CHECK_THAT(error_of([&] { view(t_of(x), {24}); }), Contains("use reshape"));
  CHECK_THAT(error_of([&] { view(transpose(x, 0, 1), {6, 4}); }), Contains("use reshape"));
  check_values(reshape(transpose(x, 0, 1), {6, 4}),
               {0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9, 10, 11, 20, 21, 22, 23}, 0);
}

TEST_CASE("view and reshape size errors and inference", "[view]") {
  Tensor x = x234();
  CHECK_THAT(error_of([&] { view(x, {-1, -1}); }), StartsWith("view: only one dimension can be inferred"));
  CHECK_THAT(error_of([&] { view(x, {5, -1}); }), StartsWith("view: shape (5, -1) is invalid for an input of size 24"));
  CHECK_THAT(error_of([&] { view(x, {5, 5}); }), StartsWith("view: shape (5, 5) is invalid for an input of size 24"));
  CHECK_THAT(error_of([&] { view(x, {-2, 12}); }), StartsWith("view: invalid size -2"));
  CHECK_THAT(error_of([&] { reshape(x, {7, -1}); }), StartsWith("reshape: shape (7, -1) is invalid"));
  Tensor e = zeros({0, 3}, DType::Float32);
  CHECK(view(e, {-1}).shape() == Shape{0});
  CHECK(view(e, {3, -1}).shape() == Shape{3, 0});
  CHECK(view(e, {3, -1}).strides() == Shape{1, 1});  // torch's
  CHECK_THAT(error_of([&] { view(e, {0, -1}); }), StartsWith("view: cannot infer the -1 in shape (0, -1)"));
  CHECK(reshape(transpose(e, 0, 1), {3, 0, 1}).shape() == Shape{3, 0, 1});
}

TEST_CASE("dim and argument errors of the shape ops", "[view]") {
  Tensor x = x234();
  CHECK_THAT(error_of([&] { transpose(x, 0, 3); }), StartsWith("transpose: dimension 3 out of range"));
  CHECK_THAT(error_of([&] { transpose(x, -4, 0); }), StartsWith("transpose: dimension -4 out of range"));
  CHECK(error_kind_of([&] { transpose(x, 0, 3); }) == ErrorKind::Index);
  CHECK_THAT(error_of([&] { permute(x, {0, 1}); }), StartsWith("permute: expected an order of 3 dims"));
  CHECK_THAT(error_of([&] { permute(x, {0, 1, 1}); }), StartsWith("permute: dim 1 appears twice"));
  CHECK_THAT(error_of([&] { permute(x, {0, 2, -1}); }), StartsWith("permute: dim -1 appears twice"));
  CHECK_THAT(error_of([&] { permute(x, {0, 1, 3}); }), StartsWith("permute: dimension 3 out of range"));

  CHECK_THAT(error_of([&] { narrow(x, 1, 1, 3); }), StartsWith("narrow: start (1) + length (3) exceeds dimension 1 of size 3"));
  CHECK_THAT(error_of([&] { narrow(x, 1, 0, -1); }), StartsWith("narrow: start (0) + length (-1) exceeds"));
  CHECK_THAT(error_of([&] { narrow(x, 1, -4, 1); }), StartsWith("narrow: start -4 out of range for dimension 1 of size 3"));
  CHECK_THAT(error_of([&] { narrow(x, 3, 0, 1); }), StartsWith("narrow: dimension 3 out of range"));
  CHECK(narrow(x, 1, 3, 0).shape() == Shape{2, 0, 4});

  CHECK_THAT(error_of([&] { slice(x, 1, 0, 2, 0); }), StartsWith("slice: step must be positive, got 0"));
  CHECK_THAT(error_of([&] { slice(x, 1, 0, 2, -1); }), StartsWith("slice: step must be positive, got -1"));
  CHECK_THAT(error_of([&] { slice(x, -4, 0, 2, 1); }), StartsWith("slice: dimension -4 out of range"));
  CHECK(slice(x, 1, 5, 9, 1).shape() == Shape{2, 0, 4});

  CHECK_THAT(error_of([&] { select(x, 1, 3); }), StartsWith("select: index 3 is out of range for dimension 1 of size 3"));
  CHECK_THAT(error_of([&] { select(x, 1, -4); }), StartsWith("select: index -4 is out of range for dimension 1 of size 3"));
  CHECK(error_kind_of([&] { select(x, 1, 3); }) == ErrorKind::Index);
  CHECK_THAT(error_of([&] { select(x, 5, 0); }), StartsWith("select: dimension 5 out of range"));

  CHECK_THAT(error_of([&] { expand(x, {3}); }), StartsWith("expand: the number of sizes given (1) must be at least"));
  CHECK_THAT(error_of([&] { expand(x, {2, 4, 4}); }), StartsWith("expand: the size 4 must match the existing size 3 at non-singleton dimension 1"));
  CHECK_THAT(error_of([&] { expand(x, {-1, 2, 3, 4}); }), StartsWith("expand: size -1 is not allowed in the new leading dimension 0"));
  CHECK_THAT(error_of([&] { expand(slice(x, 1, 0, 1, 1), {2, -2, 4}); }), StartsWith("expand: invalid size -2"));
  CHECK(expand(slice(x, 1, 0, 1, 1), {2, 0, 4}).shape() == Shape{2, 0, 4});
  CHECK(expand(x, {0, 2, 3, 4}).numel() == 0);

  CHECK_THAT(error_of([&] { squeeze(x, 3); }), StartsWith("squeeze: dimension 3 out of range"));
  CHECK_THAT(error_of([&] { unsqueeze(x, 4); }), StartsWith("unsqueeze: dimension 4 out of range"));
  CHECK_THAT(error_of([&] { unsqueeze(x, -5); }), StartsWith("unsqueeze: dimension -5 out of range"));
  CHECK(unsqueeze(x, 3).shape() == Shape{2, 3, 4, 1});
  CHECK(unsqueeze(x, -4).shape() == Shape{1, 2, 3, 4});
  Tensor big = zeros({1, 1, 1, 1, 1, 1, 1, 1}, DType::Float32);
  CHECK_THAT(error_of([&] { unsqueeze(big, 0); }), StartsWith("unsqueeze: shape (1, 1, 1, 1, 1, 1, 1, 1) already has the maximum"));

  CHECK_THAT(error_of([&] { flatten(x, 2, 1); }), StartsWith("flatten: start_dim 2 cannot come after end_dim 1"));
  CHECK_THAT(error_of([&] { flatten(x, 0, 3); }), StartsWith("flatten: dimension 3 out of range"));
  CHECK(flatten(x, 1, 1).shape() == x.shape());
  CHECK(flatten(x, -2).shape() == Shape{2, 12});
}

TEST_CASE("every shape op returns a distinct view sharing storage", "[view]") {
  Tensor x = x234();
  Tensor views[] = {view(x, {24}), reshape(x, {4, 6}), transpose(x, 0, 1), permute(x, {0, 1, 2}),
                    narrow(x, 0, 0, 2), slice(x, 0, 0, 2, 1), select(x, 0, 0),
                    expand(x, {2, 3, 4}), squeeze(x, std::nullopt), squeeze(x, 0),
                    unsqueeze(x, 0), flatten(x, 1, 1), flatten(x)};
  for (const Tensor& v : views) {
    CHECK(v.impl() != x.impl());
    CHECK(v.same_storage(x));
    CHECK(v.dtype() == x.dtype());
  }
}

TEST_CASE("expand refuses element counts past int64 and keeps empty shapes empty", "[view]") {
  // (found by tests/fuzz: fuzz_ops, where the element count overflowed in the view)
  Tensor x = ones({1, 1}, DType::Float32);
  CHECK_THAT(error_of([&] { expand(x, {int64_t(1) << 50, 100000}); }),
             Contains("expand: shape (1125899906842624, 100000) has too many elements"));
  CHECK_THAT(error_of([&] { expand(x, {int64_t(1) << 62, 4, 2, 1}); }), Contains("too many elements"));
  Tensor e = expand(ones({0}, DType::Float32), {int64_t(1) << 62, 4, 0});
  CHECK(e.numel() == 0);
  CHECK(checked_numel({int64_t(1) << 62, 4, 0}, "t") == 0);
  CHECK_THAT(error_of([&] { checked_numel({int64_t(1) << 62, 4}, "t"); }), Contains("too many elements"));
}

TEST_CASE("views of size-1 dims with huge strides neither overflow nor misplace elements", "[view]") {
  // unsqueeze after a huge empty dim: the new dim's stride would be 10^5 x (2^63 - 1)
  // (found by tests/fuzz: fuzz_ops, through stack)
  Tensor e = zeros({0, int64_t(1) << 62, 4}, DType::Float32);
  Tensor u = unsqueeze(e, 1);   // stride 2^62 x 4
  CHECK(u.shape() == Shape{0, 1, int64_t(1) << 62, 4});
  CHECK(narrow(u, 1, 1, 0).numel() == 0);
  Tensor x = arange(0, 6, 1, DType::Float32);
  Tensor v = unsqueeze(x, 0);
  CHECK(v.shape() == Shape{1, 6});
  CHECK(narrow(v, 0, 1, 0).numel() == 0);      // empty slice past the end
  CHECK(narrow(v, 0, 0, 1).numel() == 6);
  // a view of an empty shape whose sizes' product overflows before its 0 is reached
  Tensor z = zeros({int64_t(1) << 62, 4, 0}, DType::Float32);
  CHECK(view(z, {0}).numel() == 0);
  CHECK(view(z, {int64_t(1) << 62, 0, 4}).numel() == 0);
  CHECK(flatten(z, 1, 2).shape() == Shape{int64_t(1) << 62, 0});
  CHECK_THAT(error_of([&] { flatten(zeros({0, int64_t(1) << 62, 4}, DType::Float32), 1, 2); }),
             Contains("flatten: dimensions 1 to 2 of shape (0, 4611686018427387904, 4) hold more than "
                      "2^63 - 1 elements together"));
  // a size-1 dim lent with a huge stride (a host's from_blob may do that) still views
  float buf[6] = {0, 1, 2, 3, 4, 5};
  Tensor lent = from_blob(buf, Shape{1, 6}, Shape{kBig, 1}, DType::Float32);
  CHECK(view(lent, {2, 3}).shape() == Shape{2, 3});
  CHECK(view(lent, {6, 1}).value_at(std::array<int64_t, 2>{4, 0}.data()) == 4);
  // strides that reach past 2^63 elements or bytes are refused, not overflowed
  CHECK_THAT(error_of([&] { from_blob(buf, Shape{3}, Shape{int64_t(1) << 62}, DType::Float32); }),
             Contains("from_blob: shape (3,) with strides (4611686018427387904,) reaches past 2^63 elements"));
  CHECK_THAT(error_of([&] { from_blob(buf, Shape{2}, Shape{int64_t(1) << 62}, DType::Float32); }),
             Contains("reaches past 2^63 bytes"));
  int64_t at[] = {0, 5};
  CHECK(select(slice(v, 0, 0, 1, kBig), 0, 0).value_at(at + 1) == 5);
}

TEST_CASE("embed and strided_view: a region's adjoint pair, and regions outside refused", "[view]") {
  Tensor x = x234();
  // the region of X[:, 1, ::2] in X's contiguous layout
  const Shape sizes{2, 2}, strides{12, 2};
  Tensor v = strided_view(x, sizes, strides, 4);
  Tensor want = slice(select(x, 1, 1), 1, 0, 4, 2);
  REQUIRE(v.shape() == want.shape());
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) REQUIRE(select(select(v, 0, i), 0, j).item() == select(select(want, 0, i), 0, j).item());
  Tensor z = embed(v, x.shape(), sizes, strides, 4);
  REQUIRE(z.shape() == x.shape());
  double total = 0, expect = 0;
  for (int64_t i = 0; i < z.numel(); ++i) total += double(contiguous(z).data<float>()[i]);
  for (int64_t i = 0; i < v.numel(); ++i) expect += double(contiguous(v).data<float>()[i]);
  REQUIRE(total == expect);
  // a region past the end, a negative stride or offset, mismatched values: errors
  REQUIRE_THROWS_WITH(strided_view(x, Shape{2, 3}, Shape{12, 4}, 20), Catch::Contains("strided_view: the region"));
  REQUIRE_THROWS_WITH(embed(v, x.shape(), sizes, Shape{12, -2}, 4), Catch::Contains("embed: a negative size or stride"));
  REQUIRE_THROWS_WITH(embed(v, x.shape(), sizes, strides, -1), Catch::Contains("embed: the region"));
  REQUIRE_THROWS_WITH(embed(v, x.shape(), Shape{2, 3}, Shape{12, 2, 1}, 0), Catch::Contains("embed: the values have shape"));
  REQUIRE_THROWS_WITH(embed(v, x.shape(), sizes, Shape{int64_t(1) << 62, 2}, 0), Catch::Contains("embed: the region"));
  // a region meeting an element twice (its writes could not agree), an offset past the end
  REQUIRE_THROWS_WITH(embed(ones(Shape{3}, DType::Float32), x.shape(), Shape{3}, Shape{0}, 0),
                      Catch::Contains("embed: a region that meets an element twice"));
  REQUIRE_THROWS_WITH(strided_view(x, Shape{0, 2}, strides, int64_t(1) << 60), Catch::Contains("strided_view: the region's offset"));
  // an empty region at the end (narrow of length 0 at the last place), and a base with a
  // dim of 0 (its strides are 0 before it)
  REQUIRE(embed(zeros(Shape{0, 2}, DType::Float32), x.shape(), Shape{0, 2}, strides, 24).numel() == x.numel());
  REQUIRE(embed(zeros(Shape{2, 0}, DType::Float32), Shape{2, 0}, Shape{2, 0}, Shape{0, 1}, 0).numel() == 0);
}

// Indexing ops (tensor/index.cpp, tensor/cpu/index.cpp) against PyTorch
// (ref/index_ref.inc), against plain loops on inputs big enough to take the threaded
// paths, and every error path.
#include <cstdlib>

#include "ref/ref_check.h"
#include "ref/index_ref.inc"
#include "tensor/backend.h"

using namespace dl;

namespace {

Tensor f32(const RefTensor& r) { return from_ref(r, DType::Float32); }
Tensor i64(const RefTensor& r) { return from_ref(r, DType::Int64); }

Tensor index_of(std::initializer_list<double> v, DType dt = DType::Int64) {
  std::vector<double> vals(v);
  return from_values(vals.data(), int64_t(vals.size()), Shape{int64_t(vals.size())}, dt);
}

// A deterministic pseudo-random tensor of integers in [lo, hi).
Tensor rand_ints(const Shape& shape, int64_t lo, int64_t hi, DType dt, unsigned seed) {
  int64_t n = checked_numel(shape, "test");
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& e : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    e = double(lo + int64_t((s >> 33) % uint64_t(hi - lo)));
  }
  return from_values(v.data(), n, shape, dt);
}

}  // namespace

TEST_CASE("cat matches torch: promotion, strided inputs, legacy empty tensors", "[index]") {
  Tensor a = f32(ref::a34), c = f32(ref::c24), x = f32(ref::x234);
  Tensor b = from_ref(ref::b32, DType::Int32);
  check_ref(cat({a, c}, 0), ref::cat_0);
  check_ref(cat({a, c}, -2), ref::cat_0);
  Tensor p = cat({a, b}, 1);
  CHECK(p.dtype() == DType::Float32);
  check_ref(p, ref::cat_1_promote);
  CHECK(cat({b, b}, 0).dtype() == DType::Int32);
  CHECK(cat({b, from_ref(ref::b32, DType::Bool)}, 0).dtype() == DType::Int32);
  check_ref(cat({transpose(a, 0, 1), transpose(c, 0, 1)}, 1), ref::cat_t);
  check_ref(cat({zeros({0}, DType::Float64), a, zeros({0}, DType::Float32)}, 1), ref::cat_legacy_empty);
  CHECK(cat({zeros({0}, DType::Float64), a}, 1).dtype() == DType::Float64);
  check_ref(cat({x, slice(x, 2, 0, 1, 1), slice(x, 2, 1, 3, 1)}, 2), ref::cat_3d_last);
  check_ref(cat({slice(x, 1, 0, 2, 1), slice(x, 1, 1, 3, 1)}, 1), ref::cat_3d_mid);
  check_ref(cat({zeros({3, 0}, DType::Float32), a, zeros({3, 0}, DType::Float32)}, 1), ref::a34);
  check_ref(cat({a}, 0), ref::a34);
  CHECK_FALSE(cat({a}, 0).same_storage(a));

  Tensor all_empty = cat({zeros({0}, DType::Int32), zeros({0}, DType::Float32)}, 5);
  CHECK(all_empty.shape() == Shape{0});
  CHECK(all_empty.dtype() == DType::Float32);
  CHECK(cat({zeros({2, 0}, DType::Float32), zeros({2, 0}, DType::Float32)}, 1).shape() == Shape{2, 0});
  CHECK(cat({zeros({0, 3}, DType::Float32), zeros({0, 3}, DType::Float32)}, 0).shape() == Shape{0, 3});
}

TEST_CASE("stack matches torch", "[index]") {
  Tensor a = f32(ref::a34), d = f32(ref::d34);
  check_ref(stack({a, d}, 0), ref::stack_0);
  check_ref(stack({a, d}, 1), ref::stack_1);
  check_ref(stack({a, d}, -1), ref::stack_m1);
  check_ref(stack({a, d}, 2), ref::stack_m1);
  check_ref(stack({transpose(a, 0, 1), transpose(d, 0, 1)}, 0), ref::stack_t);
  Tensor s = select(select(a, 0, 1), 0, 2);  // 0-dim: a[1][2]
  Tensor st = stack({s, s, s}, 0);
  CHECK(st.shape() == Shape{3});
  check_values(st, {ref::a34.values[6], ref::a34.values[6], ref::a34.values[6]}, 0);
}

TEST_CASE("cat and stack errors name the shapes and positions", "[index]") {
  Tensor a = f32(ref::a34), c = f32(ref::c24);
  CHECK_THAT(error_of([&] { cat({}, 0); }), StartsWith("cat: expected a non-empty list of tensors"));
  CHECK_THAT(error_of([&] { cat({a, c}, 1); }),
             StartsWith("cat: shapes must match except in dimension 1, but tensor 0 has shape (3, 4) "
                        "and tensor 1 has shape (2, 4)"));
  CHECK_THAT(error_of([&] { cat({zeros({0}, DType::Float32), a, a, zeros({3, 5}, DType::Float32)}, 0); }),
             StartsWith("cat: shapes must match except in dimension 0, but tensor 1 has shape (3, 4) "
                        "and tensor 3 has shape (3, 5)"));
  CHECK_THAT(error_of([&] { cat({a, zeros({4}, DType::Float32)}, 0); }),
             StartsWith("cat: tensors must have the same number of dimensions, but tensor 0 has shape "
                        "(3, 4) and tensor 1 has shape (4,)"));
  CHECK_THAT(error_of([&] { cat({a, select(select(a, 0, 0), 0, 0)}, 0); }),
             StartsWith("cat: zero-dimensional tensor (at position 1) cannot be concatenated"));
  CHECK_THAT(error_of([&] { cat({a, a}, 2); }), StartsWith("cat: dimension 2 out of range"));
  CHECK_THAT(error_of([&] { stack({}, 0); }), StartsWith("stack: expected a non-empty list"));
  CHECK_THAT(error_of([&] { stack({a, transpose(a, 0, 1)}, 0); }),
             StartsWith("stack: expects tensors of equal shape, but tensor 0 has shape (3, 4) and "
                        "tensor 1 has shape (4, 3)"));
  CHECK_THAT(error_of([&] { stack({a, a}, 3); }), StartsWith("stack: dimension 3 out of range"));
  CHECK_THAT(error_of([&] { stack({a, a}, -4); }), StartsWith("stack: dimension -4 out of range"));
}

TEST_CASE("index_select matches torch on every layout and index dtype", "[index]") {
  Tensor a = f32(ref::a34), x = f32(ref::x234);
  check_ref(index_select(a, 0, i64(ref::idx_i0)), ref::index_select_0);
  check_ref(index_select(a, 1, from_ref(ref::idx_i1, DType::Int32)), ref::index_select_1);
  check_ref(index_select(a, -1, from_ref(ref::idx_i1, DType::Int32)), ref::index_select_1);
  check_ref(index_select(transpose(a, 0, 1), 0, index_of({1, 3})), ref::index_select_t);
  check_ref(index_select(x, 1, index_of({2, 0})), ref::index_select_x1);
  check_ref(index_select(transpose(x, 0, 1), 2, index_of({3, 3, 0})), ref::index_select_x2_t);
  check_ref(index_select(flatten(x), 0, index_of({23, 0, 7})), ref::index_select_1d);
  // A strided index (every other entry of a longer one) and a 0-dim index.
  Tensor wide = index_of({2, 9, 0, 9, 2, 9});
  check_ref(index_select(a, 0, slice(wide, 0, 0, 6, 2)), ref::index_select_0);
  Tensor one = index_select(a, 1, select(index_of({3}), 0, 0));
  CHECK(one.shape() == Shape{3, 1});
  check_values(one, {ref::a34.values[3], ref::a34.values[7], ref::a34.values[11]}, 0);
  // Integer and bool data take the same paths.
  Tensor xi = from_ref(ref::x234, DType::Int64);
  check_ref(index_select(xi, 1, index_of({2, 0})), ref::index_select_x1);
  Tensor xb = from_ref(ref::x234, DType::Bool);
  CHECK(index_select(xb, 2, index_of({0, 1})).dtype() == DType::Bool);
}

TEST_CASE("index_select edge cases and errors", "[index]") {
  Tensor a = f32(ref::a34);
  CHECK(index_select(a, 0, zeros({0}, DType::Int64)).shape() == Shape{0, 4});
  Tensor s = select(select(a, 0, 2), 0, 1);  // 0-dim
  Tensor r = index_select(s, 0, index_of({0}));
  CHECK(r.dim() == 0);
  CHECK(r.item() == ref::a34.values[9]);
  CHECK_THAT(error_of([&] { index_select(s, 0, index_of({0, 0})); }),
             StartsWith("index_select: the index into a 0-dim tensor must have one element, got 2"));
  CHECK_THAT(error_of([&] { index_select(s, 0, index_of({1})); }),
             StartsWith("index_select: index 1 is out of range for dimension 0 of size 1"));

  CHECK_THAT(error_of([&] { index_select(a, 0, index_of({0, 3})); }),
             StartsWith("index_select: index 3 is out of range for dimension 0 of size 3"));
  CHECK(error_kind_of([&] { index_select(a, 0, index_of({0, 3})); }) == ErrorKind::Index);
  CHECK_THAT(error_of([&] { index_select(a, 1, index_of({-1}, DType::Int32)); }),
             StartsWith("index_select: index -1 is out of range for dimension 1 of size 4"));
  CHECK_THAT(error_of([&] { index_select(transpose(a, 0, 1), 1, index_of({1, 7})); }),
             StartsWith("index_select: index 7 is out of range for dimension 1 of size 3"));
  CHECK_THAT(error_of([&] { index_select(a, 0, index_of({0.0}, DType::Float32)); }),
             StartsWith("index_select: expected an int64 or int32 index, got float32"));
  CHECK(error_kind_of([&] { index_select(a, 0, index_of({0.0}, DType::Float32)); }) == ErrorKind::Type);
  CHECK_THAT(error_of([&] { index_select(a, 0, zeros({1, 1}, DType::Int64)); }),
             StartsWith("index_select: expected a 1-D index, got shape (1, 1)"));
  CHECK_THAT(error_of([&] { index_select(a, 2, index_of({0})); }),
             StartsWith("index_select: dimension 2 out of range"));
  // Indices are checked even when the result is empty.
  Tensor e = zeros({0, 3}, DType::Float32);
  CHECK(index_select(e, 1, index_of({2, 1})).shape() == Shape{0, 2});
  CHECK_THAT(error_of([&] { index_select(e, 1, index_of({5})); }),
             StartsWith("index_select: index 5 is out of range for dimension 1 of size 3"));
  CHECK_THAT(error_of([&] { index_select(e, 0, index_of({0})); }),
             StartsWith("index_select: index 0 is out of range for dimension 0 of size 0"));
}

TEST_CASE("gather matches torch", "[index]") {
  Tensor a = f32(ref::a34), x = f32(ref::x234);
  check_ref(gather(a, 1, i64(ref::g1)), ref::gather_1);
  check_ref(gather(a, 1, from_ref(ref::g1, DType::Int32)), ref::gather_1);
  check_ref(gather(a, 0, i64(ref::g0)), ref::gather_0);
  check_ref(gather(a, -2, i64(ref::g0)), ref::gather_0);
  check_ref(gather(x, 2, i64(ref::g2)), ref::gather_x2);
  check_ref(gather(transpose(a, 0, 1), 0, transpose(i64(ref::g0), 0, 1)), ref::gather_t);
  check_ref(gather(x, 0, ones({1, 3, 4}, DType::Int64)), ref::gather_x0);
  // Broadcast (stride-0) index, as index_select's strided path uses it.
  Tensor col = expand(view(index_of({2, 0, 1}), {3, 1}), {3, 4});
  Tensor g = gather(a, 0, col);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      int64_t at[] = {i, j};
      CHECK(g.value_at(at) == ref::a34.values[size_t(col.value_at(at) * 4 + double(j))]);
    }
}

TEST_CASE("gather and scatter_add take any stride along a dim of size 1", "[index]") {
  // Found by fuzz_ops: index_select of a strided input whose dim of size 1 had a
  // saturated stride (unsqueeze past 2^63 elements); scaling it to bytes overflowed
  // (UBSan in the sanitizer suite).
  const int64_t big = std::numeric_limits<int64_t>::max();
  Tensor a = from_ref(ref::a34, DType::Float64);
  Tensor row = make_view(a, {3, 1, 4}, {4, big, 1}, 0);  // a, unsqueezed at 1
  Tensor zero = make_view(zeros({3, 1, 4}, DType::Int64), {3, 1, 4}, {4, big, 1}, 0);
  check_values(gather(row, 1, zero), ref::a34.values, 0);
  Tensor picked = index_select(row, 1, index_of({0, 0}));
  CHECK(picked.shape() == Shape{3, 2, 4});
  check_values(select(picked, 1, 1), ref::a34.values, 0);
  Tensor twice = scatter_add(row, 1, zero, row);
  std::vector<double> doubled;
  for (double v : ref::a34.values) doubled.push_back(2 * v);
  check_values(twice, doubled, 0);
}

TEST_CASE("gather shape rules and errors", "[index]") {
  Tensor a = f32(ref::a34);
  // The gathered dim may be larger than the input's; the others not.
  Tensor wide = gather(a, 1, zeros({1, 6}, DType::Int64));
  CHECK(wide.shape() == Shape{1, 6});
  check_values(wide, std::vector<double>(6, ref::a34.values[0]), 0);
  CHECK(gather(a, 1, zeros({0, 7}, DType::Int64)).shape() == Shape{0, 7});
  CHECK_THAT(error_of([&] { gather(a, 1, zeros({4, 1}, DType::Int64)); }),
             StartsWith("gather: index of shape (4, 1) is larger than the input of shape (3, 4) at dimension 0"));
  CHECK_THAT(error_of([&] { gather(a, 1, zeros({3}, DType::Int64)); }),
             StartsWith("gather: index of shape (3,) must have as many dimensions as the input of shape (3, 4)"));
  CHECK_THAT(error_of([&] { gather(a, 2, zeros({3, 1}, DType::Int64)); }),
             StartsWith("gather: dimension 2 out of range"));
  CHECK_THAT(error_of([&] { gather(a, 1, zeros({3, 1}, DType::Float64)); }),
             StartsWith("gather: expected an int64 or int32 index, got float64"));

  Tensor idx = zeros({3, 2}, DType::Int64);
  Tensor bad = select(select(idx, 0, 2), 0, 1);
  fill_(bad, Scalar(4.0));
  CHECK_THAT(error_of([&] { gather(a, 1, idx); }),
             StartsWith("gather: index 4 is out of range for dimension 1 of size 4"));
  CHECK(error_kind_of([&] { gather(a, 1, idx); }) == ErrorKind::Index);
  fill_(bad, Scalar(-1.0));
  CHECK_THAT(error_of([&] { gather(a, 1, idx); }),
             StartsWith("gather: index -1 is out of range for dimension 1 of size 4"));
  CHECK_THAT(error_of([&] { gather(zeros({3, 0}, DType::Float32), 1, zeros({3, 1}, DType::Int64)); }),
             StartsWith("gather: index 0 is out of range for dimension 1 of size 0"));

  // 0-dim input and index are 1-D of one element, as in torch.
  Tensor s = select(select(a, 0, 1), 0, 1);
  Tensor i0 = select(index_of({0}), 0, 0);
  CHECK(gather(s, 0, i0).dim() == 0);
  CHECK(gather(s, 0, i0).item() == ref::a34.values[5]);
  CHECK(gather(s, 0, index_of({0, 0})).shape() == Shape{2});
  CHECK(gather(flatten(a), 0, select(index_of({11}), 0, 0)).item() == ref::a34.values[11]);
}

TEST_CASE("scatter_add matches torch and leaves its input alone", "[index]") {
  Tensor a = f32(ref::a34), x = f32(ref::x234);
  Tensor before = clone(a);
  check_ref(scatter_add(a, 0, i64(ref::s0), f32(ref::src24)), ref::scatter_add_0);
  check_values(a, values_of(before), 0);
  check_ref(scatter_add(a, 1, i64(ref::s1), f32(ref::src35)), ref::scatter_add_1);
  check_ref(scatter_add(a, 1, from_ref(ref::s1, DType::Int32), f32(ref::src35)), ref::scatter_add_1);
  check_ref(scatter_add(transpose(a, 0, 1), 0, narrow(transpose(i64(ref::s1), 0, 1), 1, 0, 2),
                        transpose(narrow(f32(ref::src35), 0, 0, 2), 0, 1)),
            ref::scatter_add_t);
  double iv[] = {2, 2, 0, 2}, sv[] = {5, -7, 100, 1};
  check_ref(scatter_add(from_ref(ref::b32, DType::Int64), 0, from_values(iv, 4, Shape{2, 2}, DType::Int64),
                        from_values(sv, 4, Shape{2, 2}, DType::Int64)),
            ref::scatter_add_int);
  check_ref(scatter_add(x, 2, i64(ref::g2), ones({2, 2, 3}, DType::Float32)), ref::scatter_add_x2);
  // 0-dim: torch.tensor(1.).scatter_add(0, torch.tensor(0), torch.tensor(2.)) == 3
  Tensor one = full(Shape{}, Scalar(1.0), DType::Float32);
  CHECK(scatter_add(one, 0, zeros(Shape{}, DType::Int64), full(Shape{}, Scalar(2.0), DType::Float32)).item() == 3);
  // An empty index scatters nothing and is not shape-checked (torch).
  check_ref(scatter_add(a, 1, zeros({0, 2}, DType::Int64), zeros({2, 1}, DType::Float32)), ref::a34);
}

TEST_CASE("scatter_add errors", "[index]") {
  Tensor a = f32(ref::a34);
  Tensor s = f32(ref::src24);
  CHECK_THAT(error_of([&] { scatter_add(a, 0, i64(ref::s0), from_ref(ref::src24, DType::Float64)); }),
             StartsWith("scatter_add: expected src of dtype float32 (the input's), got float64"));
  CHECK(error_kind_of([&] { scatter_add(a, 0, i64(ref::s0), from_ref(ref::src24, DType::Float64)); }) ==
        ErrorKind::Type);
  CHECK_THAT(error_of([&] { scatter_add(a, 0, i64(ref::s0), narrow(s, 1, 0, 2)); }),
             StartsWith("scatter_add: index of shape (2, 4) is larger than src of shape (2, 2) at dimension 1"));
  CHECK_THAT(error_of([&] { scatter_add(a, 0, zeros({2, 5}, DType::Int64), zeros({2, 5}, DType::Float32)); }),
             StartsWith("scatter_add: index of shape (2, 5) is larger than the input of shape (3, 4) at dimension 1"));
  CHECK_THAT(error_of([&] { scatter_add(a, 0, zeros({2}, DType::Int64), s); }),
             StartsWith("scatter_add: input of shape (3, 4), index of shape (2,) and src of shape (2, 4) must have"));
  CHECK_THAT(error_of([&] { scatter_add(a, 0, zeros({2, 4}, DType::UInt8), s); }),
             StartsWith("scatter_add: expected an int64 or int32 index, got uint8"));
  CHECK_THAT(error_of([&] { scatter_add(a, -3, i64(ref::s0), s); }), StartsWith("scatter_add: dimension -3 out of range"));
  Tensor idx = clone(i64(ref::s0));
  Tensor bad = select(select(idx, 0, 1), 0, 3);
  fill_(bad, Scalar(3.0));
  CHECK_THAT(error_of([&] { scatter_add(a, 0, idx, s); }),
             StartsWith("scatter_add: index 3 is out of range for dimension 0 of size 3"));
  fill_(bad, Scalar(-2.0));
  CHECK_THAT(error_of([&] { scatter_add(a, 0, idx, s); }),
             StartsWith("scatter_add: index -2 is out of range for dimension 0 of size 3"));
  CHECK(error_kind_of([&] { scatter_add(a, 0, idx, s); }) == ErrorKind::Index);
}

// Inputs past the threading threshold, checked against plain loops over value_at.
TEST_CASE("large gather, scatter_add, index_select and cat agree with plain loops", "[index]") {
  const int64_t R = 300, C = 200;
  Tensor x = rand_ints({R, C}, -1000, 1000, DType::Float64, 1);
  Tensor xt = transpose(rand_ints({C, R}, -1000, 1000, DType::Float64, 2), 0, 1);
  for (const Tensor& src : {x, xt}) {
    for (int dim = 0; dim < 2; ++dim) {
      Tensor idx = rand_ints({R, C}, 0, dim == 0 ? R : C, DType::Int64, 3 + unsigned(dim));
      Tensor g = gather(src, dim, idx);
      Tensor s = scatter_add(src, dim, idx, src);
      std::vector<double> expect_s = values_of(src);
      bool gather_ok = true;
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) {
          int64_t at[] = {i, j};
          int64_t k = int64_t(idx.value_at(at));
          int64_t from[] = {dim == 0 ? k : i, dim == 0 ? j : k};
          gather_ok = gather_ok && g.value_at(at) == src.value_at(from);
          expect_s[size_t(from[0] * C + from[1])] += src.value_at(at);
        }
      CHECK(gather_ok);
      check_values(s, expect_s, 0);

      Tensor rows = rand_ints({500}, 0, dim == 0 ? R : C, DType::Int32, 7);
      Tensor sel = index_select(src, dim, rows);
      bool select_ok = true;
      for (int64_t r = 0; r < 500; ++r)
        for (int64_t k = 0; k < (dim == 0 ? C : R); ++k) {
          int64_t at[] = {dim == 0 ? r : k, dim == 0 ? k : r};
          int64_t ri[] = {r};
          int64_t from[] = {dim == 0 ? int64_t(rows.value_at(ri)) : k, dim == 0 ? k : int64_t(rows.value_at(ri))};
          select_ok = select_ok && sel.value_at(at) == src.value_at(from);
        }
      CHECK(select_ok);

      Tensor joined = cat({src, x, src}, dim);
      CHECK(joined.shape() == (dim == 0 ? Shape{3 * R, C} : Shape{R, 3 * C}));
      check_values(narrow(joined, dim, 0, dim == 0 ? R : C), values_of(src), 0);
      check_values(narrow(joined, dim, dim == 0 ? R : C, dim == 0 ? R : C), values_of(x), 0);
      check_values(narrow(joined, dim, dim == 0 ? 2 * R : 2 * C, dim == 0 ? R : C), values_of(src), 0);
    }
  }
  // A bad index deep inside a threaded gather: the first one in index order is named.
  Tensor idx = zeros({R, C}, DType::Int64);
  int64_t at1[] = {R - 2, 5}, at2[] = {R - 1, 7};
  Tensor b1 = select(select(idx, 0, at1[0]), 0, at1[1]);
  Tensor b2 = select(select(idx, 0, at2[0]), 0, at2[1]);
  fill_(b2, Scalar(-5.0));
  fill_(b1, Scalar(double(C + 9)));
  CHECK_THAT(error_of([&] { gather(x, 1, idx); }),
             StartsWith("gather: index 209 is out of range for dimension 1 of size 200"));
  CHECK_THAT(error_of([&] { scatter_add(x, 1, idx, x); }),
             StartsWith("scatter_add: index 209 is out of range for dimension 1 of size 200"));
}

TEST_CASE("a backend without the indexing kernels reports them as not implemented", "[index]") {
  Backend fake = cpu_backend();
  fake.name = "cuda";
  fake.cat = nullptr;
  fake.index_select = nullptr;
  fake.gather = nullptr;
  fake.scatter_add = nullptr;
  register_backend(DeviceType::CUDA, &fake);
  {
    Device dev{DeviceType::CUDA, 0};
    Tensor t = zeros({2, 3}, DType::Float32, dev);
    Tensor i = zeros({2, 3}, DType::Int64, dev);
    Tensor i1 = zeros({2}, DType::Int64, dev);
    CHECK_THAT(error_of([&] { cat({t, t}, 0); }), StartsWith("cat: not implemented for cuda"));
    CHECK_THAT(error_of([&] { index_select(t, 0, i1); }), StartsWith("index_select: not implemented for cuda"));
    CHECK_THAT(error_of([&] { gather(t, 0, i); }), StartsWith("gather: not implemented for cuda"));
    CHECK_THAT(error_of([&] { scatter_add(t, 0, i, t); }), StartsWith("scatter_add: not implemented for cuda"));
    CHECK(error_kind_of([&] { gather(t, 0, i); }) == ErrorKind::NotImplemented);
    CHECK_THAT(error_of([&] { gather(zeros({2, 3}, DType::Float32), 0, i); }),
               StartsWith("gather: expected the index on the same device as the input (cpu), got cuda:0"));
  }
  register_backend(DeviceType::CUDA, nullptr);
}

TEST_CASE("gather and scatter_add into an input empty along dim say the index is out of range", "[index]") {
  // The empty operand's other strides may be huge ((2^61, 1) here); scaled to bytes
  // they overflowed before the index was checked.
  const int64_t big = int64_t(1) << 61;
  Tensor x = zeros({2, 0, big}, DType::Float32);
  Tensor idx = zeros({2, 1, 2}, DType::Int64);
  CHECK_THAT(error_of([&] { gather(x, 1, idx); }),
             StartsWith("gather: index 0 is out of range for dimension 1 of size 0"));
  CHECK_THAT(error_of([&] { scatter_add(x, 1, idx, zeros({2, 1, 2}, DType::Float32)); }),
             StartsWith("scatter_add: index 0 is out of range for dimension 1 of size 0"));
}

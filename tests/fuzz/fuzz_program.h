// The C ABI programs of the fuzz targets that drive the engine as a script does
// (fuzz_ops.cpp, fuzz_breadth.cpp): a Program reads its input as a sequence of calls on
// a small pool of tensor handles and inline values, and checks every result and every
// refusal. Each target decides which calls its programs make (its own `run`), so a
// target's corpus keeps its meaning when another target's mix changes.
//
//   void run(dlfuzz::Program& p) { while (!p.in.done()) p.create(); }   // the target's calls
//   DLFUZZ_PROGRAM_TARGET(run)   // libFuzzer's entry points: dlfuzz::start() once (the
//                                // memory limit, baselines), then per input test_one:
//                                // run, finish, nothing left
//
// Oracles, besides ASan/UBSan: a failing call must leave a message and is never an
// internal error; every tensor a call returns must describe itself consistently and,
// when small, have all its elements readable (a view reaching outside its storage
// shows up here under ASan); and once the program has released everything, no handle
// and no tensor byte may remain (a reference cycle in the tape or a leaked handle is a
// failure, not a leak report at exit).
//
// Cost: a mutation that builds a 2^20-element tensor and feeds it to matmul or conv
// would be a slow input, not a bug, so compute ops skip inputs above kMaxCompute
// elements and NN geometry is mostly small; huge sizes still reach creation, views
// and broadcasting, where the engine must refuse them (the tensor memory limit is set
// low for that).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>
#include "bindings/capi.h"
#include "tests/fuzz/fuzz_input.h"

namespace dlfuzz {

constexpr int kPool = 12;
constexpr int kValues = 4;
constexpr double kMaxCompute = 1 << 14;   // elements an input of a compute op may have
constexpr int64_t kReadMax = 4096;         // results this small are read in full
constexpr double kMemoryLimit = 64 << 20;  // bytes; past it allocations must fail cleanly
constexpr int kInternal = 5;               // dl::ErrorKind::Internal

[[noreturn]] inline void fatal(const char* what, const char* detail = "") {
  std::fprintf(stderr, "fuzz: %s %s\n", what, detail);
  std::abort();
}

constexpr int64_t kHugeDims[] = {int64_t(1) << 31, int64_t(1) << 40, int64_t(1) << 62,
                                 std::numeric_limits<int64_t>::max(), -1, -2,
                                 std::numeric_limits<int64_t>::min(), 100000};
constexpr int64_t kSmallDims[] = {1, 2, 3, 4, 0, 1, 2, 5, 8, 3};
constexpr double kScalars[] = {0.0, 1.0, -1.0, 2.0, 0.5, -0.0, 3.0, 1e-30, 1e30, 255.0, 256.0,
                               -129.0, 2147483648.0, 9007199254740993.0, 1e308,
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN()};
constexpr int kDtypes[] = {4, 5, 3, 2, 0, 1, 4, 5, 4, 6, -1, 127};
constexpr int kDims[] = {1, 2, -1, 0, 3, -2, 4, 1, 2, 9, -9, 100};
constexpr int kGeom[] = {1, 2, 0, 3, 1, 2, -1, 1 << 30, std::numeric_limits<int>::max()};
constexpr int64_t kPositions[] = {1, 0, 2, -1, 3, -2, 5, 1000, std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min()};
const char* const kDevices[] = {nullptr, nullptr, nullptr, "cpu", "cuda", "cuda:7", "tpu", "", "cpu:1"};

// A struct dl_tensor the harness can write (its fields are const to Lua).
struct ValueSlot {
  alignas(8) unsigned char bytes[sizeof(dl_tensor)] = {};
  ValueSlot() = default;
  explicit ValueSlot(uint64_t id) { std::memcpy(bytes, &id, sizeof id); }  // a handle
  dl_tensor* get() { return reinterpret_cast<dl_tensor*>(bytes); }
};

struct Program {
  FuzzInput in;
  uint64_t pool[kPool] = {};
  ValueSlot values[kValues];   // inline values (all zero bytes: a malformed one)
  ValueSlot operands[4];       // handles or forged headers passed as values
  ValueSlot result;
  std::vector<uint64_t> dead;  // released ids, to be used again (must be refused)
  std::vector<int> tasks;      // backward tasks in flight
  int grad_depth = 0, nograd_depth = 0, varlogs = 0;
  uint64_t last_tape = 0;      // the tape of the last recorded value seen
  double scratch[kReadMax];

  explicit Program(const uint8_t* d, size_t n) : in(d, n) {}

  uint64_t tensor() {
    uint8_t b = in.byte();
    if (b < 240) return pool[b % kPool];
    switch (b % 4) {
      case 0: return 0;
      case 1: return dead.empty() ? 0 : dead[in.pick(int(dead.size()))];
      case 2: return in.u64() & ((uint64_t(1) << 53) - 1);  // forged
      default: return pool[0];
    }
  }

  // The tensor operand of an entry point that takes a value: mostly a handle of the
  // pool, sometimes an inline value or a forged header (whose elements are 0 or 1, as
  // the engine writes bool bytes).
  const dl_tensor* value(int k) {
    uint8_t b = in.byte();
    if (b < 192) {
      operands[k] = ValueSlot(tensor());
      return operands[k].get();
    }
    if (b < 248) return values[in.pick(kValues)].get();
    unsigned char* p = operands[k].bytes;
    std::memset(p, 0, sizeof(dl_tensor));
    constexpr size_t kElements = offsetof(dl_tensor, inl_v0);
    for (size_t i = 8; i < kElements; ++i) p[i] = in.byte();
    // Often a recent tape's serial: a forged slot on a tape that may be live.
    if (in.flag()) {
      uint64_t serial = last_tape + in.byte() % 3;
      std::memcpy(p + offsetof(dl_tensor, inl_arena), &serial, sizeof serial);
    }
    for (size_t i = kElements; i < sizeof(dl_tensor); ++i) p[i] = in.byte() & 1;
    return operands[k].get();
  }

  // The result of an entry point that returns a value (status st, the value in
  // `result`): an inline one is checked and kept in the value pool or promoted into a
  // handle; a handle goes to put().
  void put_value(int st) {
    if (st < 0) {
      failed();
      return;
    }
    dl_tensor* r = result.get();
    if (st == 1) {
      put(r->id);
      return;
    }
    if (st != 0 || r->id != 0) fatal("a value result is neither inline nor a handle");
    check(r);
    if (r->inl_arena != 0) last_tape = r->inl_arena - 1;
    if (in.flag()) {
      uint64_t id = dl_promote(r);
      if (id == 0) failed();
      else put(id);
    } else {
      std::memcpy(values[in.pick(kValues)].bytes, result.bytes, sizeof(dl_tensor));
    }
  }

  // The result of a call: checked, then stored in a slot (releasing what was there).
  void put(uint64_t id) {
    if (id == 0) {
      failed();
      return;
    }
    ValueSlot h(id);
    check(h.get());
    int slot = in.pick(kPool);
    release_slot(slot);
    pool[slot] = id;
  }
  void check_status(int st) {
    if (st != 0) failed();
  }
  // A refusal must say why, and must not be an internal error (a failed DL_ASSERT, a
  // std::exception escaping a kernel): those are bugs even when caught.
  static void failed() {
    const char* msg = dl_last_error();
    if (!msg || !*msg) fatal("a call failed without a message");
    if (dl_last_error_kind() == kInternal) fatal("internal error:", msg);
  }

  void release_slot(int slot) {
    if (pool[slot]) {
      dl_release_id(pool[slot]);
      if (dead.size() < 64) dead.push_back(pool[slot]);
      pool[slot] = 0;
    }
  }

  // A fresh tensor must describe itself consistently and, when small, be readable.
  void check(const dl_tensor* t) {
    dl_meta m;
    if (dl_meta_get(t, &m) != 0) fatal("meta of a fresh tensor failed:", dl_last_error());
    if (m.ndim < 0 || m.ndim > 8) fatal("bad ndim");
    double n = 1;
    for (int d = 0; d < m.ndim; ++d) {
      if (m.sizes[d] < 0) fatal("negative size");
      n *= m.sizes[d];
    }
    if (n != m.numel) fatal("numel is not the product of the sizes");
    if (m.numel <= double(kReadMax)) {
      if (dl_read(t, scratch, int64_t(m.numel)) != 0) fatal("reading a fresh tensor failed:", dl_last_error());
    }
  }

  bool cheap(uint64_t id) {
    ValueSlot h(id);
    return cheap(h.get());
  }
  bool cheap(const dl_tensor* t) {
    double n = dl_numel(t);
    return n <= kMaxCompute;  // -1 (invalid id) counts as cheap: the call must refuse it
  }

  int shape(int64_t* out) {
    uint8_t b = in.byte();
    int nd = b < 230 ? b % 5 : 5 + b % 5;  // mostly 0..4 dims, sometimes too many
    for (int i = 0; i < nd; ++i) {
      uint8_t s = in.byte();
      out[i] = s < 245 ? kSmallDims[s % 10] : kHugeDims[s % 8];
    }
    return nd;
  }
  int dtype() { return in.one_of(kDtypes); }
  double scalar() { return in.byte() < 250 ? in.one_of(kScalars) : in.f64(); }
  int dim() { return in.one_of(kDims); }
  int geom() { return in.one_of(kGeom); }
  int64_t position() { return in.one_of(kPositions); }

  void create() {
    int64_t sh[16];
    int nd = shape(sh);
    int dt = dtype();
    const char* dev = in.one_of(kDevices);
    switch (in.pick(13)) {
      case 0: put(dl_empty(sh, nd, dt, dev)); break;
      case 1: put(dl_zeros(sh, nd, dt, dev)); break;
      case 2: put(dl_ones(sh, nd, dt, dev)); break;
      case 3: put(dl_full(sh, nd, scalar(), dt, dev)); break;
      case 4: put(dl_arange(scalar(), scalar(), scalar(), dt, dev)); break;
      case 5: put(dl_linspace(scalar(), scalar(), position(), dt, dev)); break;
      case 6: put(dl_eye(position(), position(), dt, dev)); break;
      case 7: put(dl_rand(sh, nd, dt, dev)); break;
      case 8: put(dl_randn(sh, nd, dt, dev)); break;
      case 9: put(dl_randint(scalar(), scalar(), sh, nd, dt, dev)); break;
      case 10: put(dl_randperm(position(), dt)); break;
      case 11: {
        double vals[64];
        int64_t n = in.pick(65);
        for (int64_t i = 0; i < n; ++i) vals[i] = scalar();
        put(dl_from_values(vals, n, sh, nd, dt, dev));
        break;
      }
      default: from_ptr(sh, nd, dt); break;
    }
  }

  // Foreign memory: the host promises the buffer covers every element, so only layouts
  // that fit the static buffer are made (the ABI cannot check a host's promise).
  void from_ptr(const int64_t* sh, int nd, int dt) {
    // Bool tensors get their own buffer: other dtypes write arbitrary bytes into theirs,
    // and the ABI's promise for bool memory is 0 or 1 in every byte (capi.h).
    static double doubles[1024];
    static bool bools[sizeof doubles];
    void* buffer = dt == 0 ? static_cast<void*>(bools) : static_cast<void*>(doubles);
    if (nd > 8 || dt < 0 || dt > 7) {   // refused: too many dims, not a dtype
      put(dl_from_ptr(buffer, sh, nd, nullptr, dt));
      return;
    }
    int64_t st[8];
    int64_t reach = 0;
    bool empty = false;
    for (int d = 0; d < nd; ++d) {
      st[d] = in.pick(5);  // 0 .. 4 elements: broadcast, overlapping and gapped layouts
      if (sh[d] < 0 || sh[d] > 1024) return;
      if (sh[d] == 0) empty = true;
      reach += (sh[d] - 1) * st[d];
    }
    int size = dt == 0 || dt == 1 ? 1 : dt == 6 || dt == 7 ? 2 : dt == 2 || dt == 4 ? 4 : 8;
    if (!empty && (reach + 1) * size > int64_t(sizeof doubles)) return;
    put(dl_from_ptr(buffer, sh, nd, st, dt));
  }

  int op_id() { return in.pick(dl_op_count() + 2) - 1; }  // -1 and count are invalid

  void family() {
    const dl_tensor* a = value(0);
    const dl_tensor* b = value(1);
    if (!cheap(a) || !cheap(b)) return;
    int op = op_id();
    dl_tensor* r = result.get();
    switch (in.pick(8)) {
      case 0: put_value(dl_unary(op, a, r)); break;
      case 1: put_value(dl_binary(op, a, b, r)); break;
      case 2: put_value(dl_binary_scalar(op, a, scalar(), in.flag(), r)); break;
      case 3: check_status(dl_binary_(op, a->id, b->id)); break;
      case 4: check_status(dl_binary_scalar_(op, a->id, scalar())); break;
      case 5: put_value(dl_compare(op, a, b, r)); break;
      case 6: put_value(dl_compare_scalar(op, a, scalar(), in.flag(), r)); break;
      default: {
        int32_t dims[4];
        int nd = in.pick(4);
        for (int i = 0; i < nd; ++i) dims[i] = dim();
        put_value(dl_reduce(op, a, dims, nd, in.flag(), scalar(), scalar(), r));
        break;
      }
    }
  }

  void other() {
    uint64_t x = tensor();
    if (!cheap(x)) return;
    uint64_t out2[2] = {0, 0};
    switch (in.pick(13)) {
      case 0:
        check_status(dl_max_dim(x, dim(), in.flag(), out2));
        put(out2[0]), put(out2[1]);
        break;
      case 1:
        check_status(dl_min_dim(x, dim(), in.flag(), out2));
        put(out2[0]), put(out2[1]);
        break;
      case 2: put(dl_argmax(x, dim(), in.flag())); break;
      case 3: put(dl_argmin(x, dim(), in.flag())); break;
      case 4: put(dl_softmax(x, dim())); break;
      case 5: put(dl_log_softmax(x, dim())); break;
      case 6: {
        uint64_t a = tensor(), b = tensor();
        if (cheap(a) && cheap(b)) put(dl_where(x, a, b));
        break;
      }
      case 7: put(dl_clamp(x, scalar(), scalar(), in.flag(), in.flag())); break;
      case 8: {
        uint64_t m = tensor();
        if (cheap(m)) put(dl_masked_fill(x, m, scalar()));
        break;
      }
      case 9: {
        uint64_t b = tensor();
        if (cheap(b)) put(dl_matmul(x, b));
        break;
      }
      case 10: put(dl_to(x, dtype())); break;
      case 11: put(dl_to_device(x, in.one_of(kDevices))); break;
      default: put(in.flag() ? dl_contiguous(x) : dl_clone(x)); break;
    }
  }

  void views() {
    uint64_t x = tensor();  // views cost nothing: any size
    int64_t sh[16];
    switch (in.pick(11)) {
      case 0: {
        int nd = shape(sh);
        if (in.byte() < 64 && nd > 0) sh[in.pick(nd)] = -1;
        put(dl_view(x, sh, nd));
        break;
      }
      case 1: {
        int nd = shape(sh);
        if (in.byte() < 64 && nd > 0) sh[in.pick(nd)] = -1;
        if (cheap(x)) put(dl_reshape(x, sh, nd));
        break;
      }
      case 2: put(dl_transpose(x, dim(), dim())); break;
      case 3: {
        int32_t dims[10];
        int nd = in.pick(10);
        for (int i = 0; i < nd; ++i) dims[i] = dim();
        put(dl_permute(x, dims, nd));
        break;
      }
      case 4: put(dl_narrow(x, dim(), position(), position())); break;
      case 5: put(dl_slice(x, dim(), position(), position(), position())); break;
      case 6: put(dl_select(x, dim(), position())); break;
      case 7: {
        int nd = shape(sh);
        put(dl_expand(x, sh, nd));
        break;
      }
      case 8: put(dl_squeeze(x, dim())); break;
      case 9: put(dl_unsqueeze(x, dim())); break;
      default: put(dl_flatten(x, dim(), dim())); break;
    }
  }

  void join_and_index() {
    switch (in.pick(5)) {
      case 0: case 1: {
        uint64_t xs[5];
        int n = in.pick(6);
        for (int i = 0; i < n; ++i) {
          xs[i] = tensor();
          if (!cheap(xs[i])) return;
        }
        put(in.flag() ? dl_cat(xs, n, dim()) : dl_stack(xs, n, dim()));
        break;
      }
      default: {
        uint64_t x = tensor();
        if (!cheap(x)) return;
        // An index: random integers in a small range around the valid 1..size, or any
        // tensor of the pool (wrong dtype, float, bool ...).
        uint64_t idx;
        bool fresh = in.flag();
        if (fresh) {
          int64_t sh[16];
          int nd = shape(sh);
          double lo = double(in.pick(3)) - 1, hi = double(1 + in.pick(6));
          idx = dl_randint(lo, hi, sh, nd, in.flag() ? 3 : 2, nullptr);
          if (!cheap(idx)) {
            dl_release_id(idx);
            return;
          }
        } else {
          idx = tensor();
          if (!cheap(idx)) return;
        }
        int d = dim();
        uint64_t src = tensor();
        switch (in.pick(3)) {
          case 0: put(dl_index_select(x, d, idx)); break;
          case 1: put(dl_gather(x, d, idx)); break;
          default: if (cheap(src)) put(dl_scatter_add(x, d, idx, src)); break;
        }
        if (fresh) dl_release_id(idx);
        break;
      }
    }
  }

  void elements() {
    const dl_tensor* v = value(2);
    uint64_t x = v->id;
    switch (in.pick(10)) {
      case 0: {
        uint64_t src = tensor();
        if (cheap(x) && cheap(src)) check_status(dl_copy_(x, src));
        break;
      }
      case 1: if (cheap(x)) check_status(dl_fill_(x, scalar())); break;
      case 2: dl_set1(x, position(), scalar()); break;
      case 3: dl_get1(v, position(), scratch); break;
      case 4: {
        double n = dl_numel(v);
        if (n >= 0 && n <= double(kReadMax)) {
          int64_t ask = in.flag() ? int64_t(n) : int64_t(in.pick(int(n) + 1));
          check_status(dl_read(v, scratch, ask));
        }
        break;
      }
      case 5: {
        int64_t idx[8];  // 0-based here; position() may be INT64_MIN, which stays so
        for (int64_t& i : idx) {
          int64_t p = position();
          i = p == std::numeric_limits<int64_t>::min() ? p : p - 1;
        }
        dl_read_at(v, idx, scratch);
        break;
      }
      case 6: dl_item(v, scratch); break;
      case 7: dl_data_ptr(x, scratch); break;
      case 8: {  // an inline value of the pool becomes a handle
        ValueSlot& s = values[in.pick(kValues)];
        uint64_t id = dl_promote(s.get());
        if (id == 0) {
          failed();
        } else {
          put(id);
          std::memset(s.bytes, 0, sizeof s.bytes);  // the handle now belongs to the pool
        }
        break;
      }
      default: {
        double stats[5];
        dl_memory_stats(stats);
        if (in.flag()) dl_empty_cache();
        break;
      }
    }
  }

  void nn() {
    uint64_t x = tensor(), w = tensor(), b = in.flag() ? 0 : tensor();
    if (!cheap(x) || !cheap(w) || !cheap(b)) return;
    ValueSlot hx(x), hw(w);
    if (dl_numel(hx.get()) * dl_numel(hw.get()) > double(1 << 18)) return;
    int64_t sh[16];
    uint64_t out2[2] = {0, 0};
    switch (in.pick(15)) {
      case 0: put(dl_conv2d(x, w, b, geom(), geom(), geom(), geom(), geom(), geom(), geom())); break;
      case 1: {
        int nd = shape(sh);
        put(dl_conv2d_input_grad(x, w, sh, nd, geom(), geom(), geom(), geom(), geom(), geom(), geom()));
        break;
      }
      case 2: {
        int nd = shape(sh);
        put(dl_conv2d_weight_grad(x, w, sh, nd, geom(), geom(), geom(), geom(), geom(), geom(), geom()));
        break;
      }
      case 3:
        put(dl_conv_transpose2d(x, w, b, geom(), geom(), geom(), geom(), geom(), geom(), geom(),
                                geom(), geom()));
        break;
      case 4:
        check_status(dl_max_pool2d(x, geom(), geom(), geom(), geom(), geom(), geom(), in.flag(), out2));
        put(out2[0]), put(out2[1]);
        break;
      case 5:
        put(dl_max_pool2d_values(x, geom(), geom(), geom(), geom(), geom(), geom(), in.flag()));
        break;
      case 6: {
        int nd = shape(sh);
        put(dl_max_pool2d_backward(x, w, sh, nd));
        break;
      }
      case 7:
        put(dl_avg_pool2d(x, geom(), geom(), geom(), geom(), geom(), geom(), in.flag(), in.flag()));
        break;
      case 8: {
        int nd = shape(sh);
        put(dl_avg_pool2d_backward(x, sh, nd, geom(), geom(), geom(), geom(), geom(), geom(), in.flag(),
                                   in.flag()));
        break;
      }
      case 9: put(dl_global_avg_pool2d(x, in.flag())); break;
      case 10: put(dl_dropout(x, scalar(), in.flag())); break;
      case 11: {
        uint64_t rm = in.flag() ? 0 : tensor(), rv = in.flag() ? 0 : tensor();
        if (cheap(rm) && cheap(rv)) put(dl_batch_norm(x, w, b, rm, rv, in.flag(), scalar(), scalar()));
        break;
      }
      case 12: put(dl_embedding(x, w, position())); break;
      default: put(dl_cross_entropy(x, w, in.pick(4), in.flag(), position())); break;
    }
  }

  void gradients() {
    switch (in.pick(9)) {
      case 0:
        if (grad_depth < 8 && dl_grad_enter() == 0) ++grad_depth;
        break;
      case 1:
        check_status(dl_grad_exit());
        if (grad_depth > 0) --grad_depth;
        // The tape it leaves pending: discarded, or held and later let go.
        if (in.flag()) dl_arena_done();
        else if (double serial = dl_arena_hold(); serial != 0 && in.flag()) dl_arena_free(serial);
        break;
      case 2:
        if (nograd_depth < 4 && dl_no_grad_enter() == 0) ++nograd_depth;
        if (in.flag() && nograd_depth > 0 && dl_no_grad_exit() == 0) --nograd_depth;
        break;
      case 3: put(in.flag() ? dl_watch(tensor()) : dl_detach(tensor())); break;
      case 4: {
        uint64_t x = tensor();
        switch (in.pick(4)) {
          case 0: dl_requires_grad(x); break;
          case 1: check_status(dl_mark_variable(x)); break;
          case 2: dl_is_variable(x); break;
          default: check_status(dl_watch_inplace(x)); break;
        }
        break;
      }
      case 5:
        if (in.flag()) {
          if (varlogs < 4 && dl_varlog_push() == 0) ++varlogs;
        } else {
          int n = dl_varlog_count();
          if (n > 0) put(dl_varlog_get(1 + in.pick(n)));
          if (in.flag() && varlogs > 0 && dl_varlog_pop() == 0) --varlogs;
        }
        break;
      case 6: backward(); break;
      case 7: custom(); break;
      default: {
        uint64_t a = tensor();
        put(dl_alias(a));
        break;
      }
    }
  }

  void backward() {
    uint64_t outs[3], gouts[3], ins[4];
    int nout = 1 + in.pick(2), nin = 1 + in.pick(3);
    for (int i = 0; i < nout; ++i) outs[i] = tensor(), gouts[i] = in.flag() ? 0 : tensor();
    for (int i = 0; i < nin; ++i) ins[i] = tensor();
    for (int i = 0; i < nout; ++i)
      if (!cheap(outs[i]) || !cheap(gouts[i])) return;
    int task = dl_backward_begin(outs, nout, in.flag() ? nullptr : gouts, ins, nin, in.flag(), in.flag());
    if (task < 0) {
      check_status(task);
      return;
    }
    // Custom nodes stop the engine: hand back nothing, the pending gradient, or junk.
    for (int rounds = 0; rounds < 16; ++rounds) {
      int r = dl_backward_run(task);
      if (r != 0) {
        check_status(r == 1 ? 0 : -1);
        break;
      }
      dl_backward_custom_ref(task);
      uint64_t pending[4] = {};
      if (dl_backward_pending(task, pending, 4) != 0) break;
      uint64_t supply[4] = {0, 0, 0, 0};
      int n = in.pick(5);
      for (int i = 0; i < n; ++i) supply[i] = in.flag() ? tensor() : 0;
      int st = dl_backward_supply(task, supply, n);
      for (uint64_t p : pending) if (p) dl_release_id(p);
      if (st != 0) break;
    }
    uint64_t res[4] = {};
    if (dl_backward_results(task, res, nin) == 0) {
      for (int i = 0; i < nin; ++i) put(res[i]);
    }
    if (in.flag()) dl_backward_free(task);
    else if (tasks.size() < 4) tasks.push_back(task);
    else dl_backward_free(task);
    if (in.flag() && !tasks.empty()) {  // resume or query a task kept from before
      int t = tasks[in.pick(int(tasks.size()))];
      dl_backward_run(t);
    }
  }

  void custom() {
    uint64_t ins[3] = {}, outs[3] = {};
    int nin = in.pick(4), nout = in.pick(4);
    for (int i = 0; i < nin; ++i) ins[i] = tensor();
    for (int i = 0; i < nout; ++i) outs[i] = tensor();
    uint64_t before[3];
    std::memcpy(before, outs, sizeof outs);
    if (dl_custom_record(ins, nin, outs, nout, double(1 + in.pick(100))) != 0) return;
    for (int i = 0; i < nout; ++i)
      if (outs[i] != before[i]) put(outs[i]);
    double refs[8];
    while (dl_dead_custom_refs(refs, 8) > 0) {}
  }

  // Everything back: scopes closed, tasks freed, handles released.
  void finish() {
    for (int t : tasks) dl_backward_free(t);
    while (grad_depth-- > 0) dl_grad_exit();
    // The outermost scope's arena stays pending until a gradient is taken, the next
    // scope opens or the runtime's call ends (bindings/arenas.cpp); the program ends here.
    dl_arena_done();
    while (nograd_depth-- > 0) dl_no_grad_exit();
    while (varlogs-- > 0) dl_varlog_pop();
    for (int i = 0; i < kPool; ++i) release_slot(i);
    double refs[8];
    while (dl_dead_custom_refs(refs, 8) > 0) {}
  }
};

inline double g_base_handles = 0, g_base_in_use = 0;

// Once per process: the tensor memory limit, and what is live before any program.
inline void start() {
  dl_set_memory_limit(kMemoryLimit);
  double stats[5];
  dl_memory_stats(stats);
  g_base_in_use = stats[0];
  g_base_handles = dl_live_handles();
}

// After a program's finish(): no handle and no tensor byte it made is left.
inline void check_clean() {
  if (dl_live_handles() != g_base_handles) fatal("handles leaked by the program");
  double stats[5];
  dl_memory_stats(stats);
  if (stats[0] != g_base_in_use) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.0f bytes in use, %.0f before", stats[0], g_base_in_use);
    fatal("tensor memory leaked by the program:", buf);
  }
}

// One input of a target whose programs `run` makes: seeded by the input's size (random
// tensors differ per input but replay the same), then finished and checked clean.
inline void test_one(const uint8_t* data, size_t size, void (*run)(Program&)) {
  dl_manual_seed(double(size));
  Program p(data, size);
  run(p);
  p.finish();
  check_clean();
}

}  // namespace dlfuzz

// libFuzzer's two entry points for a target whose programs `run` makes.
#define DLFUZZ_PROGRAM_TARGET(run)                                           \
  extern "C" int LLVMFuzzerInitialize(int*, char***) {                       \
    dlfuzz::start();                                                         \
    return 0;                                                                \
  }                                                                          \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {  \
    dlfuzz::test_one(data, size, run);                                       \
    return 0;                                                                \
  }

// The C ABI (bindings/capi.h): one thin function per op, each behind one guard that
// turns every exception into a status and a thread-local message.
//
// Note [The C ABI]
// Every entry point is noexcept in effect: its body runs inside guard_handle() or
// guard_status(), which catch dl::Error, std::exception and anything else. Lua-style
// dims and indices (1-based, negative from the end) are converted here, with error
// messages in those same terms, before the engine (0-based) sees them. Ops are called
// through dl::ag so that they are recorded when a gradient is being taken; only the
// non-differentiable helpers (argmax, index arithmetic, creation) call tensor/ops.h.
#include "bindings/capi.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "bindings/compile.h"
#include "bindings/guard.h"
#include "bindings/arenas.h"
#include "bindings/handles.h"
#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/functors.h"
#include "tensor/ops.h"
#include "tensor/plugin.h"
#include "tensor/small.h"
#include "tensor/half.h"
#include "tensor/half_ops.h"

using dl::DType;
using dl::Device;
using dl::ErrorKind;
using dl::Op;
using dl::OpFamily;
using dl::Scalar;
using dl::Shape;
using dl::Tensor;
using dl::TensorList;
using dl::fail;
namespace ag = dl::ag;
using dl::bind::get;
using dl::bind::SmallOperand;
using dl::bind::finish_inline;
using dl::bind::guard_value;
using dl::bind::inline_elements;
using dl::bind::check_no_escape;
using dl::bind::small_operand;
using dl::bind::value_of;
using dl::bind::operand_of;
using dl::bind::guard_handle;
using dl::bind::guard_status;
using dl::bind::guard_status_nosync;

namespace {

// ---- arguments -----------------------------------------------------------------------

const dl::OpInfo& op_of(int op, OpFamily family, const char* entry) {
  if (op < 0 || op >= dl::kNumOps) fail(ErrorKind::Value, entry, ": unknown op id ", op);
  const dl::OpInfo& info = dl::op_info(Op(op));
  if (info.family != family) fail(ErrorKind::Value, entry, ": ", info.lua_name, " is not in this op family");
  return info;
}

DType dtype_of(int code, const char* op) {
  if (code < 0 || code >= dl::kNumDTypes) fail(ErrorKind::Type, op, ": unknown dtype code ", code);
  return DType(code);
}

// Where creation ops put their tensors when given no device: per thread, as the Lua
// states that set it (dl.device("cuda", f)) each run on one thread.
thread_local Device g_default_device{};
thread_local std::string g_default_device_name = "cpu";

Device device_of(const char* name) { return name ? dl::parse_device(name) : g_default_device; }

// Note [NaN payloads reaching Lua]
// LuaJIT stores every value in a NaN-boxed 64-bit slot: a double whose bits form a NaN
// with certain payloads reads as another type (nil, a table, a pointer) once it sits in
// a Lua slot, and JIT-compiled code loads doubles from FFI buffers without
// canonicalising them. A tensor's bytes can be anything (a safetensors file, a host's
// buffer), so every element value this ABI hands to Lua passes through lua_number:
// any NaN becomes the one quiet NaN. (tests/fuzz: fuzz_checkpoint saw a forged nil; a
// JIT-compiled read of such a value crashed dlua.)
inline double lua_number(double v) { return v == v ? v : std::numeric_limits<double>::quiet_NaN(); }

Shape shape_of(const int64_t* sizes, int n, const char* op) {
  if (n < 0 || n > dl::kMaxDims)
    fail(ErrorKind::Value, op, ": at most ", dl::kMaxDims, " dimensions are supported, got ", n);
  if (n > 0 && !sizes) fail(ErrorKind::Value, op, ": no sizes given");
  return Shape(sizes, n);
}

// A Lua dim (1..n or -n..-1) of a tensor with `ndim` dims, 0-based. A 0-dim tensor
// accepts 1 and -1, as PyTorch accepts 0 and -1.
int lua_dim(int64_t d, int ndim, const char* op) {
  int64_t n = ndim > 0 ? ndim : 1;
  if (d >= 1 && d <= n) return int(d - 1);
  if (d <= -1 && d >= -n) return int(d + n);
  fail(ErrorKind::Index, op, ": dimension ", d, " out of range for a tensor of ", ndim,
       ndim == 1 ? " dimension" : " dimensions", " (expected 1..", n, " or -", n, "..-1)");
}

// A Lua index (1..size or -size..-1) along dim `d0` (0-based) of size `size`, 0-based.
int64_t lua_index(int64_t i, int64_t size, int d0, const char* op) {
  if (i >= 1 && i <= size) return i - 1;
  if (i <= -1 && i >= -size) return i + size;
  fail(ErrorKind::Index, op, ": index ", i, " out of range for dimension ", d0 + 1, " of size ", size);
}

// An index tensor holding 1-based indices into a dim of size `size`, made 0-based.
Tensor index_from_lua(const Tensor& index, int64_t size, int d0, const char* op) {
  DL_CHECK_KIND(Type, index.dtype() == DType::Int64 || index.dtype() == DType::Int32, op,
                ": expected an int64 or int32 index tensor, got ", dl::dtype_name(index.dtype()));
  if (index.numel() > 0) {
    dl::Unobserved check;   // not an op of an exported graph (tensor/observe.h)
    // Read exactly, as int64 (through a double, 2^63 - 1 rounds up to 2^63, which no
    // int64 holds; found by tests/fuzz: fuzz_ops).
    auto extreme = [&](Op which) {
      Tensor r = dl::reduce(which, index, {}, false);
      Tensor host = dl::empty(Shape{}, DType::Int64, Device{}, op);
      dl::copy_(host, r);  // to the host and to int64
      return host.data<int64_t>()[0];
    };
    int64_t lo = extreme(Op::Amin), hi = extreme(Op::Amax);
    if (lo < 1 || hi > size) {
      fail(ErrorKind::Index, op, ": index ", lo < 1 ? lo : hi, " out of range for dimension ", d0 + 1,
           " of size ", size, " (indices are 1-based)");
    }
  }
  return dl::binary(Op::Sub, index, Scalar::integer(1));
}

Tensor plus_one(const Tensor& t) { return dl::binary(Op::Add, t, Scalar::integer(1)); }

}  // namespace

extern "C" {

const char* dl_cdef(void) {
  static const char text[] =
#include "cdef.inc"
      ;
  return text;
}

int dl_abi_version(void) { return 1; }

// ---- op table ------------------------------------------------------------------------

int dl_op_count(void) { return dl::kNumOps; }

const char* dl_op_name(int op) {
  return op >= 0 && op < dl::kNumOps ? dl::op_info(Op(op)).lua_name : nullptr;
}

int dl_op_family(int op) {
  return op >= 0 && op < dl::kNumOps ? int(dl::op_info(Op(op)).family) : -1;
}

int dl_op_arity(int op) { return op >= 0 && op < dl::kNumOps ? dl::op_info(Op(op)).arity : 0; }

unsigned dl_op_flags(int op) { return op >= 0 && op < dl::kNumOps ? dl::op_info(Op(op)).flags : 0; }

int dl_op_id(const char* name) {
  if (!name) return -1;
  for (int i = 0; i < dl::kNumOps; ++i)
    if (std::strcmp(dl::op_info(Op(i)).lua_name, name) == 0) return i;
  return -1;
}

// ---- dtypes, devices, random numbers --------------------------------------------------

int dl_dtype_count(void) { return dl::kNumDTypes; }

const char* dl_dtype_name(int code) {
  return code >= 0 && code < dl::kNumDTypes ? dl::dtype_name(DType(code)).data() : nullptr;
}

int dl_dtype_code(const char* name) {
  int code = -1;
  guard_status([&] {
    if (!name) fail(ErrorKind::Type, "dtype: no dtype name given");
    code = int(dl::dtype_from_name(name));
  });
  return code;
}

int dl_dtype_size(int code) {
  return code >= 0 && code < dl::kNumDTypes ? int(dl::itemsize(DType(code))) : 0;
}

int dl_default_dtype(void) { return int(dl::default_float()); }

int dl_result_type(uint64_t a, uint64_t b, double s) {
  int code = -1;
  guard_status([&] {
    const Tensor& x = get(a, "result_type");
    code = int(b ? dl::result_type(x, get(b, "result_type")) : dl::result_type(x, Scalar::from_lua(s)));
  });
  return code;
}

int dl_promote_types(int a, int b) {
  int code = -1;
  guard_status([&] { code = int(dl::promote(dtype_of(a, "promote_types"), dtype_of(b, "promote_types"))); });
  return code;
}

int dl_can_cast(int from, int to) {
  int code = -1;
  guard_status([&] { code = dl::can_cast(dtype_of(from, "can_cast"), dtype_of(to, "can_cast")) ? 1 : 0; });
  return code;
}

int dl_check_fits(const char* op, double v, int dtype) {
  return guard_status([&] { dl::check_fits(op, v, dtype_of(dtype, op)); });
}

int dl_set_default_dtype(int code) {
  return guard_status([&] { dl::set_default_float(dtype_of(code, "set_default_dtype")); });
}

int dl_check_device(const char* name) {
  return guard_status([&] { dl::parse_device(name ? name : ""); });
}

int dl_cuda_available(void) {
  try {
    return dl::cuda::available() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int dl_cuda_device_count(void) {
  try {
    return dl::cuda::device_count();
  } catch (...) {
    return 0;
  }
}

const char* dl_cuda_status(void) {
  try {
    return dl::cuda::status().c_str();
  } catch (...) {
    return "cuda: status unknown";
  }
}

int dl_cuda_synchronize(int device) {
  return guard_status([&] { dl::cuda::synchronize(device); });
}

int dl_cuda_memory_stats(int device, double* out) {
  return guard_status([&] {
    DL_CHECK(out, "cuda.memory_stats: no output buffer");
    dl::CudaMemoryStats m = dl::cuda::memory_stats(device);
    out[0] = double(m.in_use);
    out[1] = double(m.cached);
    out[2] = double(m.peak_in_use);
    out[3] = double(m.device_free);
    out[4] = double(m.device_total);
  });
}

int dl_cuda_device_name(int device, char* out, int size) {
  return guard_status([&] {
    DL_CHECK(out && size > 0, "cuda.get_device_name: no output buffer");
    std::string name = dl::cuda::device_name(device);
    std::snprintf(out, size_t(size), "%s", name.c_str());
  });
}

void dl_cuda_empty_cache(void) { dl::cuda::empty_cache(); }

int dl_set_default_device(const char* name) {
  return guard_status([&] {
    Device d = name ? dl::parse_device(name) : Device{};
    if (d.is_cuda()) dl::backend_for(d, "device");  // fails now, naming why, if it cannot be used
    g_default_device = d;
    g_default_device_name = d.str();
  });
}

const char* dl_default_device(void) { return g_default_device_name.c_str(); }

double dl_device_bytes_in_use(void) { return double(dl::device_memory::in_use()); }

void dl_manual_seed(double seed) {
  dl::manual_seed(uint64_t(int64_t(seed)));
}

double dl_initial_seed(void) { return double(dl::initial_seed()); }

void dl_rng_state(double* out2) {
  const dl::RngState s = dl::rng_state();
  out2[0] = double(s.seed);
  out2[1] = double(s.offset);
}

int dl_set_rng_state(double seed, double offset) {
  return guard_status([&] {
    DL_CHECK(seed >= 0 && seed < 9007199254740992.0 && seed == std::floor(seed) && offset >= 0 &&
                 offset < 9007199254740992.0 && offset == std::floor(offset),
             "set_rng_state: expected a state from get_rng_state (whole numbers below 2^53), got seed ",
             seed, " and offset ", offset);
    dl::set_rng_state(dl::RngState{uint64_t(seed), uint64_t(offset)});
  });
}

// ---- handles and memory ----------------------------------------------------------------

void dl_release(const struct dl_tensor* t) { dl::bind::handle_release(t->id); }
void dl_release_id(uint64_t id) { dl::bind::handle_release(id); }
int dl_valid(uint64_t id) { return dl::bind::handle_valid(id) ? 1 : 0; }

uint64_t dl_alias(uint64_t id) {
  return guard_handle([&] { return get(id, "alias"); });
}

uint64_t dl_promote(struct dl_tensor* t) {
  uint64_t id = 0;
  guard_status([&] { id = dl::bind::promote(t); });
  return id;
}

int dl_deliver(uint64_t id, struct dl_tensor* out) {
  return guard_value(out, [&] {
    Tensor t = get(id, "tensor");
    dl::bind::handle_release(id);
    return t;
  });
}

double dl_live_handles(void) { return double(dl::bind::handle_count()); }
const double* dl_allocated_total(void) { return dl::bind::allocated_total(); }

void dl_memory_stats(double* out) {
  if (!out) return;
  dl::AllocatorStats s = dl::host_allocator::stats();
  out[0] = double(s.in_use);
  out[1] = double(s.cached);
  out[2] = double(s.peak_in_use);
  out[3] = double(s.limit);
  out[4] = double(dl::bind::handle_count());
}

void dl_set_memory_limit(double bytes) {
  dl::host_allocator::set_limit(bytes > 0 ? int64_t(bytes) : 0);
}

void dl_trim_idle_cache(void) { dl::host_allocator::trim_idle(); }

int dl_set_num_threads(int n) {
  return guard_status([&] { dl::set_cpu_threads(n); });
}

int dl_get_num_threads(void) { return dl::cpu_threads(); }

int dl_set_autocast(int enabled, int dtype) {
  int previous = -1;
  guard_status([&] {
    DL_CHECK_KIND(Type, dtype == int(DType::Float16) || dtype == int(DType::BFloat16),
                  "autocast: expected dtype float16 or bfloat16, got ",
                  dtype >= 0 && dtype < dl::kNumDTypes ? dl::dtype_name(DType(dtype)) : "an unknown code");
    previous = (dl::t_autocast.enabled ? 256 : 0) + int(dl::t_autocast.dtype);
    dl::t_autocast = {enabled != 0, DType(dtype)};
  });
  return previous;
}

const char* dl_blas_info(int field) {
  thread_local std::string text;
  dl::BlasInfo b;
  if (guard_status([&] { b = dl::blas_info(); }) != 0) return nullptr;   // OpenBLAS did not load
  switch (field) {
    case 0: text = b.core; break;
    case 1: text = b.detected; break;
    case 2: text = b.chosen_by; break;
    case 3: text = b.config; break;
    case 4: text = std::to_string(b.threads); break;
    default: return nullptr;
  }
  return text.c_str();
}

const char* dl_engine_dir(void) {
  static const std::string dir = dl::engine_dir();
  return dir.c_str();
}

void dl_empty_cache(void) {
  dl::host_allocator::empty_cache();
  dl::cuda::empty_cache();  // only when the plugin is loaded
}

// ---- metadata and elements ---------------------------------------------------------------

int dl_meta_get(const struct dl_tensor* x, dl_meta* out) {
  if (dl::compile::current() && dl::bind::proxy_meta(x, out)) return 0;
  return guard_status_nosync([&] {
    Tensor t = value_of(x, "tensor");
    out->ndim = t.dim();
    out->dtype = int(t.dtype());
    out->device_type = int(t.device().type);
    out->device_index = t.device().index;
    out->contiguous = t.is_contiguous() ? 1 : 0;
    out->requires_grad = ag::requires_grad(t) ? 1 : 0;
    out->numel = double(t.numel());
    out->offset = double(t.offset());
    for (int d = 0; d < dl::kMaxDims; ++d) {
      out->sizes[d] = d < t.dim() ? double(t.size(d)) : 0;
      out->strides[d] = d < t.dim() ? double(t.stride(d)) : 0;
    }
  });
}

int dl_ndim(const struct dl_tensor* x) {
  dl_meta m;
  if (dl::compile::current() && dl::bind::proxy_meta(x, &m)) return m.ndim;
  int n = -1;
  guard_status_nosync([&] {
    SmallOperand v;
    n = small_operand(x, &v) ? v.ndim : value_of(x, "dim").dim();
  });
  return n;
}

double dl_numel(const struct dl_tensor* x) {
  dl_meta m;
  if (dl::compile::current() && dl::bind::proxy_meta(x, &m)) return m.numel;
  double n = -1;
  guard_status_nosync([&] {
    SmallOperand v;
    n = double(small_operand(x, &v) ? v.numel : value_of(x, "numel").numel());
  });
  return n;
}

int dl_dtype(const struct dl_tensor* x) {
  dl_meta m;
  if (dl::compile::current() && dl::bind::proxy_meta(x, &m)) return m.dtype;
  int d = -1;
  guard_status_nosync([&] {
    SmallOperand v;
    d = int(small_operand(x, &v) ? v.dtype : value_of(x, "dtype").dtype());
  });
  return d;
}

int dl_item(const struct dl_tensor* x, double* out) {
  return guard_status([&] {
    check_no_escape("item");
    SmallOperand v;
    if (small_operand(x, &v) && v.numel == 1) {
      DL_DISPATCH_STORAGE(v.dtype, "item", *out = lua_number(double(*static_cast<const scalar_t*>(v.data))));
      return;
    }
    *out = lua_number(value_of(x, "item").item());
  });
}

int dl_get1(const struct dl_tensor* x, int64_t i, double* out) {
  int code = -1;
  guard_status([&] {
    SmallOperand v;
    if (small_operand(x, &v)) {
      if (v.ndim != 1) {
        code = 1;
        return;
      }
      int64_t i0 = lua_index(i, v.numel, 0, "index");
      DL_DISPATCH_STORAGE(v.dtype, "index", *out = lua_number(double(static_cast<const scalar_t*>(v.data)[i0])));
      code = v.dtype == DType::Bool ? 2 : 0;
      return;
    }
    Tensor t = value_of(x, "index");
    // Not a plain number when the element's gradient is wanted: the Lua side then
    // takes the select() path, which records.
    if (t.dim() != 1 || ag::requires_grad(t)) {
      code = 1;
      return;
    }
    check_no_escape("x[i] of a 1-D tensor");
    int64_t i0 = lua_index(i, t.size(0), 0, "index");
    if (!t.device().is_cpu()) {
      *out = lua_number(dl::select(t, 0, i0).item());
    } else {
      int64_t off = i0 * t.stride(0);
      DL_DISPATCH_STORAGE(t.dtype(), "index", *out = lua_number(double(t.data<scalar_t>()[off])));
    }
    code = t.dtype() == DType::Bool ? 2 : 0;
  });
  return code;
}

int dl_set1(uint64_t id, int64_t i, double v) {
  int code = -1;
  guard_status([&] {
    check_no_escape("x[i] = v");   // an in-place write
    Tensor t = get(id, "index");
    if (t.dim() != 1) {
      code = 1;
      return;
    }
    int64_t i0 = lua_index(i, t.size(0), 0, "index");
    if (ag::is_recording() || !t.device().is_cpu()) {
      // Through the recording layer, so that a write into recorded history is seen.
      Tensor s = ag::select(t, 0, i0);
      ag::fill_(s, Scalar::from_lua(v));
    } else {
      int64_t off = i0 * t.stride(0);
      dl::check_fits("x[i] = v", v, t.dtype());
      DL_DISPATCH_STORAGE(t.dtype(), "index", t.data<scalar_t>()[off] = dl::fill_value<scalar_t>(v));
      t.storage().bump_version();
    }
    code = 0;
  });
  return code;
}

// Reading allocates nothing on the host (a script must be able to look at its tensors
// when the tensor memory limit is reached): small values are read in place, host
// tensors through their strides.
int dl_read(const struct dl_tensor* x, double* out, int64_t n) {
  return guard_status([&] {
    check_no_escape("reading the values");
    SmallOperand v;
    if (small_operand(x, &v)) {
      DL_CHECK(n == v.numel, "read: the tensor has ", v.numel, " elements, not ", n);
      DL_DISPATCH_STORAGE(v.dtype, "read", {
        const scalar_t* p = static_cast<const scalar_t*>(v.data);
        for (int64_t k = 0; k < n; ++k) out[k] = lua_number(double(p[k]));
      });
      return;
    }
    Tensor t = value_of(x, "read");
    DL_CHECK(n == t.numel(), "read: the tensor has ", t.numel(), " elements, not ", n);
    if (n == 0) return;
    if (!t.device().is_cpu()) {
      Tensor host = dl::empty(t.shape(), t.dtype(), Device{}, "read");
      dl::copy_(host, t);
      t = host;
    }
    const int nd = t.dim();
    int64_t idx[dl::kMaxDims] = {};
    DL_DISPATCH_STORAGE(t.dtype(), "read", {
      const scalar_t* p = t.data<scalar_t>();  // element 0; walked by its strides
      int64_t off = 0;
      for (int64_t k = 0; k < n; ++k) {
        out[k] = lua_number(double(p[off]));
        // The next index, row-major. Offsets stay among the elements' own (a size-1
        // dim's stride can be anything, even 2^63 - 1, and is never added).
        for (int d = nd - 1; d >= 0; --d) {
          if (t.size(d) == 1) continue;
          if (++idx[d] < t.size(d)) {
            off += t.stride(d);
            break;
          }
          off -= t.stride(d) * (t.size(d) - 1);
          idx[d] = 0;
        }
      }
    });
  });
}

int dl_read_at(const struct dl_tensor* x, const int64_t* idx, double* out) {
  return guard_status([&] {
    check_no_escape("reading a value");
    Tensor t = value_of(x, "read");
    for (int d = 0; d < t.dim(); ++d)
      DL_CHECK_KIND(Index, idx[d] >= 0 && idx[d] < t.size(d), "read: index ", idx[d] + 1,
                    " out of range for dimension ", d + 1, " of size ", t.size(d));
    *out = lua_number(t.value_at(idx));
  });
}

int dl_data_ptr(uint64_t id, double* out) {
  return guard_status([&] {
    check_no_escape("data_ptr");
    const Tensor& t = get(id, "data_ptr");
    *out = double(reinterpret_cast<uintptr_t>(t.raw_data()));
  });
}

int dl_mark_written(uint64_t id) {
  return guard_status([&] { get(id, "data_ptr").storage().bump_version(); });
}

// ---- creation -----------------------------------------------------------------------------

uint64_t dl_empty(const int64_t* shape, int ndim, int dtype, const char* device) {
  return guard_handle([&] {
    Shape s = shape_of(shape, ndim, "empty");
    DType dt = dtype_of(dtype, "empty");
    // A bool byte other than 0 or 1 is undefined behaviour to read in C++, so an
    // "uninitialised" bool tensor is all false (found by tests/fuzz: fuzz_ops).
    if (dt == DType::Bool) return dl::zeros(s, dt, device_of(device));
    return dl::empty(s, dt, device_of(device), "empty");
  });
}

uint64_t dl_zeros(const int64_t* shape, int ndim, int dtype, const char* device) {
  return guard_handle([&] {
    return dl::zeros(shape_of(shape, ndim, "zeros"), dtype_of(dtype, "zeros"), device_of(device));
  });
}

uint64_t dl_ones(const int64_t* shape, int ndim, int dtype, const char* device) {
  return guard_handle([&] {
    return dl::ones(shape_of(shape, ndim, "ones"), dtype_of(dtype, "ones"), device_of(device));
  });
}

uint64_t dl_full(const int64_t* shape, int ndim, double value, int dtype, const char* device) {
  return guard_handle([&] {
    const DType dt = dtype_of(dtype, "full");
    dl::check_fits("full", value, dt);
    return dl::full(shape_of(shape, ndim, "full"), Scalar::from_lua(value), dt, device_of(device));
  });
}

uint64_t dl_arange(double start, double stop, double step, int dtype, const char* device) {
  return guard_handle([&] { return dl::arange(start, stop, step, dtype_of(dtype, "arange"), device_of(device)); });
}

uint64_t dl_linspace(double start, double stop, int64_t n, int dtype, const char* device) {
  return guard_handle([&] { return dl::linspace(start, stop, n, dtype_of(dtype, "linspace"), device_of(device)); });
}

uint64_t dl_eye(int64_t n, int64_t m, int dtype, const char* device) {
  return guard_handle([&] { return dl::eye(n, m, dtype_of(dtype, "eye"), device_of(device)); });
}

uint64_t dl_rand(const int64_t* shape, int ndim, int dtype, const char* device) {
  return guard_handle([&] {
    return dl::rand(shape_of(shape, ndim, "rand"), dtype_of(dtype, "rand"), device_of(device));
  });
}

uint64_t dl_randn(const int64_t* shape, int ndim, int dtype, const char* device) {
  return guard_handle([&] {
    return dl::randn(shape_of(shape, ndim, "randn"), dtype_of(dtype, "randn"), device_of(device));
  });
}

uint64_t dl_randint(double lo, double hi, const int64_t* shape, int ndim, int dtype, const char* device) {
  return guard_handle([&] {
    DL_CHECK(std::floor(lo) == lo && std::floor(hi) == hi && std::fabs(lo) < 9e18 && std::fabs(hi) < 9e18,
             "randint: bounds must be integers, got ", lo, " and ", hi);
    return dl::randint(int64_t(lo), int64_t(hi), shape_of(shape, ndim, "randint"), dtype_of(dtype, "randint"),
                       device_of(device));
  });
}

uint64_t dl_randperm(int64_t n, int dtype) {
  return guard_handle([&] { return plus_one(dl::randperm(n, dtype_of(dtype, "randperm"))); });
}

uint64_t dl_from_values(const double* values, int64_t n, const int64_t* shape, int ndim, int dtype,
                        const char* device) {
  return guard_handle([&] {
    return dl::from_values(values, n, shape_of(shape, ndim, "tensor"), dtype_of(dtype, "tensor"),
                           device_of(device));
  });
}

uint64_t dl_from_ptr(void* data, const int64_t* shape, int ndim, const int64_t* strides, int dtype) {
  return guard_handle([&] {
    Shape sh = shape_of(shape, ndim, "from_ptr");
    Shape st = strides ? shape_of(strides, ndim, "from_ptr") : Shape();
    return dl::from_blob(data, sh, st, dtype_of(dtype, "from_ptr"));
  });
}

// ---- op families --------------------------------------------------------------------------

// The fast paths of the pointwise families (Note [Small tensors inline]): small
// operands of one float dtype, of one shape or one of them 0-d, computed straight into
// an inline result. False: the general path.
namespace {

// A valid op id of this family (op_of() says what is wrong with the others, on the
// general path).
bool of_family(int op, OpFamily family) {
  return op >= 0 && op < dl::kNumOps && dl::op_info(Op(op)).family == family;
}

bool small_unary(int op, const struct dl_tensor* x, struct dl_tensor* out) {
  SmallOperand v;
  if (!of_family(op, OpFamily::Unary)) return false;
  if (!small_operand(x, &v)) return false;
  if (!dl::small::unary(Op(op), v.dtype, inline_elements(out), v.data, v.numel)) return false;
  finish_inline(out, Op(op) == Op::Logical_not ? DType::Bool : v.dtype, v);
  return true;
}

bool small_binary(int op, OpFamily family, const struct dl_tensor* a, const struct dl_tensor* b,
                  struct dl_tensor* out) {
  SmallOperand x, y;
  if (!of_family(op, family)) return false;
  if (!small_operand(a, &x) || !small_operand(b, &y) || x.dtype != y.dtype) return false;
  // The result's shape: both operands', or the dimensioned one's when the other is 0-d
  // (read with step 0).
  const SmallOperand* like = &x;
  int step_a = 1, step_b = 1;
  if (x.ndim != y.ndim || x.sizes != y.sizes) {
    if (y.ndim == 0) {
      step_b = 0;
    } else if (x.ndim == 0) {
      step_a = 0;
      like = &y;
    } else {
      return false;
    }
  }
  if (!dl::small::binary(Op(op), x.dtype, inline_elements(out), x.data, step_a, y.data, step_b,
                         like->numel))
    return false;
  finish_inline(out, family == OpFamily::Compare ? DType::Bool : x.dtype, *like);
  return true;
}

bool small_binary_scalar(int op, OpFamily family, const struct dl_tensor* a, double s, int first,
                         struct dl_tensor* out) {
  SmallOperand x;
  if (!of_family(op, family)) return false;
  if (!small_operand(a, &x)) return false;
  if (!dl::small::binary_scalar(Op(op), x.dtype, inline_elements(out), x.data, s, first != 0, x.numel))
    return false;
  finish_inline(out, family == OpFamily::Compare ? DType::Bool : x.dtype, x);
  return true;
}

}  // namespace

int dl_unary(int op, const struct dl_tensor* x, struct dl_tensor* out) {
  bool at_once = dl::bind::runs_at_once(x);
  if (!at_once && dl::compile::current()) {
    const int st = dl::bind::defer_unary(op, x, out);
    if (dl::bind::answered(st, &at_once)) return st;
  }
  if (small_unary(op, x, out)) return 0;
  return guard_value(out, [&] {
    const dl::OpInfo& info = op_of(op, OpFamily::Unary, "unary");
    return ag::unary(info.op, operand_of(x, info.lua_name));
  }, !at_once);
}

int dl_binary(int op, const struct dl_tensor* a, const struct dl_tensor* b, struct dl_tensor* out) {
  bool at_once = dl::bind::runs_at_once(a, b);
  if (!at_once && dl::compile::current()) {
    const int st = dl::bind::defer_binary(op, a, b, out);
    if (dl::bind::answered(st, &at_once)) return st;
  }
  if (small_binary(op, OpFamily::Binary, a, b, out)) return 0;
  return guard_value(out, [&] {
    const dl::OpInfo& info = op_of(op, OpFamily::Binary, "binary");
    return ag::binary(info.op, operand_of(a, info.lua_name), operand_of(b, info.lua_name));
  }, !at_once);
}

int dl_binary_scalar(int op, const struct dl_tensor* a, double s, int scalar_first,
                     struct dl_tensor* out) {
  bool at_once = dl::bind::runs_at_once(a);
  if (!at_once && dl::compile::current()) {
    const int st = dl::bind::defer_binary_scalar(op, a, s, scalar_first, out);
    if (dl::bind::answered(st, &at_once)) return st;
  }
  if (small_binary_scalar(op, OpFamily::Binary, a, s, scalar_first, out)) return 0;
  return guard_value(out, [&] {
    const dl::OpInfo& info = op_of(op, OpFamily::Binary, "binary");
    return ag::binary(info.op, operand_of(a, info.lua_name), Scalar::from_lua(s), scalar_first != 0);
  }, !at_once);
}

int dl_binary_(int op, uint64_t a, uint64_t b) {
  return guard_status([&] {
    const dl::OpInfo& info = op_of(op, OpFamily::Binary, "binary_");
    Tensor t = get(a, info.lua_name);
    ag::binary_(info.op, t, get(b, info.lua_name));
  });
}

int dl_binary_scalar_(int op, uint64_t a, double s) {
  return guard_status([&] {
    const dl::OpInfo& info = op_of(op, OpFamily::Binary, "binary_");
    Tensor t = get(a, info.lua_name);
    ag::binary_(info.op, t, Scalar::from_lua(s));
  });
}

int dl_compare(int op, const struct dl_tensor* a, const struct dl_tensor* b, struct dl_tensor* out) {
  bool at_once = dl::bind::runs_at_once(a, b);
  if (!at_once && dl::compile::current()) {
    const int st = dl::bind::defer_compare(op, a, b, out);
    if (dl::bind::answered(st, &at_once)) return st;
  }
  if (small_binary(op, OpFamily::Compare, a, b, out)) return 0;
  return guard_value(out, [&] {
    const dl::OpInfo& info = op_of(op, OpFamily::Compare, "compare");
    return ag::compare(info.op, operand_of(a, info.lua_name), operand_of(b, info.lua_name));
  }, !at_once);
}

int dl_compare_scalar(int op, const struct dl_tensor* a, double s, int scalar_first,
                      struct dl_tensor* out) {
  bool at_once = dl::bind::runs_at_once(a);
  if (!at_once && dl::compile::current()) {
    const int st = dl::bind::defer_compare_scalar(op, a, s, scalar_first, out);
    if (dl::bind::answered(st, &at_once)) return st;
  }
  if (small_binary_scalar(op, OpFamily::Compare, a, s, scalar_first, out)) return 0;
  return guard_value(out, [&] {
    const dl::OpInfo& info = op_of(op, OpFamily::Compare, "compare");
    return ag::compare(info.op, operand_of(a, info.lua_name), Scalar::from_lua(s), scalar_first != 0);
  }, !at_once);
}

int dl_reduce(int op, const struct dl_tensor* x, const int32_t* dims, int ndims, int keepdim,
              double correction, double p, struct dl_tensor* out) {
  bool at_once = dl::bind::runs_at_once(x);
  if (!at_once && dl::compile::current()) {
    const int st = dl::bind::defer_reduce(op, x, dims, ndims, keepdim, out);
    if (dl::bind::answered(st, &at_once)) return st;
  }
  return guard_value(out, [&] {
    const dl::OpInfo& info = op_of(op, OpFamily::Reduce, "reduce");
    Tensor t = value_of(x, info.lua_name);
    DL_CHECK(ndims >= 0 && ndims <= dl::kMaxDims && (ndims == 0 || dims), info.lua_name,
             ": bad list of dims");
    std::vector<int> ds;
    for (int i = 0; i < ndims; ++i) {
      int d = lua_dim(dims[i], t.dim(), info.lua_name);
      for (int e : ds)
        DL_CHECK_KIND(Index, e != d, info.lua_name, ": dimension ", d + 1, " appears more than once in the dims");
      ds.push_back(d);
    }
    dl::ReduceOpts opts;
    opts.correction = correction;
    opts.p = p;
    return ag::reduce(info.op, t, ds, keepdim != 0, opts);
  }, !at_once);
}

// ---- the other ops ------------------------------------------------------------------------

namespace {
int extremum_dim(bool is_max, uint64_t x, int dim, int keepdim, uint64_t* out2) {
  out2[0] = out2[1] = 0;
  return guard_status([&] {
    const char* name = is_max ? "max" : "min";
    const Tensor& t = get(x, name);
    int d = lua_dim(dim, t.dim(), name);
    auto r = is_max ? ag::max_dim(t, d, keepdim != 0) : ag::min_dim(t, d, keepdim != 0);
    Tensor idx = plus_one(r.second);
    dl::bind::handles_new({r.first, idx}, out2);
  });
}

uint64_t arg_index(bool is_max, uint64_t x, int dim, int keepdim) {
  return guard_handle([&] {
    const char* name = is_max ? "argmax" : "argmin";
    const Tensor& t = get(x, name);
    std::optional<int> d;
    if (dim != 0) d = lua_dim(dim, t.dim(), name);
    return plus_one(is_max ? dl::argmax(t, d, keepdim != 0) : dl::argmin(t, d, keepdim != 0));
  });
}

TensorList tensor_list(const uint64_t* xs, int n, const char* op) {
  DL_CHECK(n >= 0 && (n == 0 || xs), op, ": bad tensor list");
  TensorList list;
  list.reserve(size_t(n));
  for (int i = 0; i < n; ++i) list.push_back(get(xs[i], op));
  return list;
}
}  // namespace

int dl_max_dim(uint64_t x, int dim, int keepdim, uint64_t* out2) { return extremum_dim(true, x, dim, keepdim, out2); }
int dl_min_dim(uint64_t x, int dim, int keepdim, uint64_t* out2) { return extremum_dim(false, x, dim, keepdim, out2); }
uint64_t dl_argmax(uint64_t x, int dim, int keepdim) { return arg_index(true, x, dim, keepdim); }
uint64_t dl_argmin(uint64_t x, int dim, int keepdim) { return arg_index(false, x, dim, keepdim); }

uint64_t dl_cumsum(uint64_t x, int dim) {
  return guard_handle([&] {
    const Tensor& t = get(x, "cumsum");
    return ag::cumsum(t, lua_dim(dim, t.dim(), "cumsum"));
  });
}

uint64_t dl_fft_c2c(uint64_t x, int inverse) {
  return guard_handle([&] { return ag::fft_c2c(get(x, "fft"), inverse != 0); });
}
uint64_t dl_fft_r2c(uint64_t x, int weight) {
  return guard_handle([&] { return ag::fft_r2c(get(x, "rfft"), weight); });
}
uint64_t dl_fft_c2r(uint64_t y, int64_t n, int weight) {
  return guard_handle([&] { return ag::fft_c2r(get(y, "irfft"), n, weight); });
}

// Sorting and selection: sort's indices, nonzero's positions and searchsorted's insertion
// points (in [1, n + 1]) are 1-based, as Lua counts.
int dl_sort(uint64_t x, int dim, int descending, uint64_t* out2) {
  out2[0] = out2[1] = 0;
  return guard_status([&] {
    const Tensor& t = get(x, "sort");
    auto r = ag::sort(t, lua_dim(dim, t.dim(), "sort"), descending != 0);
    Tensor idx = plus_one(r.second);
    dl::bind::handles_new({r.first, idx}, out2);
  });
}

uint64_t dl_nonzero(uint64_t x) {
  return guard_handle([&] { return plus_one(dl::nonzero(get(x, "nonzero"))); });
}

uint64_t dl_searchsorted(uint64_t seq, uint64_t values, int right) {
  return guard_handle([&] {
    return plus_one(dl::searchsorted(get(seq, "searchsorted"), get(values, "searchsorted"), right != 0));
  });
}

uint64_t dl_cumprod(uint64_t x, int dim) {
  return guard_handle([&] {
    const Tensor& t = get(x, "cumprod");
    return ag::cumprod(t, lua_dim(dim, t.dim(), "cumprod"));
  });
}

uint64_t dl_softmax(uint64_t x, int dim) {
  return guard_handle([&] {
    const Tensor& t = get(x, "softmax");
    return ag::softmax(t, lua_dim(dim, t.dim(), "softmax"));
  });
}

uint64_t dl_log_softmax(uint64_t x, int dim) {
  return guard_handle([&] {
    const Tensor& t = get(x, "log_softmax");
    return ag::log_softmax(t, lua_dim(dim, t.dim(), "log_softmax"));
  });
}

int dl_softmax_value(const struct dl_tensor* x, int dim, int log, struct dl_tensor* out) {
  bool at_once = dl::bind::runs_at_once(x);
  if (!at_once && dl::compile::current()) {
    const int st = dl::bind::defer_softmax(int(log ? Op::LogSoftmax : Op::Softmax), x, dim, out);
    if (dl::bind::answered(st, &at_once)) return st;
  }
  const char* name = log ? "log_softmax" : "softmax";
  return guard_value(out, [&] {
    const Tensor t = value_of(x, name);
    const int d = lua_dim(dim, t.dim(), name);
    return log ? ag::log_softmax(t, d) : ag::softmax(t, d);
  }, !at_once);
}

uint64_t dl_where(uint64_t cond, uint64_t a, uint64_t b) {
  return guard_handle([&] { return ag::where(get(cond, "where"), get(a, "where"), get(b, "where")); });
}

uint64_t dl_clamp(uint64_t x, double lo, double hi, int has_lo, int has_hi) {
  return guard_handle([&] {
    std::optional<double> l, h;
    if (has_lo) l = lo;
    if (has_hi) h = hi;
    return ag::clamp(get(x, "clamp"), l, h);
  });
}

uint64_t dl_masked_fill(uint64_t x, uint64_t mask, double value) {
  return guard_handle([&] {
    return ag::masked_fill(get(x, "masked_fill"), get(mask, "masked_fill"), Scalar::from_lua(value));
  });
}

uint64_t dl_matmul(uint64_t a, uint64_t b) {
  return guard_handle([&] { return ag::matmul(get(a, "matmul"), get(b, "matmul")); });
}

int dl_matmul_value(const struct dl_tensor* a, const struct dl_tensor* b, struct dl_tensor* out) {
  bool at_once = dl::bind::runs_at_once(a, b);
  if (!at_once && dl::compile::current()) {
    const int st = dl::bind::defer_matmul(a, b, out);
    if (dl::bind::answered(st, &at_once)) return st;
  }
  return guard_value(out, [&] { return ag::matmul(value_of(a, "matmul"), value_of(b, "matmul")); }, !at_once);
}

uint64_t dl_to(uint64_t x, int dtype) {
  return guard_handle([&] { return ag::cast(get(x, "to"), dtype_of(dtype, "to")); });
}

uint64_t dl_to_device(uint64_t x, const char* device) {
  return guard_handle([&] { return ag::to_device(get(x, "to"), device_of(device)); });
}

uint64_t dl_contiguous(uint64_t x) {
  return guard_handle([&] { return ag::contiguous(get(x, "contiguous")); });
}

uint64_t dl_clone(uint64_t x) {
  return guard_handle([&] { return ag::clone(get(x, "clone")); });
}

uint64_t dl_view(uint64_t x, const int64_t* shape, int ndim) {
  return guard_handle([&] { return ag::view(get(x, "view"), shape_of(shape, ndim, "view")); });
}

int dl_view_value(const struct dl_tensor* x, int which, const int64_t* shape, int n, int d1, int d2,
                  struct dl_tensor* out) {
  if (!dl::compile::current()) return -2;
  return dl::bind::defer_view(which, x, shape, n, d1, d2, out);
}

uint64_t dl_reshape(uint64_t x, const int64_t* shape, int ndim) {
  return guard_handle([&] { return ag::reshape(get(x, "reshape"), shape_of(shape, ndim, "reshape")); });
}

uint64_t dl_transpose(uint64_t x, int d1, int d2) {
  return guard_handle([&] {
    const Tensor& t = get(x, "transpose");
    return ag::transpose(t, lua_dim(d1, t.dim(), "transpose"), lua_dim(d2, t.dim(), "transpose"));
  });
}

uint64_t dl_permute(uint64_t x, const int32_t* dims, int ndims) {
  return guard_handle([&] {
    const Tensor& t = get(x, "permute");
    DL_CHECK(ndims == 0 || dims, "permute: no dims given");
    DL_CHECK(ndims == t.dim(), "permute: expected ", t.dim(), " dims for a tensor of shape ", t.shape(),
             ", got ", ndims);
    std::vector<int> order;
    for (int i = 0; i < ndims; ++i) order.push_back(lua_dim(dims[i], t.dim(), "permute"));
    return ag::permute(t, order);
  });
}

uint64_t dl_narrow(uint64_t x, int dim, int64_t start, int64_t length) {
  return guard_handle([&] {
    const Tensor& t = get(x, "narrow");
    DL_CHECK(t.dim() > 0, "narrow: cannot be applied to a 0-dim tensor");
    int d = lua_dim(dim, t.dim(), "narrow");
    int64_t size = t.size(d);
    // start = size + 1 with length 0: the empty slice past the end (written so that a
    // dim of INT64_MAX cannot overflow; found by tests/fuzz: fuzz_ops).
    int64_t s0 = (length == 0 && start > size && start - 1 == size) ? size : lua_index(start, size, d, "narrow");
    DL_CHECK_KIND(Index, length >= 0 && length <= size - s0, "narrow: start ", start, " with length ",
                  length, " goes past the end of dimension ", d + 1, " of size ", size);
    return ag::narrow(t, d, s0, length);
  });
}

uint64_t dl_slice(uint64_t x, int dim, int64_t start, int64_t stop, int64_t step) {
  return guard_handle([&] {
    const Tensor& t = get(x, "slice");
    DL_CHECK(t.dim() > 0, "slice: cannot be applied to a 0-dim tensor");
    int d = lua_dim(dim, t.dim(), "slice");
    DL_CHECK(step > 0, "slice: step must be positive, got ", step);
    int64_t size = t.size(d);
    // Lua bounds (1-based, stop inclusive, negative from the end) to a 0-based
    // half-open range, clamped to the dim as Python's slices are.
    int64_t s0 = start >= 1 ? start - 1 : (start == 0 ? 0 : size + start);
    int64_t e0 = stop >= 0 ? stop : size + stop + 1;
    s0 = s0 < 0 ? 0 : (s0 > size ? size : s0);
    e0 = e0 < s0 ? s0 : (e0 > size ? size : e0);
    return ag::slice(t, d, s0, e0, step);
  });
}

uint64_t dl_select(uint64_t x, int dim, int64_t index) {
  return guard_handle([&] {
    const Tensor& t = get(x, "select");
    DL_CHECK(t.dim() > 0, "select: cannot be applied to a 0-dim tensor");
    int d = lua_dim(dim, t.dim(), "select");
    return ag::select(t, d, lua_index(index, t.size(d), d, "select"));
  });
}

uint64_t dl_expand(uint64_t x, const int64_t* shape, int ndim) {
  return guard_handle([&] { return ag::expand(get(x, "expand"), shape_of(shape, ndim, "expand")); });
}

uint64_t dl_squeeze(uint64_t x, int dim) {
  return guard_handle([&] {
    const Tensor& t = get(x, "squeeze");
    std::optional<int> d;
    if (dim != 0) d = lua_dim(dim, t.dim(), "squeeze");
    return ag::squeeze(t, d);
  });
}

uint64_t dl_unsqueeze(uint64_t x, int dim) {
  return guard_handle([&] {
    const Tensor& t = get(x, "unsqueeze");
    return ag::unsqueeze(t, lua_dim(dim, t.dim() + 1, "unsqueeze"));
  });
}

uint64_t dl_flatten(uint64_t x, int start_dim, int end_dim) {
  return guard_handle([&] {
    const Tensor& t = get(x, "flatten");
    return ag::flatten(t, lua_dim(start_dim, t.dim(), "flatten"), lua_dim(end_dim, t.dim(), "flatten"));
  });
}

uint64_t dl_cat(const uint64_t* xs, int n, int dim) {
  return guard_handle([&] {
    TensorList list = tensor_list(xs, n, "cat");
    DL_CHECK(!list.empty(), "cat: expected a non-empty list of tensors");
    // dim counts in the first tensor that takes part (an empty 1-D one is skipped, as
    // PyTorch's legacy rule: tensor/index.cpp).
    size_t ref = 0;
    while (ref < list.size() && list[ref].dim() == 1 && list[ref].size(0) == 0) ++ref;
    if (ref == list.size()) return ag::cat(list, 0);   // all skipped: an empty (0,), whatever the dim
    return ag::cat(list, lua_dim(dim, list[ref].dim(), "cat"));
  });
}

uint64_t dl_stack(const uint64_t* xs, int n, int dim) {
  return guard_handle([&] {
    TensorList list = tensor_list(xs, n, "stack");
    DL_CHECK(!list.empty(), "stack: expected a non-empty list of tensors");
    return ag::stack(list, lua_dim(dim, list[0].dim() + 1, "stack"));
  });
}

uint64_t dl_index_select(uint64_t x, int dim, uint64_t index) {
  return guard_handle([&] {
    const Tensor& t = get(x, "index_select");
    int d = lua_dim(dim, t.dim(), "index_select");
    int64_t size = t.dim() > 0 ? t.size(d) : 1;
    return ag::index_select(t, d, index_from_lua(get(index, "index_select"), size, d, "index_select"));
  });
}

uint64_t dl_gather(uint64_t x, int dim, uint64_t index) {
  return guard_handle([&] {
    const Tensor& t = get(x, "gather");
    int d = lua_dim(dim, t.dim(), "gather");
    int64_t size = t.dim() > 0 ? t.size(d) : 1;
    return ag::gather(t, d, index_from_lua(get(index, "gather"), size, d, "gather"));
  });
}

uint64_t dl_scatter_add(uint64_t x, int dim, uint64_t index, uint64_t src) {
  return guard_handle([&] {
    const Tensor& t = get(x, "scatter_add");
    int d = lua_dim(dim, t.dim(), "scatter_add");
    int64_t size = t.dim() > 0 ? t.size(d) : 1;
    return ag::scatter_add(t, d, index_from_lua(get(index, "scatter_add"), size, d, "scatter_add"),
                           get(src, "scatter_add"));
  });
}

int dl_copy_(uint64_t dst, uint64_t src) {
  return guard_status([&] {
    Tensor t = get(dst, "copy_");
    ag::copy_(t, get(src, "copy_"));
  });
}

int dl_set_(uint64_t x, uint64_t source) {
  return guard_status([&] {
    Tensor s = get(source, "set_");
    dl::bind::handle_set(x, s, "set_");
  });
}

int dl_fill_(uint64_t x, double value) {
  return guard_status([&] {
    Tensor t = get(x, "fill_");
    ag::fill_(t, Scalar::from_lua(value));
  });
}

}  // extern "C"

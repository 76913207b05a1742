// The C embedding API (include/dlua/dlua.h) over the C++ one: every entry catches
// every exception and returns a status.
#include "dlua/dlua.h"

#include <cstring>
#include <deque>
#include <string>

#include "dlua/dlua.hpp"

struct dlua_tensor {
  dlua::Tensor t;
};

struct dlua_runtime {
  dlua::Runtime rt;
  std::string errmsg, traceback;
  std::deque<std::string> strings;  // backing of string results until the next call
  explicit dlua_runtime(const dlua::Options& o) : rt(o) {}
};

namespace {

thread_local std::string g_last_error;

int status_of(dlua::ErrorKind k) {
  switch (k) {
    case dlua::ErrorKind::Runtime: return DLUA_ERR_RUNTIME;
    case dlua::ErrorKind::Syntax: return DLUA_ERR_SYNTAX;
    case dlua::ErrorKind::Memory: return DLUA_ERR_MEMORY;
    case dlua::ErrorKind::Timeout: return DLUA_ERR_TIMEOUT;
    case dlua::ErrorKind::Interrupted: return DLUA_ERR_INTERRUPTED;
    case dlua::ErrorKind::Type: return DLUA_ERR_TYPE;
    case dlua::ErrorKind::File: return DLUA_ERR_FILE;
  }
  return DLUA_ERR_RUNTIME;
}

// Runs f, turning exceptions into a status and the runtime's (or the thread's) message.
template <typename F>
int guard(dlua_runtime* rt, F&& f) {
  std::string* msg = rt ? &rt->errmsg : &g_last_error;
  try {
    if (rt) {
      rt->errmsg.clear();
      rt->traceback.clear();
    }
    f();
    return DLUA_OK;
  } catch (const dlua::Error& e) {
    *msg = e.what();
    if (rt) rt->traceback = e.traceback();
    return status_of(e.kind());
  } catch (const std::bad_alloc&) {
    *msg = "dlua: out of memory";
    return DLUA_ERR_MEMORY;
  } catch (const std::exception& e) {
    *msg = e.what();
    return DLUA_ERR_RUNTIME;
  } catch (...) {
    *msg = "dlua: unknown error";
    return DLUA_ERR_RUNTIME;
  }
}

int bad_arg(dlua_runtime* rt, const char* what) {
  (rt ? rt->errmsg : g_last_error) = what;
  return DLUA_ERR_ARG;
}

dlua::Value to_cpp(const dlua_value& v) {
  switch (v.type) {
    case DLUA_TNIL: return dlua::Value();
    case DLUA_TBOOLEAN: return dlua::Value(v.boolean != 0);
    case DLUA_TNUMBER: return dlua::Value(v.number);
    case DLUA_TSTRING:
      return dlua::Value(std::string(v.string ? v.string : "",
                                     v.string ? (v.length ? v.length : std::strlen(v.string)) : 0));
    case DLUA_TTENSOR:
      if (!v.tensor) throw dlua::Error(dlua::ErrorKind::Type, "dlua: a tensor value is NULL");
      return dlua::Value(v.tensor->t);
    case DLUA_TOTHER:
      throw dlua::Error(dlua::ErrorKind::Type, "dlua: a value of type DLUA_TOTHER cannot be passed to Lua");
  }
  throw dlua::Error(dlua::ErrorKind::Type, "dlua: unknown value type");
}

dlua_value to_c(dlua_runtime* rt, const dlua::Value& v) {
  dlua_value out = dlua_nil();
  switch (v.type()) {
    case dlua::Value::Type::Nil: break;
    case dlua::Value::Type::Boolean: out = dlua_boolean(v.as_bool()); break;
    case dlua::Value::Type::Number: out = dlua_number(v.as_number()); break;
    case dlua::Value::Type::Opaque:
      rt->strings.push_back(v.type_name());
      out.type = DLUA_TOTHER;
      out.string = rt->strings.back().c_str();
      out.length = rt->strings.back().size();
      break;
    case dlua::Value::Type::String:
      rt->strings.push_back(v.as_string());
      out.type = DLUA_TSTRING;
      out.string = rt->strings.back().c_str();
      out.length = rt->strings.back().size();
      break;
    case dlua::Value::Type::Tensor:
      out.type = DLUA_TTENSOR;
      out.tensor = new dlua_tensor{v.as_tensor()};
      break;
    case dlua::Value::Type::Table:
      throw dlua::Error(dlua::ErrorKind::Type,
                        "dlua: the C API does not take tables; return numbers, strings "
                        "or tensors (or use the C++ API)");
  }
  return out;
}

}  // namespace

extern "C" {

const char* dlua_version(void) { return dlua::version(); }

void dlua_options_init(dlua_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->preload_dl = 1;
  o->jit = 1;
}

int dlua_open(const dlua_options* o, dlua_runtime** out) {
  if (!out) return bad_arg(nullptr, "dlua_open: out is NULL");
  *out = nullptr;
  dlua_options def;
  dlua_options_init(&def);
  if (!o) o = &def;
  return guard(nullptr, [&] {
    dlua::Options opts;
    opts.sandbox = o->sandbox != 0;
    opts.time_limit = o->time_limit;
    opts.lua_memory_limit = o->lua_memory_limit;
    opts.tensor_memory_limit = o->tensor_memory_limit;
    opts.preload_dl = o->preload_dl != 0;
    opts.jit = o->jit != 0;
    if (o->print) {
      auto fn = o->print;
      void* ud = o->print_ud;
      opts.print = [fn, ud](std::string_view s) { fn(ud, s.data(), s.size()); };
    }
    *out = new dlua_runtime(opts);
  });
}

const char* dlua_open_error(void) { return g_last_error.c_str(); }

void dlua_close(dlua_runtime* rt) { delete rt; }

int dlua_run_string(dlua_runtime* rt, const char* code) {
  if (!rt || !code) return bad_arg(rt, "dlua_run_string: NULL argument");
  return guard(rt, [&] { rt->rt.run_string(code); });
}

int dlua_run_file(dlua_runtime* rt, const char* path) {
  if (!rt || !path) return bad_arg(rt, "dlua_run_file: NULL argument");
  return guard(rt, [&] { rt->rt.run_file(path); });
}

int dlua_call(dlua_runtime* rt, const char* fn, const dlua_value* args, int nargs,
              dlua_value* results, int nresults) {
  if (!rt || !fn || (nargs > 0 && !args) || (nresults > 0 && !results) || nargs < 0)
    return bad_arg(rt, "dlua_call: bad argument");
  for (int i = 0; i < nresults; ++i) results[i] = dlua_nil();
  rt->strings.clear();
  return guard(rt, [&] {
    std::vector<dlua::Value> in;
    in.reserve(size_t(nargs));
    for (int i = 0; i < nargs; ++i) in.push_back(to_cpp(args[i]));
    std::vector<dlua::Value> out = rt->rt.call_all(fn, in);
    int i = 0;
    try {
      for (; i < nresults && size_t(i) < out.size(); ++i) results[i] = to_c(rt, out[size_t(i)]);
    } catch (...) {
      for (int j = 0; j < i; ++j) dlua_value_free(&results[j]);
      throw;
    }
  });
}

int dlua_set_global(dlua_runtime* rt, const char* name, const dlua_value* v) {
  if (!rt || !name || !v) return bad_arg(rt, "dlua_set_global: NULL argument");
  return guard(rt, [&] { rt->rt.set_global(name, to_cpp(*v)); });
}

int dlua_get_global(dlua_runtime* rt, const char* name, dlua_value* out) {
  if (!rt || !name || !out) return bad_arg(rt, "dlua_get_global: NULL argument");
  *out = dlua_nil();
  rt->strings.clear();
  return guard(rt, [&] { *out = to_c(rt, rt->rt.get_global(name)); });
}

void dlua_interrupt(dlua_runtime* rt) {
  if (rt) rt->rt.interrupt();
}

const char* dlua_errmsg(const dlua_runtime* rt) { return rt ? rt->errmsg.c_str() : ""; }
const char* dlua_traceback(const dlua_runtime* rt) { return rt ? rt->traceback.c_str() : ""; }

dlua_value dlua_nil(void) {
  dlua_value v;
  std::memset(&v, 0, sizeof v);
  v.type = DLUA_TNIL;
  return v;
}
dlua_value dlua_boolean(int b) {
  dlua_value v = dlua_nil();
  v.type = DLUA_TBOOLEAN;
  v.boolean = b != 0;
  return v;
}
dlua_value dlua_number(double x) {
  dlua_value v = dlua_nil();
  v.type = DLUA_TNUMBER;
  v.number = x;
  return v;
}
dlua_value dlua_string(const char* s) {
  dlua_value v = dlua_nil();
  v.type = DLUA_TSTRING;
  v.string = s;
  v.length = s ? std::strlen(s) : 0;
  return v;
}
dlua_value dlua_tensor_value(dlua_tensor* t) {
  dlua_value v = dlua_nil();
  v.type = DLUA_TTENSOR;
  v.tensor = t;
  return v;
}
void dlua_value_free(dlua_value* v) {
  if (!v) return;
  if (v->type == DLUA_TTENSOR) dlua_tensor_free(v->tensor);
  *v = dlua_nil();
}

int dlua_tensor_from_blob(void* data, const int64_t* shape, int ndim, dlua_dtype dtype,
                          const int64_t* strides, dlua_tensor** out) {
  if (!out || ndim < 0 || (ndim > 0 && !shape))
    return bad_arg(nullptr, "dlua_tensor_from_blob: bad argument");
  *out = nullptr;
  return guard(nullptr, [&] {
    std::vector<int64_t> sh(shape, shape + ndim), st;
    if (strides) st.assign(strides, strides + ndim);
    *out = new dlua_tensor{dlua::Tensor::from_blob(data, sh, dlua::DType(dtype), st)};
  });
}

int dlua_tensor_zeros(const int64_t* shape, int ndim, dlua_dtype dtype, dlua_tensor** out) {
  if (!out || ndim < 0 || (ndim > 0 && !shape))
    return bad_arg(nullptr, "dlua_tensor_zeros: bad argument");
  *out = nullptr;
  return guard(nullptr, [&] {
    *out = new dlua_tensor{dlua::Tensor::zeros(std::vector<int64_t>(shape, shape + ndim),
                                               dlua::DType(dtype))};
  });
}

void dlua_tensor_free(dlua_tensor* t) { delete t; }

int dlua_tensor_release(dlua_tensor* t) {
  if (!t) return bad_arg(nullptr, "dlua_tensor_release: NULL tensor");
  return guard(nullptr, [&] { t->t.release(); });
}

int dlua_tensor_ndim(const dlua_tensor* t) { return t ? t->t.dim() : -1; }
int64_t dlua_tensor_size(const dlua_tensor* t, int dim) {
  if (!t || dim < 0 || dim >= t->t.dim()) return -1;
  return t->t.size(dim);
}
int64_t dlua_tensor_stride(const dlua_tensor* t, int dim) {
  if (!t || dim < 0 || dim >= t->t.dim()) return 0;
  return t->t.strides()[size_t(dim)];
}
int64_t dlua_tensor_numel(const dlua_tensor* t) { return t ? t->t.numel() : -1; }
dlua_dtype dlua_tensor_dtype(const dlua_tensor* t) {
  return t ? dlua_dtype(t->t.dtype()) : DLUA_FLOAT32;
}
int dlua_tensor_is_contiguous(const dlua_tensor* t) { return t && t->t.is_contiguous(); }

void* dlua_tensor_data(const dlua_tensor* t) {
  if (!t) {
    g_last_error = "dlua_tensor_data: NULL tensor";
    return nullptr;
  }
  void* p = nullptr;
  guard(nullptr, [&] { p = t->t.data(); });
  return p;
}

const char* dlua_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"

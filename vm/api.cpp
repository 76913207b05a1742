// dlua::Runtime, dlua::Value and dlua::Tensor (include/dlua/dlua.hpp).
#include <cstring>
#include <fstream>
#include <sstream>

#include "tensor/error.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "vm/runtime_impl.h"

namespace dlua {

const char* version() { return DLUA_VERSION_STRING; }

const char* dtype_name(DType t) {
  static const char* const names[] = {"bool", "uint8", "int32", "int64", "float32", "float64"};
  unsigned i = unsigned(t);
  return i < 6 ? names[i] : "?";
}

size_t dtype_size(DType t) { return dl::itemsize(dl::DType(t)); }

// ---- Tensor ------------------------------------------------------------------------------

namespace {

dl::TensorImpl* impl_ptr(void* p) { return static_cast<dl::TensorImpl*>(p); }

dl::Tensor engine(const Tensor& t) {
  if (!t.defined()) throw Error(ErrorKind::Type, "dlua::Tensor: the tensor is undefined");
  return dl::Tensor(dl::Ref<dl::TensorImpl>(impl_ptr(t.unsafe_impl())));
}

Tensor wrap(const dl::Tensor& t) { return Tensor::unsafe_wrap(t.impl()); }

// Engine errors (dl::Error) become dlua::Error with the same message.
template <typename F>
auto rethrow(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dl::Error& e) {
    throw Error(e.kind() == dl::ErrorKind::Memory ? ErrorKind::Memory : ErrorKind::Runtime,
                e.what());
  }
}

struct BlobCtx {
  std::function<void(void*)> on_free;
};

void blob_free(void* ctx, void* data, size_t) {
  auto* c = static_cast<BlobCtx*>(ctx);
  if (c->on_free) c->on_free(data);
  delete c;
}

}  // namespace

Tensor::Tensor(const Tensor& o) noexcept : impl_(o.impl_) {
  if (impl_) impl_ptr(impl_)->retain();
}

Tensor::~Tensor() {
  if (impl_ && impl_ptr(impl_)->release_ref()) delete impl_ptr(impl_);
}

Tensor Tensor::unsafe_wrap(void* impl) noexcept {
  Tensor t;
  t.impl_ = impl;
  if (impl) impl_ptr(impl)->retain();
  return t;
}

Tensor Tensor::from_blob(void* data, const std::vector<int64_t>& shape, DType dtype,
                         const std::vector<int64_t>& strides,
                         std::function<void(void*)> on_free) {
  return rethrow([&] {
    DL_CHECK(unsigned(dtype) < unsigned(dl::kNumDTypes), "from_blob: unknown dtype ",
             unsigned(dtype));
    dl::Shape st = strides.empty() ? dl::Shape() : dl::Shape(strides);
    // Checked without the callback first, so a refused shape never runs or leaks it.
    dl::Tensor plain = dl::from_blob(data, dl::Shape(shape), st, dl::DType(dtype));
    if (!on_free) return wrap(plain);
    auto* ctx = new BlobCtx{std::move(on_free)};
    return wrap(dl::from_blob(data, dl::Shape(shape), st, dl::DType(dtype), blob_free, ctx));
  });
}

Tensor Tensor::zeros(const std::vector<int64_t>& shape, DType dtype) {
  return rethrow([&] { return wrap(dl::zeros(dl::Shape(shape), dl::DType(dtype))); });
}

int Tensor::dim() const { return engine(*this).dim(); }
std::vector<int64_t> Tensor::shape() const { return engine(*this).shape().vec(); }
std::vector<int64_t> Tensor::strides() const { return engine(*this).strides().vec(); }
int64_t Tensor::size(int d) const {
  dl::Tensor t = engine(*this);
  if (d < 0) d += t.dim();
  if (d < 0 || d >= t.dim())
    throw Error(ErrorKind::Type, "dlua::Tensor::size: dim " + std::to_string(d) +
                                     " out of range for a " + std::to_string(t.dim()) +
                                     "-d tensor");
  return t.size(d);
}
int64_t Tensor::numel() const { return engine(*this).numel(); }
DType Tensor::dtype() const { return DType(engine(*this).dtype()); }
std::string Tensor::device() const { return engine(*this).device().str(); }
bool Tensor::is_contiguous() const { return engine(*this).is_contiguous(); }
Tensor Tensor::contiguous() const {
  return rethrow([&] { return wrap(dl::contiguous(engine(*this))); });
}
double Tensor::item() const {
  return rethrow([&] { return engine(*this).item(); });
}

void* Tensor::data() const {
  dl::Tensor t = engine(*this);
  if (!t.device().is_cpu())
    throw Error(ErrorKind::Type, "dlua::Tensor::data: the tensor is on " + t.device().str() +
                                     "; copy it to the cpu first");
  return rethrow([&] { return t.raw_data(); });
}

void Tensor::check_type(DType want) const {
  DType have = dtype();
  if (have != want)
    throw Error(ErrorKind::Type, std::string("dlua::Tensor::data<T>: the tensor holds ") +
                                     dtype_name(have) + ", not " + dtype_name(want));
}

void Tensor::release() {
  dl::Tensor t = engine(*this);
  if (!t.storage().borrowed())
    throw Error(ErrorKind::Type, "dlua::Tensor::release: only from_blob tensors can be "
                                 "released (this one owns its memory)");
  t.storage().revoke();
}

bool Tensor::released() const { return defined() && engine(*this).storage().revoked(); }

// ---- Value -------------------------------------------------------------------------------

Value Value::table(Entries entries) {
  Value v;
  v.type_ = Type::Table;
  v.table_ = std::make_shared<Entries>(std::move(entries));
  return v;
}

Value Value::array(const std::vector<Value>& items) {
  Entries e;
  e.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) e.emplace_back(Value(int64_t(i + 1)), items[i]);
  return table(std::move(e));
}

Value Value::opaque(std::string lua_type) {
  Value v;
  v.type_ = Type::Opaque;
  v.str_ = std::move(lua_type);
  return v;
}

const char* Value::type_name() const noexcept {
  switch (type_) {
    case Type::Opaque: return str_.c_str();
    case Type::Nil: return "nil";
    case Type::Boolean: return "boolean";
    case Type::Number: return "number";
    case Type::String: return "string";
    case Type::Tensor: return "tensor";
    case Type::Table: return "table";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_type(const Value& v, const char* want) {
  throw Error(ErrorKind::Type,
              std::string("dlua::Value: expected a ") + want + ", got a " + v.type_name());
}
const Value& nil_value() {
  static const Value nil;
  return nil;
}
}  // namespace

bool Value::as_bool() const {
  if (type_ != Type::Boolean) wrong_type(*this, "boolean");
  return num_ != 0;
}
double Value::as_number() const {
  if (type_ != Type::Number) wrong_type(*this, "number");
  return num_;
}
const std::string& Value::as_string() const {
  if (type_ != Type::String) wrong_type(*this, "string");
  return str_;
}
const Tensor& Value::as_tensor() const {
  if (type_ != Type::Tensor) wrong_type(*this, "tensor");
  return tensor_;
}
const Value::Entries& Value::entries() const {
  if (type_ != Type::Table) wrong_type(*this, "table");
  return *table_;
}
const Value& Value::operator[](std::string_view key) const {
  for (const auto& [k, v] : entries())
    if (k.type_ == Type::String && k.str_ == key) return v;
  return nil_value();
}
const Value& Value::operator[](int index) const {
  for (const auto& [k, v] : entries())
    if (k.type_ == Type::Number && k.num_ == index) return v;
  return nil_value();
}
size_t Value::length() const {
  size_t n = 0;
  while (!(*this)[int(n + 1)].is_nil()) ++n;
  return n;
}
void Value::set(Value key, Value value) {
  if (type_ != Type::Table) wrong_type(*this, "table");
  for (auto& [k, v] : *table_) {
    bool same = k.type_ == key.type_ &&
                ((k.type_ == Type::String && k.str_ == key.str_) ||
                 ((k.type_ == Type::Number || k.type_ == Type::Boolean) && k.num_ == key.num_));
    if (same) {
      v = std::move(value);
      return;
    }
  }
  table_->emplace_back(std::move(key), std::move(value));
}

// ---- values across the boundary (inside guard()) -----------------------------------------

constexpr int kMaxValueDepth = 64;

bool Runtime::Impl::push_value(const Value& v, int level) {
  if (level > kMaxValueDepth) {
    pending.set(ErrorKind::Type, "dlua: value nested too deeply");
    return false;
  }
  lua_checkstack(L, 4);
  switch (v.type()) {
    case Value::Type::Nil: lua_pushnil(L); return true;
    case Value::Type::Boolean: lua_pushboolean(L, v.as_bool()); return true;
    case Value::Type::Number: lua_pushnumber(L, v.as_number()); return true;
    case Value::Type::String:
      lua_pushlstring(L, v.as_string().data(), v.as_string().size());
      return true;
    case Value::Type::Tensor:
      if (!v.as_tensor().defined()) {
        pending.set(ErrorKind::Type, "dlua: cannot pass an undefined tensor to Lua");
        return false;
      }
      vm::push_tensor(L, v.as_tensor());
      return true;
    case Value::Type::Table: {
      lua_newtable(L);
      for (const auto& [k, val] : v.entries()) {
        if (k.is_nil()) {
          pending.set(ErrorKind::Type, "dlua: a table key is nil");
          return false;
        }
        if (!push_value(k, level + 1) || !push_value(val, level + 1)) return false;
        lua_rawset(L, -3);
      }
      return true;
    }
    case Value::Type::Opaque:
      pending.set(ErrorKind::Type, std::string("dlua: a ") + v.type_name() +
                                       " value from Lua cannot be passed back to it");
      return false;
  }
  return false;
}

bool Runtime::Impl::to_value(int idx, Value* out, int level) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  switch (lua_type(L, idx)) {
    case LUA_TNIL: *out = Value(); return true;
    case LUA_TBOOLEAN: *out = Value(bool(lua_toboolean(L, idx))); return true;
    case LUA_TNUMBER: *out = Value(double(lua_tonumber(L, idx))); return true;
    case LUA_TSTRING: {
      size_t n = 0;
      const char* s = lua_tolstring(L, idx, &n);
      *out = Value(std::string(s, n));
      return true;
    }
    case LUA_TTABLE: {
      if (level > kMaxValueDepth) {
        pending.set(ErrorKind::Type, "dlua: table nested too deeply to convert");
        return false;
      }
      const void* self = lua_topointer(L, idx);
      for (const void* p : visiting)
        if (p == self) {
          pending.set(ErrorKind::Type, "dlua: cannot convert a table that contains itself");
          return false;
        }
      visiting.push_back(self);
      Value t = Value::table();
      bool ok = true;
      lua_checkstack(L, 4);
      lua_pushnil(L);
      while (ok && lua_next(L, idx) != 0) {
        Value k, v;
        ok = to_value(-2, &k, level + 1) && to_value(-1, &v, level + 1);
        lua_pop(L, 1);
        if (ok) t.set(std::move(k), std::move(v));
      }
      if (!ok) lua_pop(L, 1);  // the key lua_next left
      visiting.pop_back();
      if (ok) *out = std::move(t);
      return ok;
    }
    default: {
      Tensor t;
      if (vm::to_tensor(L, idx, &t)) *out = Value(std::move(t));
      else *out = Value::opaque(luaL_typename(L, idx));
      return true;
    }
  }
}

// ---- Runtime -------------------------------------------------------------------------------

namespace {

// Pushes the value at a dotted path ("update", "game.update") of the script globals.
bool push_path(Runtime::Impl* rt, std::string_view path) {
  lua_State* L = rt->L;
  rt->push_env();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string_view part = path.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (lua_type(L, -1) != LUA_TTABLE) {
      rt->pending.set(ErrorKind::Type, "dlua: '" + std::string(path.substr(0, start ? start - 1 : 0)) +
                                           "' is not a table");
      lua_pop(L, 1);
      return false;
    }
    lua_pushlstring(L, part.data(), part.size());
    lua_rawget(L, -2);
    lua_remove(L, -2);
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::vector<Value> collect(Runtime::Impl* rt, int n) {
  std::vector<Value> out(size_t(n > 0 ? n : 0));
  int top = lua_gettop(rt->L);
  for (int i = 0; i < n; ++i)
    if (!rt->to_value(top - n + 1 + i, &out[size_t(i)])) break;
  lua_settop(rt->L, top - n);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::File, "cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.rfind("#", 0) == 0) {  // a '#!' first line, as lua.c skips it (keep the line count)
    size_t nl = s.find('\n');
    s = nl == std::string::npos ? std::string() : "--" + s.substr(nl);
  }
  return s;
}

}  // namespace

Runtime::Runtime() : Runtime(Options{}) {}
Runtime::Runtime(const Options& opts) : impl_(std::make_unique<Impl>(opts)) {}
Runtime::~Runtime() = default;
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;

std::vector<Value> Runtime::run_string(std::string_view code, std::string_view chunkname) {
  Impl* rt = impl_.get();
  std::string name(chunkname);
  std::vector<Value> out;
  rt->guarded([&](lua_State*) {
    if (!rt->load(code, name.c_str())) return;
    int n = rt->call(0);
    if (n >= 0) out = collect(rt, n);
  });
  return out;
}

std::vector<Value> Runtime::run_file(const std::string& path) {
  return run_string(read_file(path), "@" + path);
}

std::vector<Value> Runtime::call_all(std::string_view fn, const std::vector<Value>& args) {
  Impl* rt = impl_.get();
  std::vector<Value> out;
  rt->guarded([&](lua_State* L) {
    if (!push_path(rt, fn)) return;
    if (lua_type(L, -1) != LUA_TFUNCTION) {
      rt->pending.set(ErrorKind::Type, "dlua: cannot call '" + std::string(fn) + "' (a " +
                                           luaL_typename(L, -1) + " value)");
      return;
    }
    for (const Value& a : args)
      if (!rt->push_value(a)) return;
    int n = rt->call(int(args.size()));
    if (n >= 0) out = collect(rt, n);
  });
  return out;
}

void Runtime::set_global(std::string_view name, const Value& v) {
  Impl* rt = impl_.get();
  rt->guarded([&](lua_State* L) {
    rt->push_env();
    lua_pushlstring(L, name.data(), name.size());
    if (!rt->push_value(v)) return;
    lua_rawset(L, -3);
  });
}

Value Runtime::get_global(std::string_view name) {
  Impl* rt = impl_.get();
  Value out;
  rt->guarded([&](lua_State* L) {
    rt->push_env();
    lua_pushlstring(L, name.data(), name.size());
    lua_rawget(L, -2);
    rt->to_value(-1, &out);
  });
  return out;
}

void Runtime::interrupt() noexcept {
  Impl* rt = impl_.get();
  rt->interrupt_flag.store(true);
  // Without the periodic hook, set one now, as luajit.c's SIGINT handler does
  // (lua_sethook is async-safe in LuaJIT).
  if (!rt->periodic_hook && rt->L && rt->depth > 0)
    lua_sethook(rt->L, vm::stop_hook, LUA_MASKCOUNT, 1);
}

uint64_t Runtime::generation() const noexcept { return impl_->generation; }
size_t Runtime::lua_memory() const noexcept {
  if (!impl_->L) return 0;
  return size_t(lua_gc(impl_->L, LUA_GCCOUNT, 0)) * 1024 + size_t(lua_gc(impl_->L, LUA_GCCOUNTB, 0));
}
lua_State* Runtime::lua_state() const noexcept { return impl_->L; }

}  // namespace dlua

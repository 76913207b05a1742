// dlua embedding API for C++: a LuaJIT state with the dlua tensor library loaded.
//
//   #include <dlua/dlua.hpp>
//
//   float pos[256] = {};                               // the host's own memory
//   dlua::Options opts;
//   opts.sandbox = true;                               // untrusted script
//   opts.time_limit = 0.05;                            // seconds per call
//   dlua::Runtime rt(opts);
//   rt.run_string("function step(p, dt) p:add_(dt) return p:sum():item() end");
//   dlua::Tensor p = dlua::Tensor::from_blob(pos, {256}, dlua::DType::Float32);
//   double total = rt.call("step", p, 0.5).as_number();  // the script wrote into pos
//   p.release();        // take the buffer back: the script's tensor now errors "revoked"
//
// Script errors, time-limit and memory-limit stops come back as dlua::Error, carrying
// the Lua traceback. Tensors cross the boundary without copies in both directions:
// a dlua::Tensor handed to a script is the same memory there, and a tensor a script
// returns can be read in place with data<T>().
//
// Threads: a Runtime is used from one thread at a time; interrupt() may be called from
// a signal handler, and from any thread when the runtime has a sandbox or a time
// limit. Several Runtimes may live in one process.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct lua_State;

namespace dlua {

const char* version();  // "0.1.0"

enum class DType : uint8_t { Bool = 0, UInt8 = 1, Int32 = 2, Int64 = 3, Float32 = 4, Float64 = 5 };
const char* dtype_name(DType t);  // "float32"
size_t dtype_size(DType t);

enum class ErrorKind {
  Runtime,      // a script error (error(), a bad op, tensor memory limit exceeded ...)
  Syntax,       // the chunk does not compile
  Memory,       // the Lua heap limit (or the system) refused an allocation
  Timeout,      // the time limit stopped the script
  Interrupted,  // interrupt() stopped the script
  Type,         // a value cannot cross the boundary as asked (as_number on a string ...)
  File,         // a script file cannot be read
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, std::string traceback = {})
      : std::runtime_error(message), kind_(kind), traceback_(std::move(traceback)) {}
  ErrorKind kind() const noexcept { return kind_; }
  // "stack traceback:\n\t..." as Lua prints it; empty when there was no Lua stack.
  const std::string& traceback() const noexcept { return traceback_; }

 private:
  ErrorKind kind_;
  std::string traceback_;
};

// A reference to a tensor of the engine: copying a Tensor copies the reference, never
// the data. The same tensor seen by a script is the same memory.
class Tensor {
 public:
  Tensor() noexcept = default;
  Tensor(const Tensor& o) noexcept;
  Tensor(Tensor&& o) noexcept : impl_(std::exchange(o.impl_, nullptr)) {}
  Tensor& operator=(Tensor o) noexcept { std::swap(impl_, o.impl_); return *this; }
  ~Tensor();

  // A tensor over memory the host owns (zero copy). Strides are in elements (row-major
  // when empty). The buffer must stay valid until release() or until the last
  // reference (host's and scripts') is gone; `on_free`, if given, is called then.
  // A Bool tensor's bytes must each be 0 or 1, as C++'s bool.
  static Tensor from_blob(void* data, const std::vector<int64_t>& shape, DType dtype,
                          const std::vector<int64_t>& strides = {},
                          std::function<void(void*)> on_free = nullptr);
  // A new tensor owned by the engine (zero-filled).
  static Tensor zeros(const std::vector<int64_t>& shape, DType dtype = DType::Float32);

  bool defined() const noexcept { return impl_ != nullptr; }
  int dim() const;
  std::vector<int64_t> shape() const;
  std::vector<int64_t> strides() const;  // in elements
  int64_t size(int d) const;             // 0-based here, as everywhere in C++
  int64_t numel() const;
  DType dtype() const;
  std::string device() const;            // "cpu", "cuda:0"
  bool is_contiguous() const;
  // This tensor, or a contiguous copy when it is not (a script's transposed result).
  Tensor contiguous() const;
  double item() const;                   // one-element tensors

  // Element 0 (the offset applied). data<T>() checks that T matches the dtype.
  // Throws when the tensor lives on a GPU or was released.
  void* data() const;
  template <typename T>
  T* data() const { check_type(dtype_of<T>()); return static_cast<T*>(data()); }

  // Takes borrowed memory back from every script that holds this tensor or a view of
  // it: afterwards their accesses fail with "revoked". Only for from_blob tensors.
  void release();
  bool released() const;

  // The engine's TensorImpl*, for code built inside this project.
  void* unsafe_impl() const noexcept { return impl_; }
  static Tensor unsafe_wrap(void* impl) noexcept;  // adds a reference

 private:
  template <typename T> static constexpr DType dtype_of();
  void check_type(DType t) const;
  void* impl_ = nullptr;
};

template <> constexpr DType Tensor::dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType Tensor::dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType Tensor::dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType Tensor::dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType Tensor::dtype_of<float>() { return DType::Float32; }
template <> constexpr DType Tensor::dtype_of<double>() { return DType::Float64; }

// A Lua value crossing the boundary: nil, boolean, number, string, tensor, or a table
// of those (converted recursively: keys and values; cycles are an error). A value that
// cannot cross (a function, a coroutine, other cdata) arrives as Opaque, whose
// type_name() is its Lua type; it cannot be passed back.
class Value {
 public:
  enum class Type { Nil, Boolean, Number, String, Tensor, Table, Opaque };
  using Entries = std::vector<std::pair<Value, Value>>;

  Value() noexcept = default;
  Value(std::nullptr_t) noexcept {}
  Value(bool b) : type_(Type::Boolean), num_(b ? 1 : 0) {}
  Value(double d) : type_(Type::Number), num_(d) {}
  Value(float d) : type_(Type::Number), num_(d) {}
  Value(int i) : type_(Type::Number), num_(i) {}
  Value(int64_t i) : type_(Type::Number), num_(double(i)) {}
  Value(const char* s) : type_(Type::String), str_(s) {}
  Value(std::string s) : type_(Type::String), str_(std::move(s)) {}
  Value(std::string_view s) : type_(Type::String), str_(s) {}
  Value(Tensor t) : type_(Type::Tensor), tensor_(std::move(t)) {}
  static Value table(Entries entries = {});
  // A Lua array {v1, v2, ...}.
  static Value array(const std::vector<Value>& items);
  static Value opaque(std::string lua_type);

  Type type() const noexcept { return type_; }
  const char* type_name() const noexcept;
  bool is_nil() const noexcept { return type_ == Type::Nil; }

  // Each throws Error(Type) naming the actual type when it does not match.
  bool as_bool() const;
  double as_number() const;
  const std::string& as_string() const;
  const Tensor& as_tensor() const;
  const Entries& entries() const;
  // Table look-ups (nil when absent): t["name"], t[1].
  const Value& operator[](std::string_view key) const;
  const Value& operator[](int index) const;
  size_t length() const;  // the array part: 1..n without holes
  void set(Value key, Value value);

 private:
  Type type_ = Type::Nil;
  double num_ = 0;
  std::string str_;
  Tensor tensor_;
  std::shared_ptr<Entries> table_;
};

struct Options {
  // Untrusted scripts: no io/os/ffi/debug/jit/package, text-only load, a protected
  // string metatable, print sent to `print`, the JIT off (vm/sandbox.cpp).
  bool sandbox = false;
  // Seconds each call into Lua (run_*, call) may take; 0 = no limit. Setting it turns
  // the JIT off (a count hook is the only way to stop a LuaJIT loop).
  double time_limit = 0;
  // Bytes of Lua heap (tables, strings, closures); 0 = no limit.
  size_t lua_memory_limit = 0;
  // Bytes of tensor storage; 0 = no limit. Tensor memory is one pool per process, so
  // this cap is process-wide: the last Runtime created with a cap sets it, and its
  // destructor restores the previous one.
  size_t tensor_memory_limit = 0;
  // A global `dl` holding require("dlua") (always loaded in a sandbox).
  bool preload_dl = true;
  // Where print() goes, one call per printed line (without "\n"); stdout when empty.
  std::function<void(std::string_view)> print;
  // Keep the JIT on (faster). Ignored (off) with sandbox or a time limit.
  bool jit = true;
};

class Runtime {
 public:
  Runtime();  // default Options
  explicit Runtime(const Options& opts);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;

  // Runs a chunk; returns its results. `chunkname` appears in messages ("=name" verbatim).
  std::vector<Value> run_string(std::string_view code, std::string_view chunkname = "=string");
  std::vector<Value> run_file(const std::string& path);

  // Calls a global function ("step", or a path "game.step") with the arguments and
  // returns its first result (nil when none); call_all returns every result.
  template <typename... Args>
  Value call(std::string_view fn, Args&&... args) {
    std::vector<Value> r = call_all(fn, {Value(std::forward<Args>(args))...});
    return r.empty() ? Value() : std::move(r[0]);
  }
  std::vector<Value> call_all(std::string_view fn, const std::vector<Value>& args);

  // The script's globals (the sandbox's environment when sandboxed).
  void set_global(std::string_view name, const Value& v);
  Value get_global(std::string_view name);

  // Stops the running script with ErrorKind::Interrupted at its next Lua instructions
  // (pcall and coroutines cannot swallow it); the state is kept. With a sandbox or a
  // time limit it only sets a flag that the runtime's count hook polls, so any thread
  // may call it. Otherwise it sets the hook itself, as luajit's Ctrl-C handler does:
  // call it from a signal handler on the thread running Lua. Code compiled by the JIT
  // ignores hooks (the JIT is off with sandbox or time_limit).
  void interrupt() noexcept;

  // After a Timeout or Memory error the Lua state is closed (its tensors freed) and a
  // fresh one with the library loaded takes its place, so the Runtime stays usable;
  // globals the scripts defined are gone and the host runs its scripts again.
  // generation() counts these replacements.
  uint64_t generation() const noexcept;

  // Bytes of Lua heap in use.
  size_t lua_memory() const noexcept;

  // The raw state, for hosts that register their own lua_CFunctions (they must not
  // let C++ exceptions cross Lua frames). Replaced after a Timeout/Memory stop.
  lua_State* lua_state() const noexcept;

  struct Impl;
  Impl* impl() const noexcept { return impl_.get(); }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlua

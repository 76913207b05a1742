// Errors raised by the engine.
//
//   DL_CHECK(a.dim() == 2, "mm: expected a 2-D tensor, got shape ", a.shape());
//
// DL_CHECK throws dl::Error for bad user input: the message always starts with the
// op's name and names the offending shapes, dtypes or values. DL_ASSERT is for
// internal invariants only (a failure is a bug in dlua, reported the same way).
// Nothing here ever aborts the process.
#pragma once
#include <cstdint>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dl {

enum class ErrorKind { Value, Type, Index, Memory, NotImplemented, Internal, Interrupted };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, const Args&... args) {
  throw Error(kind, detail::str_cat(args...));
}

// Note [Positions in messages]
// Messages count dims and list positions from the caller's base: 0 for C++ callers,
// 1 while the C ABI serves Lua (bindings/guard.h sets it around each call), so that a
// script's error says "dimension 1" for its first dimension, as the script wrote it.
// Stream a position as dl::pos(d); negative values (counted from the end) print as
// they are.
inline thread_local int t_message_base = 0;
struct Pos { int64_t value; };
inline Pos pos(int64_t v) { return Pos{v}; }
inline std::ostream& operator<<(std::ostream& os, Pos p) {
  return os << (p.value >= 0 ? p.value + t_message_base : p.value);
}
// Sets the base for the current scope (nests: the previous base comes back).
class MessageBase {
 public:
  explicit MessageBase(int base) noexcept : saved_(t_message_base) { t_message_base = base; }
  ~MessageBase() { t_message_base = saved_; }
  MessageBase(const MessageBase&) = delete;
  MessageBase& operator=(const MessageBase&) = delete;

 private:
  int saved_;
};

}  // namespace dl

#define DL_CHECK(cond, ...) \
  do { if (!(cond)) ::dl::fail(::dl::ErrorKind::Value, __VA_ARGS__); } while (0)
#define DL_CHECK_KIND(kind, cond, ...) \
  do { if (!(cond)) ::dl::fail(::dl::ErrorKind::kind, __VA_ARGS__); } while (0)
#define DL_ASSERT(cond) \
  do { if (!(cond)) ::dl::fail(::dl::ErrorKind::Internal, "internal error: ", #cond, \
                               " at ", __FILE__, ":", __LINE__); } while (0)

#include "bindings/guard.h"

#include <cstring>
#include <exception>
#include <new>

#include "bindings/capi.h"
#include "tensor/error.h"

namespace dl::bind {

namespace {
// A fixed buffer: recording an error must not itself allocate (or throw).
thread_local char t_message[2048] = "no error";
thread_local int t_kind = 0;
}  // namespace

void set_error(int kind, const char* msg) noexcept {
  t_kind = kind;
  std::strncpy(t_message, msg ? msg : "unknown error", sizeof(t_message) - 1);
  t_message[sizeof(t_message) - 1] = '\0';
}

void capture_exception() noexcept {
  try {
    throw;
  } catch (const Error& e) {
    set_error(int(e.kind()), e.what());
  } catch (const std::bad_alloc&) {
    set_error(int(ErrorKind::Memory), "out of memory");
  } catch (const std::exception& e) {
    set_error(int(ErrorKind::Internal), e.what());
  } catch (...) {
    set_error(int(ErrorKind::Internal), "unknown error in the engine");
  }
}

}  // namespace dl::bind

extern "C" {
const char* dl_last_error(void) { return dl::bind::t_message; }
int dl_last_error_kind(void) { return dl::bind::t_kind; }
}

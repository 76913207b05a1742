#include "tensor/device.h"

#include <cstdlib>

#include "tensor/error.h"

namespace dl {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device{};
  if (s == "cuda" || s == "gpu") return Device{DeviceType::CUDA, 0};
  if (s.substr(0, 5) == "cuda:" && s.size() > 5 && s.size() <= 7) {
    int idx = 0;
    for (char c : s.substr(5)) {
      DL_CHECK(c >= '0' && c <= '9', "device: unknown device '", s, "'");
      idx = idx * 10 + (c - '0');
    }
    return Device{DeviceType::CUDA, static_cast<int8_t>(idx)};
  }
  fail(ErrorKind::Value, "device: unknown device '", s, "' (expected \"cpu\", \"cuda\" or \"cuda:N\")");
}

}  // namespace dl

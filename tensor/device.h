// Where a tensor's memory lives.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace dl {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };

struct Device {
  DeviceType type = DeviceType::CPU;
  int8_t index = 0;

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu", "cuda:0"
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
// Parses "cpu", "cuda", "cuda:1"; throws on anything else.
Device parse_device(std::string_view s);

}  // namespace dl

// TensorBoard event files: TFRecord framing around hand-encoded Event protobufs.
//
//   dl::io::EventWriter w("runs/exp1");          // runs/exp1/events.out.tfevents.<t>.<host>...
//   w.scalar("loss", 0.25, /*step=*/100);
//   w.histogram("fc1/weight", weight, 100);
//   w.close();                                   // or let the destructor flush and close
//
// A record is: uint64 length, uint32 masked CRC32C of those 8 bytes, the data, uint32
// masked CRC32C of the data (all little-endian); the mask is ((c >> 15) | (c << 17)) +
// 0xa282ead8. The first record is Event{wall_time, file_version: "brain.Event:2"}; then
// each Event{wall_time (1, double), step (2, int64), summary (5)} holds one
// Summary.Value{tag (1), simple_value (2, float) | histo (5, HistogramProto)}.
// Records are buffered and flushed every 10 records or 2 seconds (checked at each
// write), by flush(), and by close().
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "tensor/tensor.h"

namespace dl::io {

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t masked_crc32c(const void* data, size_t n);
// One TFRecord around `data`.
std::string tfrecord(std::string_view data);
// Serialized Event messages (exposed for tests).
std::string event_file_version(double wall_time);
std::string event_scalar(std::string_view tag, double value, int64_t step, double wall_time);
std::string event_histogram(std::string_view tag, const Tensor& values, int64_t step,
                            double wall_time, int buckets = 30, const char* op = "histogram");

class EventWriter {
 public:
  // Creates `logdir` if needed and a new event file in it; `suffix` ends its name.
  explicit EventWriter(const std::string& logdir, const std::string& suffix = "",
                       const char* op = "summary.writer");
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  void scalar(std::string_view tag, double value, int64_t step);
  // Equal-width buckets between the min and max of `values` (finite, non-empty).
  void histogram(std::string_view tag, const Tensor& values, int64_t step, int buckets = 30);
  void flush();
  void close();
  bool closed() const { return f_ == nullptr; }
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event, const char* op);
  [[noreturn]] void fail_io(const char* op, const char* what);

  std::string path_;
  FILE* f_ = nullptr;
  int pending_ = 0;
  double last_flush_ = 0;
};

}  // namespace dl::io

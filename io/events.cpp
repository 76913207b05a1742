#include "io/events.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "io/file.h"
#include "tensor/ops.h"

namespace dl::io {

namespace {

// CRC32C (Castagnoli), reflected polynomial 0x82F63B78, one table lookup per byte.
constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// ---- protobuf encoding ---------------------------------------------------------------------

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(0x80 | (v & 0x7F));
    v >>= 7;
  }
  out += char(v);
}
void key(std::string& out, int field, int wire) { varint(out, uint64_t(field) << 3 | uint64_t(wire)); }
void fixed(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += char((v >> (8 * i)) & 0xFF);
}
void f_double(std::string& out, int field, double v) {
  key(out, field, 1);
  fixed(out, std::bit_cast<uint64_t>(v), 8);
}
void f_float(std::string& out, int field, float v) {
  key(out, field, 5);
  fixed(out, std::bit_cast<uint32_t>(v), 4);
}
void f_int64(std::string& out, int field, int64_t v) {
  key(out, field, 0);
  varint(out, uint64_t(v));   // negative values take ten bytes, as protobuf's int64 does
}
void f_bytes(std::string& out, int field, std::string_view v) {
  key(out, field, 2);
  varint(out, v.size());
  out.append(v.data(), v.size());
}
void f_packed_doubles(std::string& out, int field, const std::vector<double>& v) {
  key(out, field, 2);
  varint(out, 8 * v.size());
  for (double d : v) fixed(out, std::bit_cast<uint64_t>(d), 8);
}

// Event{wall_time, step, summary{value{<value>}}}
std::string event_with_value(const std::string& value, int64_t step, double wall_time) {
  std::string summary, event;
  f_bytes(summary, 1, value);
  f_double(event, 1, wall_time);
  if (step != 0) f_int64(event, 2, step);
  f_bytes(event, 5, summary);
  return event;
}

std::string host_name() {
  char buf[256];
  if (::gethostname(buf, sizeof buf) != 0) return "localhost";
  buf[sizeof buf - 1] = '\0';
  std::string h = buf;
  for (char& c : h) if (c == '/') c = '_';
  return h.empty() ? "localhost" : h;
}

constexpr int kFlushEvery = 10;
constexpr double kFlushSeconds = 2.0;

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  fixed(out, data.size(), 8);
  fixed(out, masked_crc32c(out.data(), 8), 4);
  out.append(data.data(), data.size());
  fixed(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::string event_file_version(double wall_time) {
  std::string event;
  f_double(event, 1, wall_time);
  f_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string event_scalar(std::string_view tag, double value, int64_t step, double wall_time) {
  std::string v;
  f_bytes(v, 1, tag);
  f_float(v, 2, float(value));
  return event_with_value(v, step, wall_time);
}

std::string event_histogram(std::string_view tag, const Tensor& values, int64_t step, double wall_time,
                            int buckets, const char* op) {
  DL_CHECK(values.defined(), op, ": no tensor given");
  DL_CHECK(values.numel() > 0, op, ": ", std::string(tag), ": the tensor is empty (shape ", values.shape(), ")");
  DL_CHECK(buckets >= 1 && buckets <= 10000, op, ": bucket count must be in 1..10000, got ", buckets);
  Tensor h = values;
  if (!h.device().is_cpu()) {
    Tensor host = empty(values.shape(), values.dtype(), Device{}, op);
    copy_(host, values);
    h = host;
  }
  h = contiguous(cast(h, DType::Float64));
  const double* x = h.data<double>();
  int64_t n = h.numel();
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    DL_CHECK(std::isfinite(x[i]), op, ": ", std::string(tag), ": the tensor holds ", x[i],
             " (a histogram needs finite values)");
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum += x[i];
    sum_sq += x[i] * x[i];
  }
  int nb = hi > lo ? buckets : 1;
  std::vector<double> limits(static_cast<size_t>(nb)), counts(static_cast<size_t>(nb), 0.0);
  // In halves and as a weighted mean, so that a range near DBL_MAX cannot overflow.
  double half_span = hi / 2 - lo / 2;
  for (int k = 0; k < nb; ++k) {
    double f = double(k + 1) / nb;
    limits[size_t(k)] = k + 1 == nb ? hi : lo * (1 - f) + hi * f;
  }
  for (int64_t i = 0; i < n; ++i) {
    double pos = nb == 1 ? 0 : (x[i] / 2 - lo / 2) / half_span * nb;
    int k = pos <= 0 ? 0 : pos >= nb - 1 ? nb - 1 : int(pos);
    counts[size_t(k)] += 1;
  }
  std::string histo, v;
  f_double(histo, 1, lo);
  f_double(histo, 2, hi);
  f_double(histo, 3, double(n));
  f_double(histo, 4, sum);
  f_double(histo, 5, sum_sq);
  f_packed_doubles(histo, 6, limits);
  f_packed_doubles(histo, 7, counts);
  f_bytes(v, 1, tag);
  f_bytes(v, 5, histo);
  return event_with_value(v, step, wall_time);
}

// ---- the writer ----------------------------------------------------------------------------

EventWriter::EventWriter(const std::string& logdir, const std::string& suffix, const char* op) {
  DL_CHECK(suffix.find('/') == std::string::npos, op, ": the file name suffix must not contain '/'");
  make_dirs(logdir, op);
  // TensorFlow's name, plus the pid and a counter (as PyTorch's writer adds) so that
  // two writers opened within one second never share a file.
  static std::atomic<uint64_t> counter{0};
  double now = wall_seconds();
  char secs[32];
  std::snprintf(secs, sizeof secs, "%010lld", static_cast<long long>(now));
  path_ = logdir + (logdir.back() == '/' ? "" : "/") + "events.out.tfevents." + secs + "." +
          host_name() + "." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) +
          suffix;
  f_ = std::fopen(path_.c_str(), "wbx");
  if (!f_) fail(ErrorKind::Value, op, ": ", path_, ": cannot create the event file: ", std::strerror(errno));
  last_flush_ = monotonic_seconds();
  write_event(event_file_version(now), op);
  flush();
}

EventWriter::~EventWriter() {
  if (f_) std::fclose(f_);
}

void EventWriter::fail_io(const char* op, const char* what) {
  int err = errno;
  fail(ErrorKind::Value, op, ": ", path_, ": ", what, ": ", std::strerror(err));
}

void EventWriter::write_event(const std::string& event, const char* op) {
  DL_CHECK(f_, op, ": the summary writer is closed");
  std::string rec = tfrecord(event);
  if (std::fwrite(rec.data(), 1, rec.size(), f_) != rec.size()) fail_io(op, "write failed");
  ++pending_;
  if (pending_ >= kFlushEvery || monotonic_seconds() - last_flush_ >= kFlushSeconds) flush();
}

void EventWriter::scalar(std::string_view tag, double value, int64_t step) {
  write_event(event_scalar(tag, value, step, wall_seconds()), "scalar");
}

void EventWriter::histogram(std::string_view tag, const Tensor& values, int64_t step, int buckets) {
  write_event(event_histogram(tag, values, step, wall_seconds(), buckets), "histogram");
}

void EventWriter::flush() {
  DL_CHECK(f_, "flush: the summary writer is closed");
  if (std::fflush(f_) != 0) fail_io("flush", "write failed");
  pending_ = 0;
  last_flush_ = monotonic_seconds();
}

void EventWriter::close() {
  if (!f_) return;
  FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) fail_io("close", "write failed");
}

}  // namespace dl::io

// libdlua_dist over Open MPI: the collectives of dl.dist on host buffers (dist/dist.h).
//
// Every collective runs on a duplicate of MPI_COMM_WORLD (so a host program's own MPI
// traffic never matches ours) under a watchdog with deadlines: a rank that never
// reaches a collective makes the others print what they wait for, and where, instead
// of hanging in silence (Note [Stalls]). Gradients can be reduced while the backward
// pass that makes them still runs (Note [Overlap]). Errors come back as return codes (MPI_ERRORS_RETURN on our
// communicator) with a message naming the op; nothing here throws across the C ABI.
#include "dist/dist.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bindings/capi.h"   // struct dl_grad_hook (the plugin links no engine)

namespace {

// tensor/dtype.h's codes (the plugin links no engine: it sees only buffers).
enum DType { kBool = 0, kUInt8 = 1, kInt32 = 2, kInt64 = 3, kFloat32 = 4, kFloat64 = 5, kFloat16 = 6, kBFloat16 = 7 };

struct State {
  bool started = false;      // dld_init succeeded
  bool owns_mpi = false;     // we called MPI_Init_thread (so we finalize it)
  bool finalized = false;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  int64_t next_work = 1;
  std::unordered_map<int64_t, std::vector<MPI_Request>> works;
  std::vector<std::vector<unsigned char>> buckets;   // dld_allreduce_many's, kept warm
  std::unordered_map<int64_t, std::vector<int>> held;   // an allgatherv work's counts
};
State g;
thread_local std::string t_error;

int fail(std::string msg) {
  t_error = std::move(msg);
  return -1;
}

std::string mpi_message(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, size_t(len));
}

bool check(int code, const char* op) {
  if (code == MPI_SUCCESS) return true;
  fail(std::string(op) + ": " + mpi_message(code));
  return false;
}

bool ready(const char* op) {
  if (g.started && !g.finalized) return true;
  fail(std::string(op) + (g.finalized ? ": dl.dist was finalized (dist.finalize)"
                                      : ": dl.dist is not initialised (call dist.init() first)"));
  return false;
}

size_t itemsize(int dtype) {
  switch (dtype) {
    case kBool: case kUInt8: return 1;
    case kFloat16: case kBFloat16: return 2;
    case kInt32: case kFloat32: return 4;
    case kInt64: case kFloat64: return 8;
    default: return 0;
  }
}

const char* dtype_name(int dtype) {
  static const char* names[] = {"bool", "uint8", "int32", "int64", "float32", "float64", "float16", "bfloat16"};
  return dtype >= 0 && dtype <= kBFloat16 ? names[dtype] : "?";
}

bool mpi_type(int dtype, MPI_Datatype* out, const char* op) {
  switch (dtype) {
    case kBool: case kUInt8: *out = MPI_UNSIGNED_CHAR; return true;
    // Moved as 16-bit words (broadcast, allgather); mpi_op refuses to reduce them.
    case kFloat16: case kBFloat16: *out = MPI_UINT16_T; return true;
    case kInt32: *out = MPI_INT32_T; return true;
    case kInt64: *out = MPI_INT64_T; return true;
    case kFloat32: *out = MPI_FLOAT; return true;
    case kFloat64: *out = MPI_DOUBLE; return true;
    default: fail(std::string(op) + ": unknown dtype code " + std::to_string(dtype)); return false;
  }
}

bool mpi_op(int op, int dtype, MPI_Op* out, const char* what) {
  static const char* names[] = {"sum", "max", "min", "prod"};
  if (op < 0 || op > 3) {
    fail(std::string(what) + ": unknown reduction code " + std::to_string(op));
    return false;
  }
  if (dtype == kFloat16 || dtype == kBFloat16) {
    fail(std::string(what) + ": MPI has no 16-bit float type to " + names[op] + " " + dtype_name(dtype) +
         " tensors with (dist.allreduce reduces a float32 copy; keep parameters whose gradients are "
         "averaged in float32)");
    return false;
  }
  if (dtype == kBool && (op == 0 || op == 3)) {
    fail(std::string(what) + ": cannot " + names[op] + " bool tensors (use max or min: any, all)");
    return false;
  }
  static const MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN, MPI_PROD};
  *out = ops[op];
  return true;
}

// Collectives take int counts: a larger buffer is reduced or broadcast in pieces of
// kPiece elements, one request each, all in the same work.
constexpr int64_t kPiece = int64_t(1) << 30;
// dld_allreduce_many reduces buffers of this size or more where they are.
constexpr int64_t kDirectBytes = int64_t(64) << 10;

int64_t add_work(std::vector<MPI_Request> reqs) {
  const int64_t id = g.next_work++;
  g.works.emplace(id, std::move(reqs));
  return id;
}

// Note [Stalls]
// A collective that some rank never reaches (a branch taken on one rank, an uneven
// number of batches, a rank stuck in its own loop) blocks the others for ever: Horovod's
// and PyTorch's most reported hang. Every collective here runs under a watch: a
// watchdog thread, started by dld_init, looks every 20 ms at the collective in
// progress (what, its sequence number, where the script called it when dl.dist knows,
// when it began). At warn_s it prints, once, which rank waits in which collective:
// the ranks that print nothing are the ones that never came. At abort_s it prints
// again and ends the process with exit code 1, without another MPI call (the main
// thread is inside one): mpirun then ends the other ranks. A stall costs a known time
// and a message, never a silent hang.
//
// The collectives themselves are Open MPI's blocking ones, on the main thread, where
// the watch allows it: the non-blocking ones (MPI_Iallreduce, from its libnbc) ran a
// 1 MiB float32 allreduce between two ranks of one machine at a quarter of
// MPI_Allreduce's bandwidth (bench/dist.lua), and advance only inside MPI calls. They
// remain for the asynchronous forms (dist.allreduce_async), which a wait finishes
// with MPI_Waitall, under the same watch.
struct Watchdog {
  std::atomic<int64_t> seq{0};          // the collective being watched; 0: none
  std::atomic<double> began{0};
  // What it is, written before seq (a seqlock): the op's name (a constant of the
  // caller's: dist.lua's strings live as long as the module), the caller's sequence
  // number, and a copy of the script's line when there is one. Formatted only when a
  // message is printed: snprintf on every collective was a tenth of a small one's cost.
  const char* op = "";
  int64_t caller_seq = 0;
  char site[128] = {};
  std::atomic<int64_t> warned_seq{0};
  std::atomic<double> warn_s{60}, abort_s{600};
  std::atomic<bool> stop{false};
  std::thread thread;
  void halt() {
    stop.store(true, std::memory_order_release);
    if (thread.joinable()) thread.join();
  }
  // A process that ends without dld_finalize (an error, a host that never closes its
  // Lua state) still joins the thread: a joinable std::thread's destructor terminates.
  ~Watchdog() { halt(); }
};
Watchdog w;
int64_t g_watch_seq = 0;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void watchdog_loop() {
  while (!w.stop.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int64_t seq = w.seq.load(std::memory_order_acquire);
    if (seq == 0) continue;
    const double waited = now() - w.began.load(std::memory_order_relaxed);
    char what[256];
    char site[sizeof w.site];
    std::memcpy(site, w.site, sizeof site);
    site[sizeof site - 1] = 0;
    if (site[0])
      std::snprintf(what, sizeof what, "%s (collective %lld, at %s)", w.op, static_cast<long long>(w.caller_seq), site);
    else
      std::snprintf(what, sizeof what, "%s (collective %lld)", w.op, static_cast<long long>(w.caller_seq));
    // A seqlock's read side: the copy is whole if the same collective is still watched.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (w.seq.load(std::memory_order_relaxed) != seq) continue;   // it ended meanwhile
    const double warn_s = w.warn_s.load(), abort_s = w.abort_s.load();
    if (warn_s > 0 && waited >= warn_s && w.warned_seq.load() != seq) {
      w.warned_seq.store(seq);
      std::fprintf(stderr, "dlua: rank %d of %d stalled %.0f s in %s: waiting for the other ranks to reach it\n",
                   g.rank, g.size, waited, what);
      std::fflush(stderr);
    }
    if (abort_s > 0 && waited >= abort_s) {
      std::fprintf(stderr,
                   "dlua: rank %d of %d gave up after %.0f s in %s: a rank that never reached it "
                   "(it printed no such line) is the cause; ending this rank, and mpirun the job\n",
                   g.rank, g.size, waited, what);
      std::fflush(stderr);
      std::fflush(stdout);
      std::_Exit(1);
    }
  }
}

// Watches the collective made in its scope (Note [Stalls]).
class Watch {
 public:
  Watch(const char* op, int64_t seq, const char* site) {
    w.seq.store(0, std::memory_order_relaxed);   // (it is 0 already: one watch at a time)
    std::atomic_thread_fence(std::memory_order_release);
    w.op = op;
    w.caller_seq = seq;
    if (site) {
      std::strncpy(w.site, site, sizeof w.site - 1);
    } else {
      w.site[0] = 0;
    }
    w.began.store(now(), std::memory_order_relaxed);
    w.seq.store(++g_watch_seq, std::memory_order_release);
  }
  ~Watch() { w.seq.store(0, std::memory_order_release); }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
};

uint64_t fnv1a(const char* s, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i < n; ++i) h = (h ^ uint8_t(s[i])) * 1099511628211ull;
  return h;
}

std::vector<std::string> lines_of(const char* s, int64_t n) {
  std::vector<std::string> out;
  int64_t b = 0;
  for (int64_t i = 0; i <= n; ++i) {
    if (i == n || s[i] == '\n') {
      if (i > b || i < n) out.emplace_back(s + b, size_t(i - b));
      b = i + 1;
    }
  }
  return out;
}

template <typename T>
void scale_by(void* p, int64_t n, double s) {
  T* x = static_cast<T*>(p);
  const T v = T(s);
  for (int64_t i = 0; i < n; ++i) x[i] *= v;
}

void scale_buffer(void* p, int64_t n, int dtype, double s) {
  if (s == 1) return;
  if (dtype == kFloat32) scale_by<float>(p, n, s);
  else scale_by<double>(p, n, s);
}

// ---- buckets ----------------------------------------------------------------------------

// One reduction of a list of buffers: members (indices into the list) share one
// bucket, or a direct bucket is one buffer reduced where it is.
struct Bucket {
  int dtype = kFloat32;
  bool direct = false;
  std::vector<int> members;
  std::vector<int64_t> counts;
  int64_t count = 0;   // elements in all
};

// The buckets of n buffers, in the order they are reduced: dtypes in the order they
// first appear, and within one the last buffer first (the order a backward pass makes
// gradients in); the first bucket of a dtype at most first_bytes, the others
// bucket_bytes. A buffer of kDirectBytes or more (or of a bucket's size) is reduced in
// place, as a bucket of its own: copying it into a bucket and back costs more than the
// latency it saves (docs/performance.md, "Measurements behind the code"; bench/dist.lua's
// gradient sync row). The small ones share buckets, where one call's
// latency serves many. Every rank plans the same buckets from the same list.
std::vector<Bucket> plan_buckets(const int64_t* counts, const int* dtypes, int n, int64_t bucket_bytes,
                                 int64_t first_bytes) {
  std::vector<int> order;
  for (int i = 0; i < n; ++i)
    if (std::find(order.begin(), order.end(), dtypes[i]) == order.end()) order.push_back(dtypes[i]);
  std::vector<Bucket> plan;
  for (int dtype : order) {
    const int64_t isz = int64_t(itemsize(dtype));
    // A bucket's count is an int: at most kPiece elements.
    const int64_t most = std::max<int64_t>(isz, std::min<int64_t>(bucket_bytes, kPiece * isz));
    int64_t cap = std::max<int64_t>(isz, std::min<int64_t>(first_bytes > 0 ? first_bytes : bucket_bytes, kPiece * isz));
    std::vector<int> idx;
    for (int i = n - 1; i >= 0; --i)
      if (dtypes[i] == dtype) idx.push_back(i);
    for (size_t at = 0; at < idx.size(); cap = most) {
      Bucket b;
      b.dtype = dtype;
      b.direct = counts[idx[at]] * isz >= std::min(cap, kDirectBytes);
      do {
        b.members.push_back(idx[at]);
        b.counts.push_back(counts[idx[at]]);
        b.count += counts[idx[at]];
        ++at;
      } while (!b.direct && at < idx.size() && counts[idx[at]] * isz < kDirectBytes &&
               (b.count + counts[idx[at]]) * isz <= cap);
      plan.push_back(std::move(b));
    }
  }
  return plan;
}

// Reduces bucket k of a plan: src[i] read, dst[i] (maybe src[i]) written, the result
// multiplied by scale. Bucket memory is g.buckets[k], kept for the next call.
bool reduce_bucket(const Bucket& b, size_t k, const void* const* src, void* const* dst, MPI_Op o, double scale,
                   const char* what) {
  MPI_Datatype t;
  if (!mpi_type(b.dtype, &t, what)) return false;
  const size_t isz = itemsize(b.dtype);
  if (b.direct) {
    const int i = b.members[0];
    if (src[i] != dst[i] && b.count > 0) std::memcpy(dst[i], src[i], size_t(b.count) * isz);
    for (int64_t at = 0; at < b.count; at += kPiece) {
      if (!check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(dst[i]) + size_t(at) * isz,
                               int(std::min(kPiece, b.count - at)), t, o, g.comm), what))
        return false;
    }
    scale_buffer(dst[i], b.count, b.dtype, scale);
    return true;
  }
  if (g.buckets.size() <= k) g.buckets.resize(k + 1);
  std::vector<unsigned char>& mem = g.buckets[k];
  if (mem.size() < size_t(b.count) * isz) mem.resize(size_t(b.count) * isz);
  size_t at = 0;
  for (size_t j = 0; j < b.members.size(); ++j) {
    const size_t bytes = size_t(b.counts[j]) * isz;
    if (bytes) std::memcpy(mem.data() + at, src[b.members[j]], bytes);
    at += bytes;
  }
  if (!check(MPI_Allreduce(MPI_IN_PLACE, mem.data(), int(b.count), t, o, g.comm), what)) return false;
  scale_buffer(mem.data(), b.count, b.dtype, scale);
  at = 0;
  for (size_t j = 0; j < b.members.size(); ++j) {
    const size_t bytes = size_t(b.counts[j]) * isz;
    if (bytes) std::memcpy(dst[b.members[j]], mem.data() + at, bytes);
    at += bytes;
  }
  return true;
}

// ---- the overlapped reducer -----------------------------------------------------------------

// Note [Overlap]
// dld_reducer's hook reduces a backward pass's gradients while the pass still runs, as
// PyTorch's DDP does from autograd hooks. The engine reports each gradient as soon as
// it is final (Note [Gradient-ready hook] in bindings/capi_autograd.cpp); the buckets
// are planned from the pass's inputs when it starts, the same on every rank (begin
// first compares the inputs' sizes and dtypes across the ranks, and declines the hook
// when they differ, so that the caller's own check names the difference). A bucket
// starts when all of its gradients and every bucket before it have: in the plan's
// order, whatever order this rank's graph makes gradients in, so the ranks' collectives
// match. A communication thread makes the collectives, one at a time, under the watch
// (Note [Stalls]); MPI_THREAD_SERIALIZED holds because the main thread makes none
// while a bucket is queued or running: every entry point below drains the queue first
// (drain), including a collective that a custom gradient's backward makes mid-pass.
// end() waits for the last bucket before the pass hands out its results. A pass that
// fails waits for the buckets it started (the other ranks start the same ones) and
// starts no more; the ranks still waiting for those meet the watch's deadline, unless
// the error ends the job first, as an uncaught one does.
struct Reducer {
  dl_grad_hook hook{};
  MPI_Op op = MPI_SUM;
  int op_code = 0;
  double scale = 1;
  int64_t bucket_bytes = 0, first_bytes = 0;
  const char* what = "";
  int64_t seq = 0;
  std::string site;
  int result = 0;      // dld_reducer_result
  // The pass's buffers and plan (main thread; the comm thread reads them once queued).
  std::vector<void*> data;
  std::vector<Bucket> plan;
  std::vector<int> bucket_of, missing;
  size_t next = 0;     // the next bucket to start
  // The communication thread and its queue (under mu).
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> queue;
  bool busy = false, stop = false;
  std::string error;   // the first failure of a bucket
  // dld_reducer_stats: passes reduced, buckets, seconds in their collectives (the comm
  // thread's, under mu) and seconds the passes' ends waited for them.
  double passes = 0, buckets = 0, comm_s = 0, exposed_s = 0;
  void halt() {
    if (!thread.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  ~Reducer() { halt(); }
};
Reducer r;

void comm_loop() {
  std::unique_lock<std::mutex> lock(r.mu);
  for (;;) {
    r.cv.wait(lock, [] { return r.stop || !r.queue.empty(); });
    if (r.queue.empty()) return;
    const size_t k = r.queue.front();
    r.queue.pop_front();
    r.busy = true;
    const bool skip = !r.error.empty();   // (a bucket failed: start no more)
    lock.unlock();
    bool ok = true;
    const double t0 = now();
    if (!skip) {
      Watch watch(r.what, r.seq, r.site.c_str());
      ok = reduce_bucket(r.plan[k], k, r.data.data(), r.data.data(), r.op, r.scale, r.what);
    }
    const double spent = now() - t0;
    lock.lock();
    r.comm_s += spent;
    r.buckets += 1;
    if (!ok && r.error.empty()) r.error = t_error;
    r.busy = false;
    r.cv.notify_all();
  }
}

// Waits until the communication thread is idle: the main thread may then call MPI.
void drain() {
  if (!r.thread.joinable()) return;
  std::unique_lock<std::mutex> lock(r.mu);
  r.cv.wait(lock, [] { return r.queue.empty() && !r.busy; });
}

int reducer_begin(void*, int n, const int64_t* numels, const int* dtypes, const int* host) {
  r.result = 0;
  std::string desc;
  for (int i = 0; i < n; ++i)
    desc += std::to_string(numels[i]) + " " + dtype_name(dtypes[i]) + (host[i] ? "\n" : " device\n");
  const int same = dld_check_same(desc.data(), int64_t(desc.size()), r.what, r.seq, r.site.c_str());
  if (same != 0) {
    r.result = same < 0 ? -1 : 0;
    return 1;
  }
  // What the ranks agree on but this reducer does not take: the caller's path reports it.
  MPI_Op o;
  for (int i = 0; i < n; ++i) {
    if (!host[i] || itemsize(dtypes[i]) == 0 || !mpi_op(r.op_code, dtypes[i], &o, r.what)) return 1;
    if (r.scale != 1 && dtypes[i] != kFloat32 && dtypes[i] != kFloat64) return 1;
  }
  r.plan = plan_buckets(numels, dtypes, n, r.bucket_bytes, r.first_bytes);
  r.data.assign(size_t(n), nullptr);
  r.bucket_of.assign(size_t(n), 0);
  r.missing.assign(r.plan.size(), 0);
  for (size_t k = 0; k < r.plan.size(); ++k) {
    for (int i : r.plan[k].members) r.bucket_of[size_t(i)] = int(k);
    r.missing[k] = int(r.plan[k].members.size());
  }
  r.next = 0;
  r.error.clear();
  if (!r.thread.joinable()) {
    r.stop = false;
    r.thread = std::thread(comm_loop);
  }
  r.result = 1;
  return 0;
}

void reducer_ready(void*, int k, void* data, int64_t, int) {
  r.data[size_t(k)] = data;
  if (--r.missing[size_t(r.bucket_of[size_t(k)])] > 0 || r.next >= r.plan.size() || r.missing[r.next] > 0) return;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    while (r.next < r.plan.size() && r.missing[r.next] == 0) r.queue.push_back(r.next++);
  }
  r.cv.notify_all();
}

int reducer_end(void*, int ok) {
  const double t0 = now();
  drain();
  r.exposed_s += now() - t0;
  if (!ok) {   // (the pass's own error is the one to report)
    r.result = 0;
    return 0;
  }
  if (!r.error.empty()) {
    r.result = -1;
    return fail(r.error);
  }
  if (r.next < r.plan.size()) {
    r.result = -1;
    return fail(std::string(r.what) + ": the backward pass never reported gradient " +
                std::to_string(r.plan[r.next].members[0] + 1));
  }
  r.passes += 1;
  return 0;
}

}  // namespace

extern "C" {

const char* dld_cdef(void) {
  return
#include "dist_cdef.inc"
      ;
}

const char* dld_error(void) { return t_error.c_str(); }

int dld_init(void) {
  if (g.started && !g.finalized) return 1;
  if (g.finalized) return fail("dist.init: dl.dist was finalized in this process; MPI cannot start twice");
  int inited = 0;
  MPI_Initialized(&inited);
  int provided = 0;
  if (inited) {
    MPI_Query_thread(&provided);
  } else {
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      return fail("dist.init: MPI_Init_thread failed");
    g.owns_mpi = true;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    return fail(std::string("dist.init: the MPI library gives thread support ") +
                (provided == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE" : "MPI_THREAD_FUNNELED") +
                "; dl.dist needs MPI_THREAD_SERIALIZED" +
                (inited ? " (the host program started MPI: it asks MPI_Init_thread for MPI_THREAD_SERIALIZED or more)"
                        : " (an Open MPI built with thread support)"));
  }
  if (!check(MPI_Comm_dup(MPI_COMM_WORLD, &g.comm), "dist.init")) return -1;
  MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g.comm, &g.rank);
  MPI_Comm_size(g.comm, &g.size);
  MPI_Comm local;
  if (MPI_Comm_split_type(g.comm, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
    MPI_Comm_rank(local, &g.local_rank);
    MPI_Comm_size(local, &g.local_size);
    MPI_Comm_free(&local);
  }
  w.stop.store(false);
  w.thread = std::thread(watchdog_loop);
  g.started = true;
  return 0;
}

void dld_set_deadlines(double warn_s, double abort_s) {
  w.warn_s.store(warn_s);
  w.abort_s.store(abort_s);
}

int dld_initialized(void) { return g.started && !g.finalized; }
int dld_rank(void) { return g.rank; }
int dld_size(void) { return g.size; }
int dld_local_rank(void) { return g.local_rank; }
int dld_local_size(void) { return g.local_size; }

const char* dld_library_version(void) {
  static char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown";
  for (int i = 0; i < len; ++i)
    if (text[i] == '\n') text[i] = ' ';
  return text;
}

int dld_finalize(void) {
  if (!g.started || g.finalized) return 0;
  if (!g.works.empty())
    return fail("dist.finalize: " + std::to_string(g.works.size()) +
                " collectives were started and never waited for (call :wait() on their handles)");
  r.halt();
  w.halt();
  MPI_Comm_free(&g.comm);
  g.finalized = true;
  g.buckets.clear();
  if (g.owns_mpi && MPI_Finalize() != MPI_SUCCESS) return fail("dist.finalize: MPI_Finalize failed");
  return 0;
}

void dld_abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (!g.finalized) MPI_Abort(g.started ? g.comm : MPI_COMM_WORLD, code);   // (none after MPI_Finalize)
  std::_Exit(code ? code : 1);
}

int64_t dld_allreduce(void* buf, int64_t count, int dtype, int op, int async, const char* what, int64_t seq,
                      const char* site) {
  drain();
  MPI_Datatype t;
  MPI_Op o;
  if (!ready(what) || !mpi_type(dtype, &t, what) || !mpi_op(op, dtype, &o, what)) return -1;
  const size_t isz = itemsize(dtype);
  std::vector<MPI_Request> reqs;
  Watch watch(what, seq, site);   // (an asynchronous start is watched too: it may block)
  for (int64_t at = 0; at == 0 || at < count; at += kPiece) {
    const int n = int(std::min(kPiece, count - at));
    char* p = static_cast<char*>(buf) + size_t(at) * isz;
    if (async) {
      MPI_Request r;
      if (!check(MPI_Iallreduce(MPI_IN_PLACE, p, n, t, o, g.comm, &r), what)) {
        MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);   // the pieces started
        return -1;
      }
      reqs.push_back(r);
    } else if (!check(MPI_Allreduce(MPI_IN_PLACE, p, n, t, o, g.comm), what)) {
      return -1;
    }
  }
  return async ? add_work(std::move(reqs)) : 0;
}

int64_t dld_broadcast(void* buf, int64_t count, int dtype, int root, int async, const char* what, int64_t seq,
                      const char* site) {
  drain();
  MPI_Datatype t;
  if (!ready(what) || !mpi_type(dtype, &t, what)) return -1;
  if (root < 0 || root >= g.size)
    return fail(std::string(what) + ": root " + std::to_string(root) + " is not a rank (0 to " +
                std::to_string(g.size - 1) + ")");
  const size_t isz = itemsize(dtype);
  std::vector<MPI_Request> reqs;
  Watch watch(what, seq, site);
  for (int64_t at = 0; at == 0 || at < count; at += kPiece) {
    const int n = int(std::min(kPiece, count - at));
    char* p = static_cast<char*>(buf) + size_t(at) * isz;
    if (async) {
      MPI_Request r;
      if (!check(MPI_Ibcast(p, n, t, root, g.comm, &r), what)) {
        MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);   // the pieces started
        return -1;
      }
      reqs.push_back(r);
    } else if (!check(MPI_Bcast(p, n, t, root, g.comm), what)) {
      return -1;
    }
  }
  return async ? add_work(std::move(reqs)) : 0;
}

int64_t dld_allgatherv(const void* send, int64_t count, void* recv, const int64_t* counts, int dtype, int async,
                       const char* what, int64_t seq, const char* site) {
  drain();
  MPI_Datatype t;
  if (!ready(what) || !mpi_type(dtype, &t, what)) return -1;
  // The counts and displacements live with the work: MPI reads them until it ends.
  std::vector<int> cd(2 * size_t(g.size));
  int64_t at = 0;
  for (int r = 0; r < g.size; ++r) {
    if (at + counts[r] > INT_MAX) return fail(std::string(what) + ": the result has more than 2^31 - 1 elements");
    cd[size_t(r)] = int(counts[r]);
    cd[size_t(g.size + r)] = int(at);
    at += counts[r];
  }
  if (counts[g.rank] != count) return fail(std::string(what) + ": this rank's count is not its gathered count");
  Watch watch(what, seq, site);
  if (!async) {
    return check(MPI_Allgatherv(send, int(count), t, recv, cd.data(), cd.data() + g.size, t, g.comm), what) ? 0
                                                                                                            : -1;
  }
  MPI_Request r;
  if (!check(MPI_Iallgatherv(send, int(count), t, recv, cd.data(), cd.data() + g.size, t, g.comm, &r), what))
    return -1;
  const int64_t id = add_work({r});
  g.held[id] = std::move(cd);
  return id;
}

int64_t dld_barrier(int async, const char* what, int64_t seq, const char* site) {
  drain();
  if (!ready(what)) return -1;
  Watch watch(what, seq, site);
  if (!async) return check(MPI_Barrier(g.comm), what) ? 0 : -1;
  MPI_Request r;
  if (!check(MPI_Ibarrier(g.comm, &r), what)) return -1;
  return add_work({r});
}

int dld_allgather_i64(int64_t mine, int64_t* all, const char* what, int64_t seq, const char* site) {
  drain();
  if (!ready(what)) return -1;
  Watch watch(what, seq, site);
  return check(MPI_Allgather(&mine, 1, MPI_INT64_T, all, 1, MPI_INT64_T, g.comm), what) ? 0 : -1;
}

int dld_wait(int64_t work, const char* what, int64_t seq, const char* site) {
  drain();
  auto it = g.works.find(work);
  if (it == g.works.end()) return fail(std::string(what) + ": this collective was already waited for");
  Watch watch(what, seq, site);
  const bool ok = check(MPI_Waitall(int(it->second.size()), it->second.data(), MPI_STATUSES_IGNORE), what);
  g.held.erase(work);
  g.works.erase(it);
  return ok ? 0 : -1;
}

int dld_test(int64_t work) {
  drain();
  auto it = g.works.find(work);
  if (it == g.works.end()) return fail("dist: this collective was already waited for");
  int done = 0;
  if (!check(MPI_Testall(int(it->second.size()), it->second.data(), &done, MPI_STATUSES_IGNORE), "dist.test"))
    return -1;
  if (done) {
    g.held.erase(work);
    g.works.erase(it);
  }
  return done;
}

int dld_allreduce_many(const void* const* src, void* const* dst, const int64_t* counts, int n, int dtype, int op,
                       double scale, int64_t bucket_bytes, int64_t first_bytes, const char* what, int64_t seq,
                       const char* site) {
  drain();
  MPI_Datatype t;
  MPI_Op o;
  if (!ready(what) || !mpi_type(dtype, &t, what) || !mpi_op(op, dtype, &o, what)) return -1;
  if (scale != 1 && dtype != kFloat32 && dtype != kFloat64)
    return fail(std::string(what) + ": a mean of " + dtype_name(dtype) + " tensors (use op 'sum')");
  std::vector<int> dtypes(size_t(n), dtype);
  const std::vector<Bucket> plan = plan_buckets(counts, dtypes.data(), n, bucket_bytes, first_bytes);
  // The largest bucket first (the order is the same on every rank, and changes no
  // value): two ranks sharing two cores synced the MLP's four gradients (an 800 KB
  // weight's and a bucket of 11 KB) faster with the weight's reduced first than with
  // the bucket first (bench/dist.lua `grads`; docs/performance.md, "dl.dist").
  std::vector<size_t> order(plan.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return plan[x].count > plan[y].count; });
  Watch watch(what, seq, site);
  for (size_t k : order)
    if (!reduce_bucket(plan[k], k, src, dst, o, scale, what)) return -1;
  return 0;
}

int dld_check_same(const char* desc, int64_t len, const char* what, int64_t seq, const char* site) {
  drain();
  if (!ready(what)) return -1;
  Watch watch(what, seq, site);
  int64_t mine[2] = {int64_t(fnv1a(desc, len)), len};
  std::vector<int64_t> all(2 * size_t(g.size));
  if (!check(MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, g.comm), "dist")) return -1;
  int other = -1;
  for (int r = 1; r < g.size && other < 0; ++r)
    if (all[2 * size_t(r)] != all[0] || all[2 * size_t(r) + 1] != all[1]) other = r;
  if (other < 0) return 0;
  // They differ: every rank gathers every description, and names the first difference
  // between rank 0's and the first rank whose description is not rank 0's.
  std::vector<int> cs(size_t(g.size)), ds(size_t(g.size));
  int64_t total = 0;
  for (int r = 0; r < g.size; ++r) {
    cs[size_t(r)] = int(all[2 * size_t(r) + 1]);
    ds[size_t(r)] = int(total);
    total += all[2 * size_t(r) + 1];
  }
  std::vector<char> text(size_t(std::max<int64_t>(total, 1)));
  if (!check(MPI_Allgatherv(desc, int(len), MPI_CHAR, text.data(), cs.data(), ds.data(), MPI_CHAR, g.comm), "dist"))
    return -1;
  const auto a = lines_of(text.data() + ds[0], cs[0]);
  const auto b = lines_of(text.data() + ds[size_t(other)], cs[size_t(other)]);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto show = [](const std::vector<std::string>& l, size_t k) { return k < l.size() ? l[k] : std::string("nothing"); };
  t_error = "the ranks disagree at entry " + std::to_string(i + 1) + ": rank 0 has " + show(a, i) + ", rank " +
            std::to_string(other) + " has " + show(b, i) + " (" + std::to_string(a.size()) + " against " +
            std::to_string(b.size()) + " in all)";
  return 1;
}

const void* dld_reducer(int op, double scale, int64_t bucket_bytes, int64_t first_bytes, const char* what,
                        int64_t seq, const char* site) {
  drain();
  r.result = 0;
  if (!ready(what)) return nullptr;
  if (op < 0 || op > 3) {
    fail(std::string(what) + ": unknown reduction code " + std::to_string(op));
    return nullptr;
  }
  static const MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN, MPI_PROD};
  r.op = ops[op];
  r.op_code = op;
  r.scale = scale;
  r.bucket_bytes = bucket_bytes;
  r.first_bytes = first_bytes;
  r.what = what;
  r.seq = seq;
  r.site = site ? site : "";
  r.hook = dl_grad_hook{nullptr, reducer_begin, reducer_ready, reducer_end};
  return &r.hook;
}

int dld_reducer_result(void) { return r.result; }

void dld_reducer_stats(double* out) {
  std::lock_guard<std::mutex> lock(r.mu);
  out[0] = r.passes;
  out[1] = r.buckets;
  out[2] = r.comm_s;
  out[3] = r.exposed_s;
}

}  // extern "C"

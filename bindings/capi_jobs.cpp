// Background jobs: engine work a Lua pipeline starts now and collects later
// (Dataset:prefetch, scripts/dlua/data.lua). Lua cannot leave its thread, but the work
// a pipeline hands the engine can: the gathers that make a batch of rows, and the
// decoding of image files. They run in order on one worker thread, started on first
// use, while the Lua thread runs the training step.
//
// Note [Background jobs]
// A job captures Tensors (reference-counted atomically) and plain data, never a handle
// or a Lua value; its function uses the tensor layer only (no autograd, no observer:
// both are per thread and off on the worker), and whatever it throws is kept and thrown
// again, with its kind and message, by dl_job_wait on the Lua thread. Ids are never
// reused; an id that is unknown (waited for already, dropped, forged) is an error. The
// worker is never destroyed: at process exit it may still be blocked waiting for work.
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "bindings/capi.h"
#include "bindings/guard.h"
#include "bindings/handles.h"
#include "io/image.h"
#include "tensor/ops.h"

using dl::Tensor;
using dl::bind::get;
using dl::bind::guard_handle;
using dl::bind::guard_status;

namespace {

class Worker {
 public:
  uint64_t submit(std::function<Tensor()> f) {
    std::packaged_task<Tensor()> task(std::move(f));
    std::lock_guard<std::mutex> g(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    const uint64_t id = next_++;
    results_.emplace(id, task.get_future());
    queue_.push_back(std::move(task));
    cv_.notify_one();
    return id;
  }

  // The job's result, or its exception, once it has run.
  Tensor wait(uint64_t id) { return take(id, "job.wait").get(); }
  void drop(uint64_t id) { take(id, "job.drop").wait(); }

 private:
  std::future<Tensor> take(uint64_t id, const char* op) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = results_.find(id);
    DL_CHECK(it != results_.end(), op, ": no job ", id, " (collected already, or never started)");
    std::future<Tensor> f = std::move(it->second);
    results_.erase(it);
    return f;
  }

  void run() {
    for (;;) {
      std::packaged_task<Tensor()> task;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [this] { return !queue_.empty(); });
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Tensor()>> queue_;
  std::unordered_map<uint64_t, std::future<Tensor>> results_;
  std::thread thread_;
  uint64_t next_ = 1;
};

Worker& worker() {
  static Worker* w = new Worker();   // never destroyed (Note [Background jobs])
  return *w;
}

// guard_status for a job id: 0 on error, with the error recorded for Lua.
template <typename F>
uint64_t guard_job(F&& f) noexcept {
  uint64_t id = 0;
  guard_status([&] { id = f(); });
  return id;
}

}  // namespace

extern "C" {

uint64_t dl_job_index_select(uint64_t x, int dim, uint64_t index) {
  return guard_job([&] {
    Tensor t = get(x, "prefetch"), i = get(index, "prefetch");
    return worker().submit([t, dim, i] { return dl::index_select(t, dim, i); });
  });
}

uint64_t dl_job_narrow(uint64_t x, int64_t start, int64_t length) {
  return guard_job([&] {
    Tensor t = get(x, "prefetch");
    // (a copy, not contiguous(): the rows of a contiguous source are contiguous already,
    // and a view would let an in-place change to the batch reach the source)
    return worker().submit([t, start, length] { return dl::clone(dl::narrow(t, 0, start, length)); });
  });
}

uint64_t dl_job_image_decode(const void* data, uint64_t n, int channels, const char* name) {
  return guard_job([&] {
    std::string bytes(static_cast<const char*>(data), size_t(n)), what(name ? name : "image");
    return worker().submit([bytes = std::move(bytes), channels, what = std::move(what)] {
      return dl::io::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), channels, what);
    });
  });
}

uint64_t dl_job_wait(uint64_t job) {
  return guard_handle([&] { return worker().wait(job); });
}

int dl_job_drop(uint64_t job) {
  return guard_status([&] { worker().drop(job); });
}

}  // extern "C"

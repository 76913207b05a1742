// The C ABI of files (declared in bindings/capi.h, "files" section): safetensors, IDX,
// atomic writes, TensorBoard summary writers, and the terminal and clock queries that
// the progress bar needs. The Lua side is scripts/dlua/io.lua, checkpoint.lua,
// summary.lua and progress.lua.
//
// Loaded files and summary writers live in a table of their own, by id (generation <<
// 32 | slot, as tensor handles are, never a pointer): a released, stale or forged id is
// an error, never a crash. The Lua side ties each id to an ffi.gc finalizer
// (dl_io_release); a writer released without close() is flushed and closed then.
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "bindings/capi.h"
#include "bindings/guard.h"
#include "bindings/arenas.h"
#include "bindings/handles.h"
#include "export/model.h"
#include "bindings/value.h"
#include "io/events.h"
#include "io/file.h"
#include "io/idx.h"
#include "io/image.h"
#include "io/safetensors.h"

using dl::ErrorKind;
using dl::Tensor;
using dl::fail;
using dl::bind::get;
using dl::bind::guard_handle;
using dl::bind::guard_status;

namespace {

struct Object {
  virtual ~Object() = default;
};

struct LoadedFile : Object {
  dl::io::SafetensorsFile file;
};

struct LoadedGraph : Object {
  std::shared_ptr<const dl::graph::Model> model;
};

struct Writer : Object {
  std::unique_ptr<dl::io::EventWriter> w;
};

// Few objects, rarely touched: one lock is plenty.
std::mutex g_mu;
struct Slot {
  uint32_t gen = 1;
  std::unique_ptr<Object> obj;
};
std::vector<Slot> g_slots;
std::vector<uint32_t> g_free;

uint64_t object_new(std::unique_ptr<Object> obj) {
  std::lock_guard<std::mutex> lock(g_mu);
  uint32_t slot;
  if (!g_free.empty()) {
    slot = g_free.back();
    g_free.pop_back();
  } else {
    slot = uint32_t(g_slots.size());
    g_slots.emplace_back();
  }
  g_slots[slot].obj = std::move(obj);
  return uint64_t(g_slots[slot].gen) << 32 | (uint64_t(slot) + 1);
}

Object* object_find(uint64_t id) {
  uint64_t slot1 = id & 0xFFFFFFFFu;
  uint32_t gen = uint32_t(id >> 32);
  if (slot1 == 0 || slot1 > g_slots.size()) return nullptr;
  Slot& s = g_slots[size_t(slot1 - 1)];
  return s.gen == gen ? s.obj.get() : nullptr;
}

template <typename T>
T& object_get(uint64_t id, const char* op, const char* what) {
  std::lock_guard<std::mutex> lock(g_mu);
  T* obj = dynamic_cast<T*>(object_find(id));
  if (!obj) fail(ErrorKind::Value, op, ": invalid ", what, " (closed or released)");
  return *obj;
}

void object_release(uint64_t id) noexcept {
  std::unique_ptr<Object> dead;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!object_find(id)) return;
    Slot& s = g_slots[size_t((id & 0xFFFFFFFFu) - 1)];
    dead = std::move(s.obj);
    // Generations stay below 2^21 so that ids stay below 2^53 (exact as Lua numbers).
    s.gen = s.gen >= (1u << 20) ? 1 : s.gen + 1;
    g_free.push_back(uint32_t((id & 0xFFFFFFFFu) - 1));
  }
  // Destroyed outside the lock: a writer's destructor flushes to disk.
}

std::string str_of(const char* p, int64_t len, const char* op, const char* what) {
  if (!p && len > 0) fail(ErrorKind::Value, op, ": no ", what, " given");
  if (len < 0) fail(ErrorKind::Value, op, ": negative length for ", what);
  return std::string(p ? p : "", size_t(len));
}

std::string path_of(const char* path, const char* op) {
  if (!path || !*path) fail(ErrorKind::Value, op, ": no file name given");
  return path;
}

LoadedFile& loaded(uint64_t id, const char* op) { return object_get<LoadedFile>(id, op, "loaded file"); }

const dl::graph::Model& graph_of(uint64_t id, const char* op) {
  return *object_get<LoadedGraph>(id, op, "loaded graph").model;
}

dl::io::EventWriter& writer(uint64_t id, const char* op) {
  Writer& w = object_get<Writer>(id, op, "summary writer");
  if (w.w->closed()) fail(ErrorKind::Value, op, ": the summary writer is closed");
  return *w.w;
}

}  // namespace

extern "C" {

void dl_io_release(struct dl_io_object o) { object_release(o.id); }
void dl_io_release_id(uint64_t id) { object_release(id); }

// ---- safetensors --------------------------------------------------------------------------

int dl_save_safetensors(const char* path, int n, const char* const* names, const int64_t* name_lens,
                        const uint64_t* tensors, int nmeta, const char* const* meta_keys,
                        const int64_t* key_lens, const char* const* meta_values,
                        const int64_t* value_lens) {
  return guard_status([&] {
    const char* op = "save";
    std::string p = path_of(path, op);
    if (n < 0 || nmeta < 0) fail(ErrorKind::Value, op, ": negative count");
    if ((n > 0 && (!names || !name_lens || !tensors)) ||
        (nmeta > 0 && (!meta_keys || !key_lens || !meta_values || !value_lens)))
      fail(ErrorKind::Value, op, ": missing arrays");
    dl::io::NamedTensors ts;
    ts.reserve(size_t(n));
    for (int i = 0; i < n; ++i)
      ts.emplace_back(str_of(names[i], name_lens[i], op, "tensor name"), get(tensors[i], op));
    dl::io::Metadata meta;
    for (int i = 0; i < nmeta; ++i)
      meta.emplace_back(str_of(meta_keys[i], key_lens[i], op, "metadata key"),
                        str_of(meta_values[i], value_lens[i], op, "metadata value"));
    dl::io::save_safetensors(p, ts, meta, op);
  });
}

// ---- exported graphs ------------------------------------------------------------------------

uint64_t dl_graph_load(const char* path) {
  uint64_t id = 0;
  guard_status([&] {
    auto g = std::make_unique<LoadedGraph>();
    g->model = dl::graph::Model::load(path_of(path, "export.load"));
    id = object_new(std::move(g));
  });
  return id;
}

int dl_graph_counts(uint64_t g, double* out3) {
  return guard_status([&] {
    const dl::graph::Graph& gr = graph_of(g, "export.load").graph();
    out3[0] = double(gr.inputs.size());
    out3[1] = double(gr.outputs.size());
    out3[2] = double(gr.nodes.size());
  });
}

const char* dl_graph_input_name(uint64_t g, int i) {
  const char* name = nullptr;
  guard_status([&] {
    const dl::graph::Graph& gr = graph_of(g, "export.load").graph();
    DL_CHECK(i >= 0 && size_t(i) < gr.input_names.size(), "export.load: no input ", i + 1);
    name = gr.input_names[size_t(i)].c_str();
  });
  return name;
}

int dl_graph_run(uint64_t g, const uint64_t* ins, int nin, uint64_t* outs, int nout) {
  return guard_status([&] {
    const dl::graph::Model& m = graph_of(g, "dlg_run");
    DL_CHECK(nin >= 0 && nout == int(m.graph().outputs.size()), "dlg_run: expected room for ",
             m.graph().outputs.size(), " results, got ", nout);
    // Its ops are the runner's, which report to no capture, and its loops read values.
    DL_CHECK(!dl::bind::exporting(), "export: a loaded graph cannot run inside an export; call the function "
             "it was exported from instead");
    std::vector<Tensor> inputs;
    for (int i = 0; i < nin; ++i) inputs.push_back(get(ins[i], "dlg_run"));
    std::vector<Tensor> results = m.run(inputs);
    for (int k = 0; k < nout; ++k) outs[k] = 0;
    for (int k = 0; k < nout; ++k) outs[k] = dl::bind::handle_new(results[size_t(k)]);
  });
}

uint64_t dl_load_safetensors(const char* path) {
  uint64_t id = 0;
  guard_status([&] {
    auto f = std::make_unique<LoadedFile>();
    f->file = dl::io::load_safetensors(path_of(path, "load"), "load");
    id = object_new(std::move(f));
  });
  return id;
}

int dl_loaded_counts(uint64_t file, double* out2) {
  return guard_status([&] {
    LoadedFile& f = loaded(file, "load");
    out2[0] = double(f.file.tensors.size());
    out2[1] = double(f.file.metadata.size());
  });
}

const char* dl_loaded_name(uint64_t file, int i, double* len) {
  const char* out = nullptr;
  guard_status([&] {
    LoadedFile& f = loaded(file, "load");
    if (i < 0 || size_t(i) >= f.file.tensors.size()) fail(ErrorKind::Index, "load: tensor index ", i, " out of range");
    const std::string& s = f.file.tensors[size_t(i)].first;
    *len = double(s.size());
    out = s.c_str();
  });
  return out;
}

uint64_t dl_loaded_tensor(uint64_t file, int i) {
  return guard_handle([&] {
    LoadedFile& f = loaded(file, "load");
    if (i < 0 || size_t(i) >= f.file.tensors.size()) fail(ErrorKind::Index, "load: tensor index ", i, " out of range");
    return f.file.tensors[size_t(i)].second;
  });
}

const char* dl_loaded_meta(uint64_t file, int i, int value, double* len) {
  const char* out = nullptr;
  guard_status([&] {
    LoadedFile& f = loaded(file, "load");
    if (i < 0 || size_t(i) >= f.file.metadata.size()) fail(ErrorKind::Index, "load: metadata index ", i, " out of range");
    const auto& kv = f.file.metadata[size_t(i)];
    const std::string& s = value ? kv.second : kv.first;
    *len = double(s.size());
    out = s.c_str();
  });
  return out;
}

// ---- other files ---------------------------------------------------------------------------

uint64_t dl_load_idx(const char* path) {
  return guard_handle([&] { return dl::io::load_idx(path_of(path, "load_idx"), "load_idx"); });
}

uint64_t dl_load_idx_ubyte_as_float(const char* path, double divisor) {
  return guard_handle([&] {
    return dl::io::load_idx_ubyte_as_float(path_of(path, "fashion_mnist"), float(divisor), "fashion_mnist");
  });
}

int dl_write_file_atomic(const char* path, const char* data, int64_t n) {
  return guard_status([&] {
    std::string d = str_of(data, n, "write_file", "data");
    dl::io::write_file_atomic(path_of(path, "write_file"), d, "write_file");
  });
}

int dl_make_dirs(const char* path) {
  return guard_status([&] { dl::io::make_dirs(path_of(path, "mkdir"), "mkdir"); });
}

// ---- summary writers -------------------------------------------------------------------------

uint64_t dl_summary_open(const char* logdir, const char* suffix) {
  uint64_t id = 0;
  guard_status([&] {
    auto w = std::make_unique<Writer>();
    w->w = std::make_unique<dl::io::EventWriter>(path_of(logdir, "summary.writer"),
                                                 suffix ? suffix : "", "summary.writer");
    id = object_new(std::move(w));
  });
  return id;
}

const char* dl_summary_path(uint64_t w) {
  const char* out = nullptr;
  guard_status([&] { out = object_get<Writer>(w, "summary", "summary writer").w->path().c_str(); });
  return out;
}

int dl_summary_scalar(uint64_t w, const char* tag, int64_t tag_len, double value, int64_t step) {
  return guard_status([&] {
    writer(w, "scalar").scalar(str_of(tag, tag_len, "scalar", "tag"), value, step);
  });
}

int dl_summary_histogram(uint64_t w, const char* tag, int64_t tag_len, uint64_t values, int64_t step,
                         int buckets) {
  return guard_status([&] {
    writer(w, "histogram").histogram(str_of(tag, tag_len, "histogram", "tag"),
                                     get(values, "histogram"), step, buckets);
  });
}

int dl_summary_flush(uint64_t w) {
  return guard_status([&] { writer(w, "flush").flush(); });
}

int dl_summary_close(uint64_t w) {
  return guard_status([&] { object_get<Writer>(w, "close", "summary writer").w->close(); });
}

// ---- terminal and clocks -----------------------------------------------------------------------

int dl_isatty(int fd) { return dl::io::is_terminal(fd) ? 1 : 0; }
int dl_terminal_columns(int fd) { return dl::io::terminal_columns(fd); }
double dl_monotonic_time(void) { return dl::io::monotonic_seconds(); }
double dl_wall_time(void) { return dl::io::wall_seconds(); }

}  // extern "C"

// ---- images (io/image.h): bytes in, bytes out; dlua.io reads and writes the files ---------

uint64_t dl_image_decode(const void* data, uint64_t n, int channels, const char* name) {
  return guard_handle([&] {
    return dl::io::decode_image(static_cast<const uint8_t*>(data), size_t(n), channels, name ? name : "image");
  });
}

const char* dl_image_encode(uint64_t x, const char* format, int quality, const char* name, uint64_t* n) {
  static thread_local std::string bytes;
  *n = 0;
  const int st = guard_status([&] {
    bytes = dl::io::encode_image(get(x, "image.save"), format ? format : "png", quality, name ? name : "image");
  });
  if (st != 0) return nullptr;
  *n = bytes.size();
  return bytes.data();
}

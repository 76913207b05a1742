// libdlua_run's C API (include/dlua/dlg.h) over the runner (model.h).
//
// Outputs the runner allocates are handed out without a copy: the result tensor itself
// stays alive in a table keyed by its data's address until dlg_free_data gives it back
// (its memory then returns to the engine's allocator, for the next run to reuse). A
// result that shares memory with an input or a constant (a graph that returns one of
// them unchanged) is copied first, so that the caller never owns memory it did not get.
#include "dlua/dlg.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <unordered_map>

#include "export/model.h"
#include "tensor/error.h"
#include "tensor/ops.h"

struct dlg_model {
  std::shared_ptr<const dl::graph::Model> model;
};

namespace {

using dl::Tensor;

void set(dlg_error* err, int code, const char* msg) {
  if (!err) return;
  err->code = code;
  std::snprintf(err->message, sizeof err->message, "%s", msg);
}

// Runs f, turning every exception into a status: `fallback` for the engine's errors of
// no more specific kind.
template <typename F>
int guard(dlg_error* err, int fallback, F&& f) noexcept {
  set(err, DLG_OK, "");
  try {
    f();
    return DLG_OK;
  } catch (const dl::Error& e) {
    const int code = e.kind() == dl::ErrorKind::Memory ? DLG_ERR_MEMORY
                     : e.kind() == dl::ErrorKind::Type && fallback == DLG_ERR_RUN ? DLG_ERR_INPUT
                                                                                  : fallback;
    set(err, code, e.what());
    return code;
  } catch (const std::bad_alloc&) {
    set(err, DLG_ERR_MEMORY, "dlg: out of memory");
    return DLG_ERR_MEMORY;
  } catch (const std::exception& e) {
    set(err, fallback, e.what());
    return fallback;
  } catch (...) {
    set(err, fallback, "dlg: unknown error");
    return fallback;
  }
}

std::mutex g_mu;
std::unordered_map<void*, Tensor> g_outputs;   // memory handed out, by address

dl::Shape shape_of(const dlg_tensor& t, const char* what, int k) {
  DL_CHECK_KIND(Type, t.ndim >= 0 && t.ndim <= DLG_MAX_DIMS, "dlg_run: ", what, " ", k + 1, " has ", t.ndim,
                " dims (0 to ", DLG_MAX_DIMS, ")");
  DL_CHECK_KIND(Type, t.dtype >= DLG_BOOL && t.dtype <= DLG_FLOAT64, "dlg_run: ", what, " ", k + 1,
                " has dtype code ", t.dtype);
  for (int d = 0; d < t.ndim; ++d)
    DL_CHECK_KIND(Type, t.shape[d] >= 0, "dlg_run: ", what, " ", k + 1, " has a negative size");
  return dl::Shape(t.shape, t.ndim);
}

bool shares(const Tensor& t, const std::vector<Tensor>& ins) {
  for (const Tensor& x : ins)
    if (t.same_storage(x)) return true;
  return false;
}

dlg_model* load_with(dlg_error* err, int fallback, const std::function<std::shared_ptr<const dl::graph::Model>()>& f) {
  dlg_model* m = nullptr;
  guard(err, fallback, [&] { m = new dlg_model{f()}; });
  return m;
}

}  // namespace

extern "C" {

dlg_model* dlg_load(const char* path, dlg_error* err) {
  if (!path) return set(err, DLG_ERR_ARG, "dlg_load: no path given"), nullptr;
  if (std::FILE* f = std::fopen(path, "rb")) {
    std::fclose(f);
  } else {
    char msg[480];
    std::snprintf(msg, sizeof msg, "dlg_load: %s: cannot open the file (%s)", path, std::strerror(errno));
    return set(err, DLG_ERR_FILE, msg), nullptr;
  }
  return load_with(err, DLG_ERR_FORMAT, [&] { return dl::graph::Model::load(path); });
}

dlg_model* dlg_load_memory(const void* data, size_t size, dlg_error* err) {
  if (!data && size) return set(err, DLG_ERR_ARG, "dlg_load_memory: no data given"), nullptr;
  return load_with(err, DLG_ERR_FORMAT, [&] { return dl::graph::Model::parse(data, size, "(memory)"); });
}

void dlg_free(dlg_model* m) { delete m; }

int dlg_set_loop_limit(const dlg_model* m, int64_t max_iterations) {
  if (!m || max_iterations < 0) return DLG_ERR_ARG;
  m->model->set_loop_limit(max_iterations);
  return DLG_OK;
}

int dlg_num_inputs(const dlg_model* m) { return m ? int(m->model->graph().inputs.size()) : -1; }
int dlg_num_outputs(const dlg_model* m) { return m ? int(m->model->graph().outputs.size()) : -1; }

const char* dlg_input_name(const dlg_model* m, int i) {
  if (!m || i < 0 || size_t(i) >= m->model->graph().input_names.size()) return nullptr;
  return m->model->graph().input_names[size_t(i)].c_str();
}

int dlg_input_info(const dlg_model* m, int i, dlg_tensor* info, dlg_error* err) {
  if (!m || !info || i < 0 || i >= dlg_num_inputs(m))
    return set(err, DLG_ERR_ARG, "dlg_input_info: no such model or input"), DLG_ERR_ARG;
  const dl::graph::Graph& g = m->model->graph();
  const dl::graph::ValueInfo& v = g.values[size_t(g.inputs[size_t(i)])];
  *info = dlg_tensor{};
  info->dtype = int(v.dtype);
  info->ndim = int(v.shape.size());
  for (size_t d = 0; d < v.shape.size(); ++d) info->shape[d] = v.shape[d].constant() ? v.shape[d].add : -1;
  set(err, DLG_OK, "");
  return DLG_OK;
}

int dlg_run(const dlg_model* m, const dlg_tensor* inputs, int n_in, dlg_tensor* outputs, int n_out,
            dlg_error* err) {
  if (!m) return set(err, DLG_ERR_ARG, "dlg_run: no model given"), DLG_ERR_ARG;
  if ((n_in > 0 && !inputs) || (n_out > 0 && !outputs) || n_in < 0 || n_out < 0)
    return set(err, DLG_ERR_ARG, "dlg_run: missing input or output array"), DLG_ERR_ARG;
  return guard(err, DLG_ERR_RUN, [&] {
    // Positions in messages count from 1, as in the script the graph came from, whose
    // index inputs are 1-based (Note [Positions in messages] in tensor/error.h): an index
    // 9 a host passes is "index 9", not the engine's 8.
    const dl::MessageBase base(1);
    const dl::graph::Model& model = *m->model;
    DL_CHECK_KIND(Type, n_out == dlg_num_outputs(m), "dlg_run: the graph has ", dlg_num_outputs(m),
                  " outputs, room was given for ", n_out);
    std::vector<Tensor> ins;
    for (int k = 0; k < n_in; ++k) {
      const dl::Shape s = shape_of(inputs[k], "input", k);
      DL_CHECK_KIND(Type, inputs[k].data || dl::checked_numel(s, "dlg_run") == 0, "dlg_run: input ", k + 1,
                    " has no data");
      ins.push_back(dl::from_blob(inputs[k].data, s, {}, dl::DType(inputs[k].dtype)));
    }
    std::vector<Tensor> results = model.run(ins);
    // The caller's buffers are checked before anything is written.
    for (int k = 0; k < n_out; ++k) {
      if (!outputs[k].data) continue;
      const dl::Shape s = shape_of(outputs[k], "output", k);
      const Tensor& r = results[size_t(k)];
      DL_CHECK_KIND(Type, s == r.shape() && dl::DType(outputs[k].dtype) == r.dtype(), "dlg_run: output ", k + 1,
                    " is ", dl::dtype_name(r.dtype()), " ", r.shape(), "; the buffer given is for ",
                    dl::dtype_name(dl::DType(outputs[k].dtype)), " ", s);
    }
    // Memory the caller must not own: the inputs' (the constants' never comes back from
    // run), and what an earlier output of this run already handed out. Everything that
    // can fail (copies) happens before any output is handed out, so that an error leaves
    // nothing to give back.
    std::vector<Tensor> taken = ins;
    for (int k = 0; k < n_out; ++k) {
      Tensor& r = results[size_t(k)];
      dlg_tensor& o = outputs[k];
      if (o.data) {
        Tensor dst = dl::from_blob(o.data, r.shape(), {}, r.dtype());
        dl::copy_(dst, r);
        r = Tensor();
        continue;
      }
      if (r.numel() > 0 && (!r.is_contiguous() || shares(r, taken))) r = dl::clone(r);
      taken.push_back(r);
    }
    std::lock_guard<std::mutex> lock(g_mu);
    for (int k = 0; k < n_out; ++k) {
      Tensor& r = results[size_t(k)];
      dlg_tensor& o = outputs[k];
      if (!r.defined()) continue;   // copied into the caller's buffer
      o.dtype = int(r.dtype());
      o.ndim = r.dim();
      for (int d = 0; d < r.dim(); ++d) o.shape[d] = r.size(d);
      if (r.numel() == 0) continue;   // no memory: data stays NULL
      o.data = r.raw_data();
      g_outputs[o.data] = std::move(r);
    }
  });
}

void dlg_free_data(void* data) {
  if (!data) return;
  Tensor dead;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_outputs.find(data);
  if (it == g_outputs.end()) return;
  dead = std::move(it->second);
  g_outputs.erase(it);
}

const char* dlg_version(void) { return DLUA_VERSION_STRING; }

}  // extern "C"

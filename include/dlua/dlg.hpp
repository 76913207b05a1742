// libdlua_run for C++: <dlua/dlg.h> with ownership in types and errors as exceptions
// (thrown here, in the caller's code: none crosses the C ABI).
//
//   #include <dlua/dlg.hpp>
//
//   dlg::Model m("mlp.dlg");                             // throws dlg::Error
//   std::vector<float> x(784);
//   std::vector<dlg::Output> y = m.run({dlg::input(x.data(), {1, 784})});
//   const float* probs = y[0].data<float>();           // y[0].shape() == {1, 10}
//
// A Model may be run from several threads at once; an Output owns its memory and gives
// it back when destroyed.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dlua/dlg.h"

namespace dlg {

class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  int code() const noexcept { return code_; }  // a dlg_status

 private:
  int code_;
};

template <typename T> constexpr int dtype_of();
template <> constexpr int dtype_of<bool>() { return DLG_BOOL; }
template <> constexpr int dtype_of<uint8_t>() { return DLG_UINT8; }
template <> constexpr int dtype_of<int32_t>() { return DLG_INT32; }
template <> constexpr int dtype_of<int64_t>() { return DLG_INT64; }
template <> constexpr int dtype_of<float>() { return DLG_FLOAT32; }
template <> constexpr int dtype_of<double>() { return DLG_FLOAT64; }

// An input: host memory read where it is (no copy) during run().
template <typename T>
dlg_tensor input(const T* data, std::initializer_list<int64_t> shape) {
  if (shape.size() > DLG_MAX_DIMS) throw Error(DLG_ERR_ARG, "dlg::input: too many dims");
  dlg_tensor t{};
  t.data = const_cast<T*>(data);
  t.dtype = dtype_of<T>();
  t.ndim = int(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  return t;
}

// A result, in memory the runner allocated.
class Output {
 public:
  explicit Output(const dlg_tensor& t) : t_(t) {}
  Output(Output&& o) noexcept : t_(o.t_) { o.t_.data = nullptr; }
  Output& operator=(Output&& o) noexcept {
    std::swap(t_, o.t_);
    return *this;
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  ~Output() { dlg_free_data(t_.data); }

  int dtype() const { return t_.dtype; }
  std::vector<int64_t> shape() const { return std::vector<int64_t>(t_.shape, t_.shape + t_.ndim); }
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < t_.ndim; ++d) n *= t_.shape[d];
    return n;
  }
  // The elements, row-major; T must be the output's dtype.
  template <typename T>
  const T* data() const {
    if (dtype_of<T>() != t_.dtype) throw Error(DLG_ERR_ARG, "dlg::Output::data: the output has another dtype");
    return static_cast<const T*>(t_.data);
  }

 private:
  dlg_tensor t_;
};

class Model {
 public:
  explicit Model(const std::string& path) : m_(dlg_load(path.c_str(), &err_)) { check(m_ != nullptr); }
  Model(const void* data, size_t size) : m_(dlg_load_memory(data, size, &err_)) { check(m_ != nullptr); }
  Model(Model&& o) noexcept : m_(o.m_) { o.m_ = nullptr; }
  Model& operator=(Model&& o) noexcept {
    std::swap(m_, o.m_);
    return *this;
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() { dlg_free(m_); }

  int num_inputs() const { return dlg_num_inputs(m_); }
  int num_outputs() const { return dlg_num_outputs(m_); }
  std::string input_name(int i) const {
    const char* n = dlg_input_name(m_, i);
    return n ? n : "";
  }

  std::vector<Output> run(const std::vector<dlg_tensor>& inputs) const {
    std::vector<dlg_tensor> outs(static_cast<size_t>(num_outputs()), dlg_tensor{});
    dlg_error err;
    if (dlg_run(m_, inputs.data(), int(inputs.size()), outs.data(), int(outs.size()), &err) != DLG_OK)
      throw Error(err.code, err.message);
    std::vector<Output> r;
    r.reserve(outs.size());
    for (const dlg_tensor& o : outs) r.emplace_back(o);
    return r;
  }

 private:
  void check(bool ok) const {
    if (!ok) throw Error(err_.code, err_.message);
  }
  dlg_error err_{};
  dlg_model* m_;
};

}  // namespace dlg

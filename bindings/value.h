// Lua tensor values (struct dl_tensor): a handle, or a small tensor held inline.
// Note [Small tensors inline] in value.cpp says why and when.
//
//   Tensor x = dl::bind::value_of(a, "add");        // either kind, as an engine tensor
//   int st = dl::bind::deliver(dl::exp(x), out);     // 0: inline, 1: a handle
//
// An inline tensor is an immutable value: value_of gives a fresh copy of it, so an op
// that returns a view of its input or writes into it must be given a handle
// (promote); the Lua side promotes before every such call.
#pragma once
#include <atomic>
#include <cstdint>

#include "bindings/capi.h"
#include "tensor/small_sizes.h"
#include "tensor/tensor.h"

namespace dl::bind {

constexpr int kInlineBytes = int(sizes::kInlineBytes);   // Note [The paths of a + b]

// The engine tensor `t` stands for; throws "op: invalid tensor" for a dead handle or a
// malformed inline header.
Tensor value_of(const dl_tensor* t, const char* op);
// value_of for the operands of pointwise ops only, whose results never share an
// operand's memory: an inline value may come back as an earlier, equal copy (Note
// [Inline operands of pointwise ops] in value.cpp).
Tensor operand_of(const dl_tensor* t, const char* op);
// Whether t is a host tensor of at most kInlineBytes of elements: the size a Lua value
// holds inline.
bool small_host_bytes(const Tensor& t);
// Writes `t` into *out: inline when it is small, plain and unaliased (returns 0), else
// as a new handle (returns 1).
int deliver(Tensor t, dl_tensor* out);
// Writes `t` into *out as a new handle (returns 1).
int deliver_handle(Tensor t, dl_tensor* out);
// Makes *t a handle in place when it is inline; returns its id.
uint64_t promote(dl_tensor* t);

// The operand of a fast path: the elements of a small contiguous host tensor.
struct SmallOperand {
  DType dtype;
  int ndim;
  int64_t numel;
  uint64_t sizes;     // one byte a dim, as in struct dl_tensor
  const void* data;
};
// Fills *v when `t` can be read directly: inline, or (when no gradient is being
// recorded) a handle to a small contiguous plain host tensor. False: take the general
// path.
bool small_operand(const dl_tensor* t, SmallOperand* v) noexcept;
// Where an inline result's elements go, and its header once they are written: of
// dtype `dtype`, shaped like `like`.
void* inline_elements(dl_tensor* out) noexcept;
void finish_inline(dl_tensor* out, DType dtype, const SmallOperand& like) noexcept;

// dl.export's capture (capi_export.cpp, Note [Strict capture] in export/capture.cpp):
// while this thread captures, results are handles (never inline) and the small fast
// paths are off, so that each value keeps the identity the capture knows it by; that
// holds while a loop runs eagerly inside the capture too (capturing), though its values
// may then be read (exporting is false). g_exports counts the captures in progress on
// every thread: a plain load that spares the fast paths a thread-local lookup while
// there are none.
extern std::atomic<int> g_exports;
bool exporting() noexcept;
bool capturing() noexcept;
[[gnu::always_inline]] inline bool maybe_exporting() noexcept {
  return __builtin_expect(g_exports.load(std::memory_order_relaxed) != 0, 0) && exporting();
}
[[gnu::always_inline]] inline bool maybe_capturing() noexcept {
  return __builtin_expect(g_exports.load(std::memory_order_relaxed) != 0, 0) && capturing();
}
// Refuses, while this thread captures, an entry point that reads a tensor's values into
// Lua (`what`): a graph cannot hold what Lua does with them.
void check_no_escape(const char* what);

// The promise of a deferred result of a compiled call (Note [Proxies] in
// capi_compile.cpp): a value with id 0 whose dtype byte is one of these tags.
constexpr uint8_t kProxyTag = 0xFD;     // a step of the call `serial`, at `pos`
constexpr uint8_t kExpiredTag = 0xFC;   // a step's result that its call did not keep
struct ProxyRef {
  uint8_t tag = kProxyTag;
  uint32_t pos = 0;
  uint64_t serial = 0;    // kProxyTag: the call; kExpiredTag: the trace's index + 1
  uint64_t fn = 0;        // kExpiredTag: the compiled function's id
};
// True when t is a proxy or an expired one, with its fields in *r.
bool proxy_ref(const dl_tensor* t, ProxyRef* r) noexcept;
void write_proxy(dl_tensor* out, const ProxyRef& r) noexcept;
// The tensor a proxy stands for, running the call's deferred steps first; an error
// (named after `op`) for an expired or stale one (capi_compile.cpp).
Tensor resolve_proxy(const ProxyRef& r, const char* op);

}  // namespace dl::bind

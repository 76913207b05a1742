// Lua tensor values: handles and small tensors held inline (value.h).
//
// Note [Small tensors inline]
// A handle costs more than a small op: the engine allocates a TensorImpl, a Storage and
// its bytes, takes the handle table's lock to register it and again to release it, and
// the Lua side tracks the value that holds it until the collector finds it dead (Note
// [Handles released by a sweep, not by finalizers] in scripts/dlua/lifetime.lua). For
// `a + b` on 16 floats that is several times the arithmetic and more than PyTorch's
// whole eager op (bench/, `add16`).
// So a small host tensor (at most kInlineBytes of elements, at most 8 dims of at most
// 255 each) that nothing else refers to lives in the Lua value itself: struct dl_tensor
// with id 0, a header (dtype, ndim, numel, sizes) and the elements, allocated by LuaJIT
// as plain cdata, freed by the collector like a number box, with nothing to release.
//
// Such a value is immutable and unaliased, like a Lua number: the engine copies it in
// when an op needs an engine tensor (value_of) and never keeps a pointer to it, so no
// lifetime ties the engine to the Lua heap. Identity only starts to matter once a view
// shares its storage, an in-place op writes into it, or autograd records it; every
// such entry point of the C ABI takes a handle id, and the Lua side first promotes the
// value in place (promote: the copy goes into a new handle, whose id is written into
// the same cdata, which the Lua side tracks from then on). Because promotion happens to
// the very object the script holds, every alias of it sees the change.
//
// Results are delivered inline only when that loses nothing (deliver): a contiguous
// host tensor with no autograd history that is not a variable, not a view, not host
// memory lent by an embedding program, and whose TensorImpl and Storage have no other
// reference. The pointwise ops on small operands skip the engine's front end entirely
// (dl::small, tensor/small.h): they read inline values and small handle tensors in
// place and write the result inline, allocating nothing but the Lua value. Handles
// are read that way only while no gradient is being recorded.
//
// A small recorded result is inline too, its history kept in the gradient scope's arena
// (Note [Recorded values in arenas] in arenas.cpp): while that arena lives the value
// stands for the kept tensor (value_of returns it, the fast paths leave it to the
// general path, which records it); afterwards it is a plain inline value. Every other
// inline value needs no recording, as nothing can have asked for its gradient.
#include "bindings/value.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "autograd/autograd.h"
#include "bindings/handles.h"
#include "bindings/arenas.h"
#include "tensor/error.h"
#include "tensor/observe.h"

namespace dl::bind {

namespace {

// struct dl_tensor seen as bytes (capi.h): the id, the inline header, the elements.
struct Header {
  uint64_t id;
  uint8_t dtype, ndim, numel, pad8;
  uint32_t slot;      // a recorded value's place in its arena (arenas.h)
  uint64_t sizes;
  uint64_t arena;      // that arena's serial, or 0
};
constexpr size_t kHeaderBytes = sizeof(Header);
static_assert(kHeaderBytes == offsetof(dl_tensor, inl_v0), "dl_tensor's header layout");
static_assert(sizeof(dl_tensor) == kHeaderBytes + kInlineBytes, "dl_tensor's inline bytes");
static_assert(offsetof(dl_tensor, inl_sizes) == offsetof(Header, sizes), "dl_tensor's sizes");
static_assert(offsetof(dl_tensor, inl_arena) == offsetof(Header, arena), "dl_tensor's arena");

// Note [Headers as words]
// A header is read and written as its four 64-bit words, each field shifted into or
// out of its word in registers: built field by field on the stack and copied whole, a
// header's copy read back with wide loads what narrow stores had just written there,
// which the processor cannot forward (a stall of a dozen cycles or more, each time).
// A compiled call writes and reads a proxy's header once per op and an eager inline op
// reads and writes headers too (bench/ `chainc` and `add16`; docs/performance-compile.md,
// "The compiled call's own cost").
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "dl_tensor headers are read as little-endian words");
static_assert(offsetof(Header, dtype) == 8 && offsetof(Header, slot) == 12 && offsetof(Header, sizes) == 16,
              "dl_tensor's header words");

uint64_t word_at(const dl_tensor* t, int i) {
  uint64_t w;
  std::memcpy(&w, reinterpret_cast<const unsigned char*>(t) + 8 * i, 8);
  return w;
}

Header header_of(const dl_tensor* t) {
  const uint64_t meta = word_at(t, 1);
  Header h;
  h.id = word_at(t, 0);
  h.dtype = uint8_t(meta);
  h.ndim = uint8_t(meta >> 8);
  h.numel = uint8_t(meta >> 16);
  h.pad8 = uint8_t(meta >> 24);
  h.slot = uint32_t(meta >> 32);
  h.sizes = word_at(t, 2);
  h.arena = word_at(t, 3);
  return h;
}

const void* elements_of(const dl_tensor* t) {
  return reinterpret_cast<const unsigned char*>(t) + kHeaderBytes;
}

// The Lua side declares the fields const, so that scripts cannot write them; the engine
// writes them as bytes.
unsigned char* bytes_of(dl_tensor* t) { return reinterpret_cast<unsigned char*>(t); }

void* elements_of(dl_tensor* t) { return bytes_of(t) + kHeaderBytes; }

void put_word(dl_tensor* t, int i, uint64_t w) { std::memcpy(bytes_of(t) + 8 * i, &w, 8); }

void write_header(dl_tensor* out, const Header& h) {
  put_word(out, 0, h.id);
  put_word(out, 1,
           uint64_t(h.dtype) | uint64_t(h.ndim) << 8 | uint64_t(h.numel) << 16 | uint64_t(h.pad8) << 24 |
               uint64_t(h.slot) << 32);
  put_word(out, 2, h.sizes);
  put_word(out, 3, h.arena);
}

int64_t size_at(uint64_t sizes, int d) { return int64_t((sizes >> (8 * d)) & 0xff); }

// Sizes packed one byte a dim; false when a size does not fit a byte.
bool pack_sizes(const Shape& s, uint64_t* out) {
  uint64_t v = 0;
  for (int d = 0; d < s.size(); ++d) {
    if (s[d] < 0 || s[d] > 0xff) return false;
    v |= uint64_t(s[d]) << (8 * d);
  }
  *out = v;
  return true;
}

// A well-formed inline header: what a forged or corrupted value is refused by.
bool valid_inline(const Header& h) {
  if (h.dtype >= kNumDTypes || h.ndim > kMaxDims) return false;
  if (h.ndim < 8 && (h.sizes >> (8 * h.ndim)) != 0) return false;
  // The product saturates past what 64 bytes hold (255^8 overflows int64); a later 0
  // still makes it 0: (100, 0) is an empty value held inline.
  int64_t n = 1;
  for (int d = 0; d < h.ndim; ++d) n = std::min<int64_t>(n * size_at(h.sizes, d), kInlineBytes + 1);
  return n == h.numel && n * int64_t(itemsize(DType(h.dtype))) <= kInlineBytes;
}

bool no_autograd(const TensorImpl* i) { return !i->grad_node && !i->is_variable && !i->autograd; }

// Nothing but `t` refers to its memory: its TensorImpl and Storage have no other
// owner, or it is a view (a reduction's result drops dims that way) whose base only it
// holds.
bool unaliased(const Tensor& t) {
  const TensorImpl* i = t.impl();
  if (i->use_count() != 1 || !no_autograd(i) || t.storage().borrowed()) return false;
  const TensorImpl* base = i->view_base.get();
  if (!base) return i->storage->use_count() == 1;
  return base->use_count() == 1 && no_autograd(base) && i->storage->use_count() == 2 &&
         base->storage == i->storage;
}

// A recorded result that can be kept in the open arena and held inline (Note [Recorded
// values in arenas] in arenas.cpp): no script-visible tensor shares its memory.
bool keepable(const Tensor& t) {
  const TensorImpl* i = t.impl();
  if (!i->grad_node || i->is_variable || i->autograd || i->use_count() != 1 || t.storage().borrowed() ||
      !arena_is_open())
    return false;
  const TensorImpl* base = i->view_base.get();
  return !base || base->use_count() == 1;
}

// The tensor a recorded inline value stands for while its arena lives, else null. A
// value whose arena is gone is made a plain inline value on the way (serials are never
// reused), so that it is not looked for again.
const Tensor* kept(const dl_tensor* t, const Header& h) {
  if (h.arena == 0) return nullptr;
  const Tensor* k = arena_find(ArenaRef{h.arena, h.slot});
  if (k && uint8_t(k->dtype()) == h.dtype && k->numel() == h.numel) return k;
  const uint64_t none = 0;
  std::memcpy(bytes_of(const_cast<dl_tensor*>(t)) + offsetof(Header, arena), &none, sizeof none);
  return nullptr;
}

}  // namespace

bool small_host_bytes(const Tensor& t) {
  return t.device().is_cpu() && t.numel() * int64_t(t.itemsize()) <= kInlineBytes;
}

namespace {

// A fresh engine copy of a plain inline value (to an exported graph, a constant).
Tensor copy_of(const dl_tensor* t, const Header& h, const char* op) {
  return observed_other("constant", [&] {
    Shape shape;
    for (int d = 0; d < h.ndim; ++d) shape.push_back(size_at(h.sizes, d));
    Tensor r = empty(shape, DType(h.dtype), Device{}, op);
    if (h.numel > 0) std::memcpy(r.raw_data(), elements_of(t), size_t(h.numel) * r.itemsize());
    return r;
  }, [](Observed&, const Tensor&) {});
}

// Note [Inline operands of pointwise ops]
// A plain inline value (not in an arena) that a recorded op reads is copied into an
// engine tensor, and the node keeps the copy: in `y = (y * w + 0.1):tanh()` repeated,
// w was copied at every product, a tenth of a recorded op. The pointwise entry points,
// whose results are always fresh tensors (never an operand, never a view of one), take
// such operands through a memo of the thread's last few copies instead. An entry is
// handed out again only when its dtype and shape are the value's and its storage holds
// the value's bytes, compared at each lookup: equal values are interchangeable, and a
// copy that anything had written to would not match. Nothing writes to one, though: a
// memo copy is an operand of pointwise ops alone (view, in-place and every other entry
// point take value_of's own fresh copies or handles), and the nodes that save it only
// read it.
struct Memo {
  struct Entry {
    Tensor t;          // undefined: a free entry
    uint64_t sizes;    // the value's header: its packed sizes, dims and dtype
    uint8_t ndim, dtype;
  };
  static constexpr int kEntries = 4;
  Entry e[kEntries] = {};
  int next = 0;
};
thread_local Memo* t_memo = nullptr;
thread_local bool t_memo_gone = false;   // trivially destructible: readable at exit
struct MemoOwner {
  ~MemoOwner() {
    delete t_memo;
    t_memo = nullptr;
    t_memo_gone = true;
  }
};
Memo* memo() {
  if (Memo* m = t_memo) return m;
  if (t_memo_gone) return nullptr;
  thread_local MemoOwner owner;
  (void)owner;
  return t_memo = new Memo();
}

// A plain inline value's copy from the memo, or a fresh one that the memo then keeps.
Tensor memo_copy(Memo& m, const dl_tensor* t, const Header& h, const char* op) {
  const size_t nbytes = size_t(h.numel) * itemsize(DType(h.dtype));
  for (const Memo::Entry& e : m.e)
    if (e.t.defined() && e.dtype == h.dtype && e.ndim == h.ndim && e.sizes == h.sizes &&
        std::memcmp(e.t.raw_data(), elements_of(t), nbytes) == 0)
      return e.t;
  Tensor r = copy_of(t, h, op);
  m.e[m.next] = Memo::Entry{r, h.sizes, h.ndim, h.dtype};
  m.next = (m.next + 1) % Memo::kEntries;
  return r;
}

// The engine tensor `t` stands for: a handle's, a kept value's while its arena lives, or
// a copy of a plain inline value (through the memo when `memoized`).
inline Tensor read_value(const dl_tensor* t, const char* op, bool memoized) {
  Header h = header_of(t);
  if (h.id != 0) return handle_get(h.id, op);
  if (h.dtype == kProxyTag || h.dtype == kExpiredTag) {
    ProxyRef r;
    proxy_ref(t, &r);
    return resolve_proxy(r, op);
  }
  if (!valid_inline(h)) fail(ErrorKind::Value, op, ": invalid tensor (not a dlua tensor)");
  if (const Tensor* k = kept(t, h)) return *k;
  Memo* m = memoized ? memo() : nullptr;
  return m ? memo_copy(*m, t, h, op) : copy_of(t, h, op);
}

}  // namespace

Tensor value_of(const dl_tensor* t, const char* op) { return read_value(t, op, false); }

Tensor operand_of(const dl_tensor* t, const char* op) { return read_value(t, op, true); }

int deliver(Tensor t, dl_tensor* out) {
  Header h{};
  if (small_host_bytes(t) && !maybe_capturing() && pack_sizes(t.shape(), &h.sizes) && t.is_contiguous()) {
    const bool keep = keepable(t);
    if (keep || unaliased(t)) {
      h.dtype = uint8_t(t.dtype());
      h.ndim = uint8_t(t.dim());
      h.numel = uint8_t(t.numel());
      if (t.numel() > 0) std::memcpy(elements_of(out), t.raw_data(), size_t(t.numel()) * t.itemsize());
      if (keep) {
        ArenaRef r = arena_keep(std::move(t));
        h.arena = r.serial;
        h.slot = r.slot;
      }
      write_header(out, h);
      return 0;
    }
  }
  return deliver_handle(std::move(t), out);
}

int deliver_handle(Tensor t, dl_tensor* out) {
  Header h{};
  h.id = handle_new(std::move(t));
  write_header(out, h);
  return 1;
}

uint64_t promote(dl_tensor* t) {
  Header h = header_of(t);
  if (h.id != 0) return h.id;
  if (h.dtype == kProxyTag || h.dtype == kExpiredTag) {   // a clean handle header
    Header c{};
    c.id = handle_new(value_of(t, "tensor"));
    write_header(t, c);
    return c.id;
  }
  h.id = handle_new(value_of(t, "tensor"));
  write_header(t, h);
  return h.id;
}

bool small_operand(const dl_tensor* t, SmallOperand* v) noexcept {
  if (maybe_capturing()) return false;
  Header h = header_of(t);
  if (h.id == 0) {
    if (!valid_inline(h)) return false;
    if (h.arena != 0 && kept(t, h)) return false;   // in a live arena: the kept tensor, general path
    *v = SmallOperand{DType(h.dtype), h.ndim, h.numel, h.sizes, elements_of(t)};
    return true;
  }
  if (ag::is_recording()) return false;
  const Tensor* x = handle_find(h.id);
  if (!x || !small_host_bytes(*x) || !x->is_contiguous() || x->storage().revoked()) return false;
  uint64_t sizes;
  if (!pack_sizes(x->shape(), &sizes)) return false;
  *v = SmallOperand{x->dtype(), x->dim(), x->numel(), sizes, x->raw_data()};
  return true;
}

void* inline_elements(dl_tensor* out) noexcept { return elements_of(out); }

bool proxy_ref(const dl_tensor* t, ProxyRef* r) noexcept {
  Header h = header_of(t);
  if (h.id != 0 || (h.dtype != kProxyTag && h.dtype != kExpiredTag)) return false;
  r->tag = h.dtype;
  r->pos = h.slot;
  r->serial = h.arena;
  r->fn = h.sizes;
  return true;
}

void write_proxy(dl_tensor* out, const ProxyRef& r) noexcept {
  Header h{};
  h.dtype = r.tag;
  h.slot = r.pos;
  h.arena = r.serial;
  h.sizes = r.fn;
  write_header(out, h);
}

void finish_inline(dl_tensor* out, DType dtype, const SmallOperand& like) noexcept {
  Header h{};
  h.dtype = uint8_t(dtype);
  h.ndim = uint8_t(like.ndim);
  h.numel = uint8_t(like.numel);
  h.sizes = like.sizes;
  write_header(out, h);
}

}  // namespace dl::bind

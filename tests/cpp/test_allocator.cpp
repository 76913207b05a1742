// The host caching allocator (tensor/allocator.h) and the object pool (tensor/pool.h).
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "tensor/allocator.h"
#include "tensor/ops.h"
#include "tensor/pool.h"
#include "tensor/tensor.h"

namespace ha = dl::host_allocator;

namespace {
// Bytes the allocator accounts for one live block of `n` bytes.
int64_t block_size(size_t n) {
  int64_t before = ha::stats().in_use;
  void* p = ha::allocate(n, "test");
  int64_t size = ha::stats().in_use - before;
  ha::deallocate(p, n);
  return size;
}
}  // namespace

TEST_CASE("allocator: blocks are aligned and at most a quarter larger than asked") {
  for (size_t n : {size_t(1), size_t(63), size_t(64), size_t(65), size_t(512), size_t(513),
                   size_t(1000), size_t(1025), size_t(40000000), size_t(188160000)}) {
    INFO(n);
    void* p = ha::allocate(n, "test");
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    std::memset(p, 1, n);  // the whole request is usable (ASan checks the bound)
    ha::deallocate(p, n);
    int64_t size = block_size(n);
    CHECK(size >= int64_t(n));
    if (n > 512) CHECK(size <= int64_t(n) + int64_t(n) / 4 + 1);
  }
  CHECK(block_size(40000000) == 41943040);  // 2^25 + 2^23: not the next power of two
}

TEST_CASE("allocator: a freed block is reused, the most recent first") {
  ha::empty_cache();
  void* a = ha::allocate(3000, "test");
  void* b = ha::allocate(3000, "test");
  ha::deallocate(a, 3000);
  ha::deallocate(b, 3000);
  void* c = ha::allocate(2900, "test");  // same size class
  CHECK(c == b);
  ha::deallocate(c, 2900);
  ha::empty_cache();
  CHECK(ha::stats().cached == 0);
}

TEST_CASE("allocator: large blocks idle for kDemandCycles cycles and four times their size of allocation go back") {
  const size_t big = size_t(8) << 20, small = 4096;
  const int64_t big_block = block_size(big);
  ha::empty_cache();
  void* p = ha::allocate(big, "test");
  void* q = ha::allocate(small, "test");
  ha::deallocate(p, big);
  ha::deallocate(q, small);
  int64_t cached = ha::stats().cached;
  CHECK(cached >= int64_t(big + small));
  ha::trim_idle();  // freed in this cycle: kept one more
  CHECK(ha::stats().cached == cached);
  void* r = ha::allocate(big, "test");  // reused...
  CHECK(r == p);
  ha::deallocate(r, big);  // ...and freed again: a fresh cycle
  ha::trim_idle();
  CHECK(ha::stats().cached == cached);
  ha::trim_idle();  // idle through a whole cycle, but hardly anything was allocated since
  CHECK(ha::stats().cached == cached);
  for (int i = 0; i < 5; ++i) {  // 5 x 8 MB more in use meanwhile: more than 4 times its size
    void* other = ha::allocate(big + 4096 * 64, "test");
    ha::deallocate(other, big + 4096 * 64);
  }
  int64_t with_other = ha::stats().cached;
  for (int c = 2; c < ha::kDemandCycles; ++c) {   // its bin wanted it kDemandCycles - 1 cycles ago...
    ha::trim_idle();
    CHECK(ha::stats().cached == with_other);
  }
  ha::trim_idle();  // ...and no longer remembers: the first large block goes (the other was reused all
                    // along), the small stays
  CHECK(ha::stats().cached == with_other - big_block);
  ha::empty_cache();
}

TEST_CASE("allocator: a bin keeps the blocks it handed out in any of the last kDemandCycles cycles") {
  const size_t big = size_t(4) << 20;
  const int64_t big_block = block_size(big);
  ha::empty_cache();
  auto churn = [] {  // 24 MB of allocation in blocks too small to be trimmed
    for (int i = 0; i < 48; ++i) {
      void* other = ha::allocate(size_t(512) << 10, "test");
      ha::deallocate(other, size_t(512) << 10);
    }
  };
  churn();  // its one block stays cached throughout
  void* p[3];
  for (auto& b : p) b = ha::allocate(big, "test");  // three in one cycle
  for (auto& b : p) ha::deallocate(b, big);
  ha::trim_idle();
  const int64_t three = ha::stats().cached;
  CHECK(three >= 3 * big_block);
  void* q[2];
  for (auto& b : q) b = ha::allocate(big, "test");  // two in the next: the third sits idle...
  churn();
  for (auto& b : q) ha::deallocate(b, big);
  ha::trim_idle();  // ...but the cycle before wanted three
  CHECK(ha::stats().cached == three);
  for (int c = 2; c < ha::kDemandCycles; ++c) {   // and it is remembered for kDemandCycles cycles
    churn();
    ha::trim_idle();
    CHECK(ha::stats().cached == three);
  }
  churn();
  ha::trim_idle();  // the cycles remembered wanted two at most: one goes
  CHECK(ha::stats().cached == three - big_block);
  churn();
  ha::trim_idle();  // the cycle that wanted two is forgotten too: all go
  CHECK(ha::stats().cached == three - 3 * big_block);
  ha::empty_cache();
}

TEST_CASE("allocator: blocks of 2 MB and more are mapped on their own, aligned to a huge page") {
  ha::empty_cache();
  for (size_t n : {size_t(2) << 20, (size_t(5) << 20) + 3, size_t(40000000)}) {
    INFO(n);
    void* p = ha::allocate(n, "test");
    if (ha::maps_large_blocks()) CHECK(reinterpret_cast<uintptr_t>(p) % (size_t(2) << 20) == 0);
    else CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    std::memset(p, 7, n);
    CHECK(static_cast<unsigned char*>(p)[n - 1] == 7);
    ha::deallocate(p, n);
  }
  ha::empty_cache();  // unmapped again
}

TEST_CASE("object pool: tensors are made and freed across threads without loss") {
  // Tensors made on one thread and released on another, then the threads exit: the
  // pool's per-thread lists must neither lose nor double-free a block (ASan, LSan).
  std::vector<dl::Tensor> made;
  std::thread producer([&] {
    for (int i = 0; i < 2000; ++i) made.push_back(dl::ones(dl::Shape{3}, dl::DType::Float32));
  });
  producer.join();
  std::thread consumer([&] { made.clear(); });
  consumer.join();
  for (int i = 0; i < 100; ++i) {
    dl::Tensor t = dl::ones(dl::Shape{2}, dl::DType::Float32);
    CHECK(t.numel() == 2);
  }
}

TEST_CASE("storage: host data of at most 64 bytes lives in the storage object, larger in the allocator") {
  const int64_t before = ha::stats().in_use;
  {
    dl::Tensor small = dl::full(dl::Shape{16}, 2.5, dl::DType::Float32);   // 64 bytes
    dl::Tensor scalar = dl::full(dl::Shape{}, 7.0, dl::DType::Float64);
    const auto* obj = reinterpret_cast<const unsigned char*>(&small.storage());
    const auto* data = static_cast<const unsigned char*>(small.raw_data());
    CHECK(data >= obj);
    CHECK(data + 64 <= obj + sizeof(dl::Storage));
    CHECK(reinterpret_cast<uintptr_t>(data) % 16 == 0);
    CHECK(ha::stats().in_use == before);  // not the allocator's
    for (int i = 0; i < 16; ++i) CHECK(small.data<float>()[i] == 2.5f);
    CHECK(scalar.item() == 7.0);
    // A view shares the inline bytes; a write through it is seen by the base.
    dl::Tensor v = dl::narrow(small, 0, 4, 2);
    v.data<float>()[1] = -1.0f;
    CHECK(small.data<float>()[5] == -1.0f);

    dl::Tensor large = dl::zeros(dl::Shape{17}, dl::DType::Float32);     // 68 bytes
    CHECK(ha::stats().in_use == before + 128);
    const auto* lobj = reinterpret_cast<const unsigned char*>(&large.storage());
    const auto* ldata = static_cast<const unsigned char*>(large.raw_data());
    CHECK((ldata < lobj || ldata >= lobj + sizeof(dl::Storage)));
  }
  CHECK(ha::stats().in_use == before);
}

TEST_CASE("object pool: a collection's worth of freed tensors is kept for reuse") {
  if (!dl::detail::kPoolObjects) return;  // off under AddressSanitizer
  using ImplPool = dl::detail::ObjectPool<sizeof(dl::TensorImpl)>;
  // 8 MB of blocks per size: far more than the 4,096 a sweep of dead handles overflowed.
  CHECK(ImplPool::capacity() == (size_t(8) << 20) / sizeof(dl::TensorImpl));
  CHECK(ImplPool::capacity() > 20000);
  std::vector<dl::Tensor> batch;
  for (int i = 0; i < 20000; ++i) batch.push_back(dl::empty(dl::Shape{4}, dl::DType::Float32));
  const uint32_t before = ImplPool::cached();
  batch.clear();  // freed at once, as a sweep frees them
  CHECK(ImplPool::cached() == std::min<uint32_t>(before + 20000, ImplPool::capacity()));
  for (int i = 0; i < 20000; ++i) batch.push_back(dl::empty(dl::Shape{4}, dl::DType::Float32));
  CHECK(ImplPool::cached() == before);  // all taken from the list again
}

TEST_CASE("device bytes count for the collector by the device's weight", "[allocator]") {
  // Note [Device bytes and the collector]: a device byte counts 16 MB / max(256 MB,
  // memory / 32) of a host byte; with no device known, one.
  using namespace dl;
  const double mb = 1 << 20;
  device_memory::set_device_memory(int64_t(141) * (1 << 30));   // an H200: 4.4 GB of garbage
  CHECK(device_memory::weight() == Approx(16 * mb / (141.0 * 1024 * mb / 32)));
  host_allocator::take_allocated_since_reset();
  device_memory::note_alloc(int64_t(64 * mb));
  CHECK(host_allocator::take_allocated_since_reset() == int64_t(64 * mb * device_memory::weight() + 0.5));
  device_memory::note_free(int64_t(64 * mb));
  device_memory::set_device_memory(int64_t(2) << 30);          // a small device: 256 MB at least
  CHECK(device_memory::weight() == Approx(16.0 / 256));
  device_memory::set_device_memory(0);
  CHECK(device_memory::weight() == 1.0);
  device_memory::note_alloc(1000);
  CHECK(host_allocator::take_allocated_since_reset() == 1000);
  device_memory::note_free(1000);
}

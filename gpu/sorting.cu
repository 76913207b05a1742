// Sorting and selection on CUDA (contracts in tensor/kernels.def), in the order of
// tensor/sort_functors.h as the CPU's:
//   sort: CUB's stable segmented sort, a segment per row, of integer keys that order as
//     fn::less_nan_last orders the values (KeyOf below), so that equal values keep their
//     order and NaNs go last, as std::stable_sort leaves them on the CPU. (Float keys
//     with NaNs broke CUB's merge sort of short segments on a device: its output was
//     not a permutation.)
//   nonzero: each thread counts the non-zeros of its own chunk, an exclusive scan gives
//     every chunk its first output row, and each thread writes its chunk's positions in
//     order: the CPU's row-major order, with no atomics.
//   searchsorted: a thread per value, fn::insertion_point.
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <type_traits>

#include "gpu/loops.cuh"
#include "tensor/sort_functors.h"

namespace dl::gpu {

namespace {

// The key a row is sorted by: integers as they are; a float as the unsigned integer whose
// order is the float's order of fn::less_nan_last (-0.0 taken as +0.0, every NaN as one
// pattern above +inf). Integer keys keep CUB's comparison-based path for short
// segments well-defined, which a NaN among float keys would not be.
template <typename T>
struct KeyOf {
  using type = T;
};
template <>
struct KeyOf<float> {
  using type = uint32_t;
};
template <>
struct KeyOf<double> {
  using type = uint64_t;
};

template <typename T, typename K>
__global__ void canonical_keys(K* out, const T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T v = x[i];
    if constexpr (std::is_floating_point_v<T>) {
      if (v != v) v = T(NAN);
      else if (v == T(0)) v = T(0);
      K bits;
      memcpy(&bits, &v, sizeof bits);
      const K sign = K(1) << (sizeof(K) * 8 - 1);
      out[i] = (bits & sign) ? K(~bits) : K(bits | sign);
    } else {
      out[i] = v;
    }
  }
}

__global__ void row_iota(int64_t* idx, int64_t* offsets, int64_t rows, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * n; i += int64_t(gridDim.x) * blockDim.x) {
    idx[i] = i % n;
    if (i % n == 0) offsets[i / n] = i;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) offsets[rows] = rows * n;
}

template <typename T>
void sort_typed(const Tensor& indices, const Tensor& x, bool descending) {
  const DeviceContext& c = activate(x, "sort");
  using K = typename KeyOf<T>::type;
  const int64_t R = x.size(0), n = x.size(1), total = R * n;
  Scratch keys(sizeof(K) * size_t(total), c.index, "sort"), keys_out(sizeof(K) * size_t(total), c.index, "sort");
  Scratch iota(sizeof(int64_t) * size_t(total), c.index, "sort"), offsets(sizeof(int64_t) * size_t(R + 1), c.index, "sort");
  canonical_keys<T, K><<<grid_for(total, c), kThreads, 0, c.stream>>>(keys.as<K>(), x.data<T>(), total);
  check_launch("sort");
  row_iota<<<grid_for(total, c), kThreads, 0, c.stream>>>(iota.as<int64_t>(), offsets.as<int64_t>(), R, n);
  check_launch("sort");
  const int64_t* off = offsets.as<int64_t>();
  auto run = [&](void* temp, size_t& bytes) {
    return descending
               ? cub::DeviceSegmentedSort::StableSortPairsDescending(temp, bytes, keys.as<K>(), keys_out.as<K>(),
                                                                     iota.as<int64_t>(), indices.data<int64_t>(),
                                                                     total, R, off, off + 1, c.stream)
               : cub::DeviceSegmentedSort::StableSortPairs(temp, bytes, keys.as<K>(), keys_out.as<K>(),
                                                           iota.as<int64_t>(), indices.data<int64_t>(), total, R, off,
                                                           off + 1, c.stream);
  };
  size_t bytes = 0;
  check_cuda(run(nullptr, bytes), "sort", "sizing the segmented sort");
  Scratch temp(bytes ? bytes : 1, c.index, "sort");
  check_cuda(run(temp.as<void>(), bytes), "sort", "running the segmented sort");
}

// Chunks of `chunk` elements, one per thread.
template <typename T>
__global__ void count_chunks(int64_t* counts, const T* x, int64_t n, int64_t chunk, int64_t chunks) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= chunks) return;
  int64_t k = 0;
  for (int64_t i = t * chunk, e = min(n, (t + 1) * chunk); i < e; ++i) k += x[i] != T(0);
  counts[t] = k;
}

struct Dims {
  int64_t size[kMaxDims];
  int nd;
};

template <typename T>
__global__ void write_chunks(int64_t* out, const int64_t* first, const T* x, int64_t n, int64_t chunk, int64_t chunks,
                             Dims d) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= chunks) return;
  int64_t row = first[t];
  for (int64_t i = t * chunk, e = min(n, (t + 1) * chunk); i < e; ++i) {
    if (x[i] == T(0)) continue;
    int64_t rest = i;
    for (int k = d.nd - 1; k >= 0; --k) {
      out[row * d.nd + k] = rest % d.size[k];
      rest /= d.size[k];
    }
    ++row;
  }
}

template <typename T>
void nonzero_typed(const Tensor& out, const Tensor& x) {
  const DeviceContext& c = activate(x, "nonzero");
  const int64_t n = x.numel();
  const int64_t chunks = std::min<int64_t>(n, int64_t(c.sm_count) * 1024);
  const int64_t chunk = (n + chunks - 1) / chunks;
  Scratch counts(sizeof(int64_t) * size_t(chunks), c.index, "nonzero"),
      first(sizeof(int64_t) * size_t(chunks), c.index, "nonzero");
  const unsigned blocks = unsigned((chunks + kThreads - 1) / kThreads);
  count_chunks<T><<<blocks, kThreads, 0, c.stream>>>(counts.as<int64_t>(), x.data<T>(), n, chunk, chunks);
  check_launch("nonzero");
  size_t bytes = 0;
  check_cuda(cub::DeviceScan::ExclusiveSum(nullptr, bytes, counts.as<int64_t>(), first.as<int64_t>(), chunks, c.stream),
             "nonzero", "sizing the scan");
  Scratch temp(bytes ? bytes : 1, c.index, "nonzero");
  check_cuda(cub::DeviceScan::ExclusiveSum(temp.as<void>(), bytes, counts.as<int64_t>(), first.as<int64_t>(), chunks,
                                           c.stream),
             "nonzero", "running the scan");
  Dims d{};
  d.nd = x.dim();
  for (int k = 0; k < d.nd; ++k) d.size[k] = x.size(k);
  write_chunks<T><<<blocks, kThreads, 0, c.stream>>>(out.data<int64_t>(), first.as<int64_t>(), x.data<T>(), n, chunk,
                                                     chunks, d);
  check_launch("nonzero");
}

template <typename T>
__global__ void search_values(int64_t* out, const T* seq, const T* values, int64_t R, int64_t n, int64_t m,
                              bool right) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < R * m; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = fn::insertion_point(seq + (i / m) * n, n, values[i], right);
}

}  // namespace

void sort(const Tensor& indices, const Tensor& x, bool descending) {
  DL_DISPATCH_NUMERIC(x.dtype(), "sort", (sort_typed<scalar_t>(indices, x, descending)));
}

void nonzero(const Tensor& out, const Tensor& x) {
  DL_DISPATCH_ALL(x.dtype(), "nonzero", (nonzero_typed<scalar_t>(out, x)));
}

void searchsorted(const Tensor& out, const Tensor& seq, const Tensor& values, bool right) {
  const DeviceContext& c = activate(values, "searchsorted");
  const int64_t R = seq.size(0), n = seq.size(1), m = values.size(1);
  DL_DISPATCH_NUMERIC(seq.dtype(), "searchsorted",
                      (search_values<scalar_t><<<grid_for(R * m, c), kThreads, 0, c.stream>>>(
                          out.data<int64_t>(), seq.data<scalar_t>(), values.data<scalar_t>(), R, n, m, right)));
  check_launch("searchsorted");
}

}  // namespace dl::gpu

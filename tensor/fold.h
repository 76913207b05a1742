// A full reduction of a contiguous float buffer that is produced a piece at a time,
// with the bits that reduce() gives for the whole buffer at once.
//
//   fold::State st;                        // a chunk: fold::kChunk elements (less at the end)
//   fold::start(Op::Sum, dt, st);
//   fold::add(Op::Sum, dt, st, piece, 2048, len);   // in order; pieces of multiples of
//   ...                                             // fold::kPiece, but for the chunk's last
//   parts[c] = fold::close(Op::Sum, dt, st, len);
//   fold::finish(Op::Sum, dt, parts, nchunks, numel, out);   // out: one element
//
// dl.compile folds a group's trailing reduction while the group's blocks are in cache
// (compile/plan.cpp) instead of reading its operand back from memory. The order of the
// additions is Note [Reduction order and determinism]'s (tensor/cpu/reduce.cpp, where
// this is implemented beside the kernel): the buffer cut into chunks of kChunk, each
// folded into kPiece lanes (element i into lane i % kPiece; a chunk shorter than
// kPiece in order), the lanes merged pairwise, the chunks merged left to right. So
// chunks may be folded on any thread, and the result is reduce()'s bit for bit.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/ops.h"

namespace dl::fold {

constexpr int64_t kChunk = 16384;
constexpr int64_t kPiece = 32;

// A chunk's lanes, and a chunk's folded value (either reducer's accumulator type).
struct State {
  alignas(8) unsigned char lanes[kPiece * 8];
};
struct Part {
  alignas(8) unsigned char bytes[8];
};

// Sum, Mean, Amax and Amin of float32 and float64.
bool served(Op op, DType dt);
void start(Op op, DType dt, State& st);
void add(Op op, DType dt, State& st, const void* p, int64_t n, int64_t len);
Part close(Op op, DType dt, State& st, int64_t len);
// parts merged in order, finished for numel elements, written to out (the reduction's
// result dtype: dt).
void finish(Op op, DType dt, const Part* parts, int64_t nparts, int64_t numel, void* out);

}  // namespace dl::fold

// The deferred ops of dl.compile, as the family entry points of capi.cpp call them
// (capi_compile.cpp, Note [Proxies]).
//
//   if (compile::current()) {
//     int st = defer_unary(op, x, out);   // 2 or 3: a proxy in *out; -1: error
//     if (st != -2) return st;            // -2: not deferred, run the eager op
//   }
#pragma once
#include <cstdint>

#include "bindings/capi.h"

namespace dl::bind {

int defer_unary(int op, const dl_tensor* x, dl_tensor* out);
int defer_binary(int op, const dl_tensor* a, const dl_tensor* b, dl_tensor* out);
int defer_binary_scalar(int op, const dl_tensor* a, double s, int first, dl_tensor* out);
int defer_compare(int op, const dl_tensor* a, const dl_tensor* b, dl_tensor* out);
int defer_compare_scalar(int op, const dl_tensor* a, double s, int first, dl_tensor* out);
int defer_matmul(const dl_tensor* a, const dl_tensor* b, dl_tensor* out);
int defer_reduce(int op, const dl_tensor* x, const int32_t* dims, int ndims, int keepdim,
                 dl_tensor* out);
// Fills *out with a proxy's metadata, known without running anything; false for
// anything that is not a proxy of the thread's call.
bool proxy_meta(const dl_tensor* x, dl_meta* out);

}  // namespace dl::bind

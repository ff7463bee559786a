// Copies and sets of `tessera run-cuda`'s CUDA runtime (runtime.cpp): memmove and memset
// of host memory, with each device side checked against the live allocations, and a
// misuse reported at the program's line that made the call.
#include <cstring>
#include <string>

#include "runtime.h"

namespace {

bool on_device(const void* p) {
  const char* base;
  size_t size;
  return tessera_allocation(p, &base, &size);
}

// the bytes rows of a 2-D copy span: whole pitches but the last row's width
size_t extent(size_t pitch, size_t width, size_t height) {
  return height ? pitch * (height - 1) + width : 0;
}

// how a misuse found when recorded work runs (in a graph) names the call that recorded it
std::string deferred(const char* call) {
  return std::string(call) + " (recorded here; checked again when its graph ran)";
}

}  // namespace

void tessera_check_device(void* ret, const char* call, const char* side, const void* p,
                          size_t n) {
  const char* base;
  size_t size;
  if (!tessera_allocation(p, &base, &size)) {
    tessera_report(ret, "%s: the %s %p is not device memory (cudaMalloc returns it)", call,
                   side, p);
  } else if (static_cast<const char*>(p) + n > base + size) {
    size_t past = static_cast<size_t>(static_cast<const char*>(p) + n - (base + size));
    tessera_report(ret, "%s of %zu bytes: the %s %p runs %zu bytes past the end of its "
                   "allocation (%zu bytes at %p)", call, n, side, p, past, size,
                   static_cast<const void*>(base));
  }
}

// cudaMemcpyDefault: each side is device memory where it lies in an allocation
void tessera_check_copy(void* ret, const char* call, void* d, size_t nd, const void* s,
                        size_t ns, cudaMemcpyKind k) {
  bool to = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice ||
            (k == cudaMemcpyDefault && on_device(d));
  bool from = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice ||
              (k == cudaMemcpyDefault && on_device(s));
  if (to) tessera_check_device(ret, call, "destination", d, nd);
  if (from) tessera_check_device(ret, call, "source", s, ns);
}

namespace {

cudaError_t copy_2d(void* ret, const char* call, void* d, size_t dpitch, const void* s,
                    size_t spitch, size_t width, size_t height, cudaMemcpyKind k) {
  if (width > dpitch || width > spitch) return tessera_fail(cudaErrorInvalidPitchValue);
  tessera_check_copy(ret, call, d, extent(dpitch, width, height), s,
                     extent(spitch, width, height), k);
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(d) + r * dpitch, static_cast<const char*>(s) + r * spitch,
                 width);
  return cudaSuccess;
}

}  // namespace

TesseraWork tessera_copy_work(void* ret, const char* call, void* d, const void* s, size_t n,
                              cudaMemcpyKind k) {
  tessera_check_copy(ret, call, d, n, s, n, k);
  return [=, later = deferred(call)] {
    tessera_check_copy(ret, later.c_str(), d, n, s, n, k);  // an allocation may be gone
    std::memmove(d, s, n);
    return cudaSuccess;
  };
}

TesseraWork tessera_memset_work(void* ret, const char* call, cudaMemsetParams p) {
  size_t unit = p.elementSize, width = p.width * unit;
  if ((unit != 1 && unit != 2 && unit != 4) || (p.height > 1 && p.pitch < width))
    tessera_report(ret, "%s: elements of 1, 2 or 4 bytes, rows no wider than the pitch", call);
  size_t span = extent(p.height > 1 ? p.pitch : width, width, p.height);
  tessera_check_device(ret, call, "destination", p.dst, span);
  return [=, later = deferred(call)] {
    tessera_check_device(ret, later.c_str(), "destination", p.dst, span);
    for (size_t r = 0; r < p.height; ++r) {
      char* row = static_cast<char*>(p.dst) + r * p.pitch;
      for (size_t x = 0; x < p.width; ++x) std::memcpy(row + x * unit, &p.value, unit);
    }
    return cudaSuccess;
  };
}

extern "C" {

cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  tessera_check_copy(__builtin_return_address(0), "cudaMemcpy", d, n, s, n, k);
  std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k,
                            cudaStream_t stream) {
  return tessera_issue(stream, tessera_copy_work(__builtin_return_address(0), "cudaMemcpyAsync",
                                                 d, s, n, k));
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  tessera_check_device(__builtin_return_address(0), "cudaMemset", "destination", p, n);
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t stream) {
  cudaMemsetParams params = {p, 0, static_cast<unsigned>(v), 1, n, 1};
  return tessera_issue(stream, tessera_memset_work(__builtin_return_address(0),
                                                   "cudaMemsetAsync", params));
}
// where managed memory lives and what it is used for changes nothing here
cudaError_t cudaMemPrefetchAsync(const void* p, size_t n, cudaMemLocation, unsigned,
                                 cudaStream_t) {
  tessera_check_device(__builtin_return_address(0), "cudaMemPrefetchAsync", "range", p, n);
  return cudaSuccess;
}
cudaError_t cudaMemAdvise(const void* p, size_t n, cudaMemoryAdvise, cudaMemLocation) {
  tessera_check_device(__builtin_return_address(0), "cudaMemAdvise", "range", p, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyToSymbol(const void* sym, const void* src, size_t n, size_t off,
                               cudaMemcpyKind) {
  char* storage;
  size_t size;
  if (!tessera_symbol_storage(sym, &storage, &size) || off + n > size)
    return tessera_fail(cudaErrorInvalidSymbol);
  std::memcpy(storage + off, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* sym, size_t n, size_t off,
                                 cudaMemcpyKind) {
  char* storage;
  size_t size;
  if (!tessera_symbol_storage(sym, &storage, &size) || off + n > size)
    return tessera_fail(cudaErrorInvalidSymbol);
  std::memcpy(dst, storage + off, n);
  return cudaSuccess;
}
// a variable's address for kernels: its device storage (a __managed__ one's memory is
// placed in every launch from then on)
cudaError_t cudaGetSymbolAddress(void** p, const void* sym) {
  char* storage;
  size_t size;
  if (!tessera_symbol_storage(sym, &storage, &size) || !tessera_register_storage(storage, size))
    return tessera_fail(cudaErrorInvalidSymbol);
  *p = storage;
  return cudaSuccess;
}
cudaError_t cudaGetSymbolSize(size_t* n, const void* sym) {
  char* storage;
  return tessera_symbol_storage(sym, &storage, n) ? cudaSuccess
                                                  : tessera_fail(cudaErrorInvalidSymbol);
}
// not recorded into graphs: refused in a capture (a GPU would record them)
cudaError_t cudaMemcpyToSymbolAsync(const void* sym, const void* src, size_t n, size_t off,
                                    cudaMemcpyKind k, cudaStream_t s) {
  if (tessera_capturing(s)) return tessera_fail(cudaErrorStreamCaptureUnsupported);
  return cudaMemcpyToSymbol(sym, src, n, off, k);
}
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* sym, size_t n, size_t off,
                                      cudaMemcpyKind k, cudaStream_t s) {
  if (tessera_capturing(s)) return tessera_fail(cudaErrorStreamCaptureUnsupported);
  return cudaMemcpyFromSymbol(dst, sym, n, off, k);
}
cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t width, size_t height) {
  *pitch = (width + 511) / 512 * 512;  // rows aligned as a GPU's texture pitch is
  return tessera_malloc(__builtin_return_address(0), p, *pitch * height);
}
cudaError_t cudaMemcpy2D(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h,
                         cudaMemcpyKind k) {
  return copy_2d(__builtin_return_address(0), "cudaMemcpy2D", d, dp, s, sp, w, h, k);
}
cudaError_t cudaMemcpy2DAsync(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t h,
                              cudaMemcpyKind k, cudaStream_t stream) {
  if (tessera_capturing(stream)) return tessera_fail(cudaErrorStreamCaptureUnsupported);
  return copy_2d(__builtin_return_address(0), "cudaMemcpy2DAsync", d, dp, s, sp, w, h, k);
}
cudaError_t cudaMemset2D(void* p, size_t pitch, int v, size_t width, size_t height) {
  tessera_check_device(__builtin_return_address(0), "cudaMemset2D", "destination", p,
               extent(pitch, width, height));
  for (size_t r = 0; r < height; ++r) std::memset(static_cast<char*>(p) + r * pitch, v, width);
  return cudaSuccess;
}

}  // extern "C"

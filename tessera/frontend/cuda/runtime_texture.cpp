// CUDA arrays, texture and surface objects of `tessera run-cuda`'s CUDA runtime.
//
// A CUDA array is device memory laid out row by row (a GPU's layout is opaque, so any
// layout serves: only copies and textures reach it). A texture object is a handle that
// tessera gives to the texture it makes of the resource and the sampling modes
// (tessera/arch/texture.py); kernels fetch through the handle.
#include <cstring>

#include "runtime.h"

struct cudaArray {
  cudaChannelFormatDesc desc;
  size_t width, height, depth;  // 0 for an axis the array lacks, as CUDA's extents say
  char* data;
  size_t element() const { return (desc.x + desc.y + desc.z + desc.w) / 8; }
  size_t pitch() const { return width * element(); }
  size_t rows() const { return height ? height : 1; }
  size_t bytes() const { return pitch() * rows() * (depth ? depth : 1); }
};

namespace {

// makes the texture of `data` (rows `pitch` bytes apart, slices `slice` apart) and gives
// its handle, or 0 after saying on stderr why a GPU would refuse it
using TextureHook = unsigned long long (*)(
    const void* data, size_t pitch, size_t slice, size_t width, size_t height, size_t depth,
    int dims, const int* bits, int kind, const int* address, int filter, int read,
    int normalized, const float* border);
TextureHook g_texture = nullptr;
// makes the surface of an array's rows (`row` bytes each, `pitch` apart, slices `slice`
// apart) and gives its handle
using SurfaceHook = unsigned long long (*)(const void* data, size_t pitch, size_t slice,
                                           size_t row, size_t height, size_t depth, int dims);
SurfaceHook g_surface = nullptr;

cudaError_t new_array(void* ret, cudaArray_t* a, const cudaChannelFormatDesc* desc, size_t w,
                      size_t h, size_t d) {
  if (!a || !desc || w == 0) return tessera_fail(cudaErrorInvalidValue);
  *a = new cudaArray{*desc, w, h, d, nullptr};
  void* data = nullptr;
  cudaError_t e = tessera_malloc(ret, &data, (*a)->bytes());
  (*a)->data = static_cast<char*>(data);
  return e;
}

// the rows [y, y + rows) of width bytes at x bytes in `a`: inside it, or a report
void check_array(void* ret, const char* call, cudaArray_const_t a, size_t x, size_t y,
                 size_t width, size_t rows) {
  if (!a) tessera_report(ret, "%s: no CUDA array (cudaMallocArray makes one)", call);
  if (x + width > a->pitch() || y + rows > a->rows() * (a->depth ? a->depth : 1))
    tessera_report(ret, "%s: %zu rows of %zu bytes at byte %zu of row %zu pass the edge of "
                   "the array (%zu rows of %zu bytes)", call, rows, width, x, y, a->rows(),
                   a->pitch());
}

}  // namespace

extern "C" {

void tessera_set_texture_hook(TextureHook texture, SurfaceHook surface) {
  g_texture = texture; g_surface = surface;
}

cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                            cudaChannelFormatKind f) {
  return cudaChannelFormatDesc{x, y, z, w, f};
}
cudaError_t cudaMallocArray(cudaArray_t* a, const cudaChannelFormatDesc* desc, size_t w,
                            size_t h, unsigned) {
  return new_array(__builtin_return_address(0), a, desc, w, h, 0);
}
cudaError_t cudaMalloc3DArray(cudaArray_t* a, const cudaChannelFormatDesc* desc, cudaExtent e,
                              unsigned) {
  return new_array(__builtin_return_address(0), a, desc, e.width, e.height, e.depth);
}
cudaError_t cudaFreeArray(cudaArray_t a) {
  if (!a) return cudaSuccess;
  cudaError_t e = cudaFree(a->data);
  delete a;
  return e;
}
cudaError_t cudaArrayGetInfo(cudaChannelFormatDesc* desc, cudaExtent* extent, unsigned* flags,
                             cudaArray_t a) {
  if (desc) *desc = a->desc;
  if (extent) *extent = make_cudaExtent(a->width, a->height, a->depth);
  if (flags) *flags = 0;
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t x, size_t y, const void* src,
                                size_t spitch, size_t width, size_t height, cudaMemcpyKind) {
  check_array(__builtin_return_address(0), "cudaMemcpy2DToArray", dst, x, y, width, height);
  for (size_t r = 0; r < height; ++r)
    std::memmove(dst->data + (y + r) * dst->pitch() + x, static_cast<const char*>(src) + r * spitch,
                 width);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DFromArray(void* dst, size_t dpitch, cudaArray_const_t src, size_t x,
                                  size_t y, size_t width, size_t height, cudaMemcpyKind) {
  check_array(__builtin_return_address(0), "cudaMemcpy2DFromArray", src, x, y, width, height);
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, src->data + (y + r) * src->pitch() + x,
                 width);
  return cudaSuccess;
}
// a 3-D copy between arrays and pitched memory in any pairing: positions and the width
// in elements where an array takes part, in bytes otherwise (cudaMemcpy3DParms)
cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) {
  void* ret = __builtin_return_address(0);
  const cudaArray* any = p->srcArray ? p->srcArray : p->dstArray;
  size_t unit = any ? any->element() : 1;
  size_t width = p->extent.width * unit, h = p->extent.height, d = p->extent.depth;
  struct Side { char* base; size_t pitch, slice; };
  auto side = [&](cudaArray* a, const cudaPitchedPtr& ptr, const cudaPos& at, bool dst) {
    const char* what = dst ? "cudaMemcpy3D's destination" : "cudaMemcpy3D's source";
    if (a) {
      size_t slices = a->depth ? a->depth : 1;
      if (at.y + h > a->rows() || at.z + d > slices)
        tessera_report(ret, "%s: rows %zu to %zu of slices %zu to %zu pass the array's %zu "
                       "rows and %zu slices", what, at.y, at.y + h, at.z, at.z + d, a->rows(),
                       slices);
      check_array(ret, what, a, at.x * unit, at.y, width, h);
      return Side{a->data + (at.z * a->rows() + at.y) * a->pitch() + at.x * unit, a->pitch(),
                  a->pitch() * a->rows()};
    }
    Side s{static_cast<char*>(ptr.ptr) + (at.z * ptr.ysize + at.y) * ptr.pitch + at.x * unit,
           ptr.pitch, ptr.pitch * ptr.ysize};
    if (d && h && tessera_memory_kind(ptr.ptr) >= 0)  // device memory: the span it covers
      tessera_check_device(ret, what, dst ? "destination" : "source", s.base,
                           (d - 1) * s.slice + (h - 1) * s.pitch + width);
    return s;
  };
  Side src = side(p->srcArray, p->srcPtr, p->srcPos, false);
  Side dst = side(p->dstArray, p->dstPtr, p->dstPos, true);
  for (size_t z = 0; z < d; ++z)
    for (size_t y = 0; y < h; ++y)
      std::memmove(dst.base + z * dst.slice + y * dst.pitch,
                   src.base + z * src.slice + y * src.pitch, width);
  return cudaSuccess;
}

cudaError_t cudaCreateTextureObject(cudaTextureObject_t* t, const cudaResourceDesc* r,
                                    const cudaTextureDesc* td, const cudaResourceViewDesc*) {
  if (!t || !r || !td || !g_texture) return tessera_fail(cudaErrorInvalidValue);
  const void* data = nullptr;
  cudaChannelFormatDesc desc{};
  size_t pitch = 0, slice = 0, w = 0, h = 1, d = 1;
  int dims = 1, address[3] = {td->addressMode[0], td->addressMode[1], td->addressMode[2]};
  if (r->resType == cudaResourceTypeArray && r->res.array.array) {
    cudaArray_t a = r->res.array.array;
    data = a->data; desc = a->desc; w = a->width; h = a->rows(); d = a->depth ? a->depth : 1;
    pitch = a->pitch(); slice = pitch * a->rows();
    dims = a->depth ? 3 : a->height ? 2 : 1;
  } else if (r->resType == cudaResourceTypeLinear) {
    data = r->res.linear.devPtr; desc = r->res.linear.desc;
    size_t element = (desc.x + desc.y + desc.z + desc.w) / 8;
    w = element ? r->res.linear.sizeInBytes / element : 0;
    pitch = slice = r->res.linear.sizeInBytes;
    address[0] = cudaAddressModeBorder;  // tex1Dfetch reads zeros outside linear memory
  } else if (r->resType == cudaResourceTypePitch2D) {
    data = r->res.pitch2D.devPtr; desc = r->res.pitch2D.desc;
    w = r->res.pitch2D.width; h = r->res.pitch2D.height;
    pitch = r->res.pitch2D.pitchInBytes; slice = pitch * h; dims = 2;
  } else {
    return tessera_fail(cudaErrorInvalidValue);  // mipmapped arrays are not modelled
  }
  int bits[4] = {desc.x, desc.y, desc.z, desc.w};
  *t = g_texture(data, pitch, slice, w, h, d, dims, bits, desc.f, address, td->filterMode,
                 td->readMode, td->normalizedCoords, td->borderColor);
  return *t ? cudaSuccess : tessera_fail(cudaErrorInvalidValue);
}
cudaError_t cudaDestroyTextureObject(cudaTextureObject_t) { return cudaSuccess; }
// a surface reads and writes a CUDA array's bytes (x a byte offset in a row)
cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* s, const cudaResourceDesc* r) {
  if (!s || !r || !g_surface || r->resType != cudaResourceTypeArray || !r->res.array.array)
    return tessera_fail(cudaErrorInvalidValue);
  cudaArray_t a = r->res.array.array;
  *s = g_surface(a->data, a->pitch(), a->pitch() * a->rows(), a->pitch(), a->rows(),
                 a->depth ? a->depth : 1, a->depth ? 3 : a->height ? 2 : 1);
  return *s ? cudaSuccess : tessera_fail(cudaErrorInvalidValue);
}
cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t) { return cudaSuccess; }

}  // extern "C"

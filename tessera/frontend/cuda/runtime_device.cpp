// The device and the errors of `tessera run-cuda`'s CUDA runtime (runtime.cpp): the
// target the PTX was compiled for (TESSERA_SM) with 4 SMs.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime.h"

namespace {

cudaError_t g_last = cudaSuccess;
// places host memory the program registers (add 1) in every launch, or removes it (0)
using RegisterHook = int (*)(void* p, size_t bytes, int add);
RegisterHook g_register = nullptr;
size_t g_heap_limit = size_t(8) << 20;  // cudaLimitMallocHeapSize

}  // namespace

cudaError_t tessera_fail(cudaError_t e) {
  if (e != cudaSuccess) g_last = e;
  return e;
}

extern "C" {

// --- the device --------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : tessera_fail(cudaErrorInvalidDevice);
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaSetDeviceFlags(unsigned) { return cudaSuccess; }
// the device heap's size (8 MiB by default): tessera makes the heap at the first launch
// after the program last set it (runtime.cpp's caller reads it through tessera_heap_limit)
cudaError_t cudaDeviceSetLimit(cudaLimit l, size_t v) {
  if (l == cudaLimitMallocHeapSize) g_heap_limit = v;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetLimit(size_t* v, cudaLimit l) {
  *v = l == cudaLimitStackSize ? 1024 : l == cudaLimitPrintfFifoSize ? (1 << 20)
     : l == cudaLimitMallocHeapSize ? g_heap_limit : 0;
  return cudaSuccess;
}
size_t tessera_heap_limit() { return g_heap_limit; }
cudaError_t cudaDeviceReset() { return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  const bool hopper = TESSERA_SM >= 90;
  switch (a) {
    case cudaDevAttrComputeCapabilityMajor: *v = TESSERA_SM / 10; break;
    case cudaDevAttrComputeCapabilityMinor: *v = TESSERA_SM % 10; break;
    case cudaDevAttrMultiProcessorCount: *v = 4; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = kTesseraThreadsPerSm; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *v = 64; break;
    case cudaDevAttrMaxGridDimX: *v = 0x7FFFFFFF; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = kTesseraPortableShared; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = kTesseraSharedPerSm - 1024; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = kTesseraSharedPerSm; break;
    case cudaDevAttrMaxRegistersPerBlock: *v = 65536; break;
    case cudaDevAttrCooperativeLaunch: *v = 1; break;
    case cudaDevAttrManagedMemory: case cudaDevAttrConcurrentManagedAccess: *v = 1; break;
    case cudaDevAttrL2CacheSize: *v = (hopper ? 50 : 40) << 20; break;
    default: *v = 0;
  }
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return tessera_fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "tessera: sm_%d on the CPU", TESSERA_SM);
  p->major = TESSERA_SM / 10; p->minor = TESSERA_SM % 10;
  p->multiProcessorCount = 4; p->warpSize = 32;
  p->maxThreadsPerBlock = 1024; p->maxThreadsPerMultiProcessor = kTesseraThreadsPerSm;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7FFFFFFF; p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->sharedMemPerBlock = kTesseraPortableShared; p->regsPerBlock = 65536;
  p->sharedMemPerBlockOptin = kTesseraSharedPerSm - 1024;
  p->sharedMemPerMultiprocessor = kTesseraSharedPerSm;
  p->maxBlocksPerMultiProcessor = kTesseraBlocksPerSm;
  p->totalGlobalMem = size_t(8) << 30; p->managedMemory = 1; p->cooperativeLaunch = 1;
  return cudaSuccess;
}
// pinned host memory: mapped for kernels, as unified addressing maps it
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return tessera_malloc(__builtin_return_address(0), p, bytes, kTesseraPinned);
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  return tessera_malloc(__builtin_return_address(0), p, bytes, kTesseraPinned);
}
cudaError_t cudaFreeHost(void* p) {
  return tessera_free(__builtin_return_address(0), "cudaFreeHost", p, kTesseraPinned);
}
// host memory the program registers: kernels reach it at its own address
cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned) {
  if (!p || !bytes || tessera_memory_kind(p) >= 0 || !g_register || g_register(p, bytes, 1))
    return tessera_fail(cudaErrorInvalidValue);
  return tessera_malloc(__builtin_return_address(0), &p, bytes, kTesseraRegistered);
}
cudaError_t cudaHostUnregister(void* p) {
  cudaError_t e = tessera_free(__builtin_return_address(0), "cudaHostUnregister", p,
                               kTesseraRegistered);
  if (g_register) g_register(p, 0, 0);
  return e;
}
cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned) {
  int kind = tessera_memory_kind(h);
  if (kind != kTesseraPinned && kind != kTesseraRegistered)
    return tessera_fail(cudaErrorInvalidValue);
  *d = h;
  return cudaSuccess;
}
void tessera_set_register_hook(RegisterHook hook) { g_register = hook; }
}  // extern "C"

bool tessera_register_storage(void* p, size_t bytes) {
  if (tessera_memory_kind(p) >= 0) return true;  // placed already
  if (!g_register || g_register(p, bytes, 1)) return false;
  return tessera_malloc(nullptr, &p, bytes, kTesseraSymbol) == cudaSuccess;
}

int tessera_occupancy(int module, const char* name, int threads, size_t dynamic, int opt_in) {
  int fixed = tessera_static_shared(module, name);
  long allowed = tessera_dynamic_limit(module, name, opt_in);
  if (fixed < 0 || threads <= 0 || threads > 1024 || static_cast<long>(dynamic) > allowed)
    return 0;
  long per_cta = fixed + static_cast<long>(dynamic) + 1024;  // 1 KB a CTA for the system
  long by_memory = kTesseraSharedPerSm / per_cta;
  long by_threads = kTesseraThreadsPerSm / ((threads + 31) / 32 * 32);
  long most = kTesseraBlocksPerSm;
  return static_cast<int>(by_memory < by_threads ? (by_memory < most ? by_memory : most)
                                                 : (by_threads < most ? by_threads : most));
}

extern "C" {
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  static const cudaMemoryType kTypes[] = {cudaMemoryTypeDevice, cudaMemoryTypeHost,
                                          cudaMemoryTypeHost, cudaMemoryTypeManaged,
                                          cudaMemoryTypeManaged};
  int kind = tessera_memory_kind(p);
  a->type = kind < 0 ? cudaMemoryTypeUnregistered : kTypes[kind];
  a->device = 0;
  a->devicePointer = kind < 0 ? nullptr : const_cast<void*>(p);
  a->hostPointer = kind == kTesseraDevice || kind < 0
                       ? nullptr : const_cast<void*>(p);
  return cudaSuccess;
}
// one device: no peers, and a copy between "devices" 0 and 0 is a copy
cudaError_t cudaDeviceCanAccessPeer(int* can, int, int) { *can = 0; return cudaSuccess; }
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) {
  return tessera_fail(cudaErrorInvalidDevice);
}
cudaError_t cudaMemcpyPeer(void* d, int dd, const void* s, int sd, size_t n) {
  if (dd != 0 || sd != 0) return tessera_fail(cudaErrorInvalidDevice);
  tessera_copy_work(__builtin_return_address(0), "cudaMemcpyPeer", d, s, n,
                    cudaMemcpyDeviceToDevice)();
  return cudaSuccess;
}
cudaError_t cudaGetDeviceFlags(unsigned* flags) { *flags = 0; return cudaSuccess; }
cudaError_t cudaChooseDevice(int* d, const cudaDeviceProp*) { *d = 0; return cudaSuccess; }
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int d) {
  if (d != 0) return tessera_fail(cudaErrorInvalidDevice);
  std::snprintf(id, static_cast<size_t>(len), "0000:00:00.0");
  return cudaSuccess;
}
cudaError_t cudaProfilerStart() { return cudaSuccess; }
cudaError_t cudaProfilerStop() { return cudaSuccess; }
// the default memory pool of cudaMallocAsync: one pool, its attributes accepted
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int d) {
  static int token;
  *pool = reinterpret_cast<cudaMemPool_t>(&token);
  return d == 0 ? cudaSuccess : tessera_fail(cudaErrorInvalidDevice);
}
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int d) {
  return cudaDeviceGetDefaultMemPool(pool, d);
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) {
  return cudaSuccess;
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr, void* v) {
  *static_cast<unsigned long long*>(v) = 0;
  return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) { return cudaSuccess; }
cudaError_t cudaMallocFromPoolAsync(void** p, size_t bytes, cudaMemPool_t, cudaStream_t) {
  return tessera_malloc(__builtin_return_address(0), p, bytes);
}
cudaError_t cudaMemGetInfo(size_t* free_, size_t* total) {
  *free_ = *total = size_t(8) << 30; return cudaSuccess;
}
cudaError_t cudaFuncSetCacheConfig(const void*, cudaFuncCache) { return cudaSuccess; }

// --- errors --------------------------------------------------------------------------
cudaError_t cudaGetLastError() { cudaError_t e = g_last; g_last = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError() { return g_last; }
// the errors this runtime returns, with CUDA's names and messages
struct ErrorText { cudaError_t code; const char* name; const char* text; };
const ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue", "invalid pitch argument"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorIllegalState, "cudaErrorIllegalState",
     "the operation cannot be performed in the present state"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorInvalidClusterSize, "cudaErrorInvalidClusterSize", "invalid cluster size"},
};
const ErrorText* error_text(cudaError_t e) {
  for (const ErrorText& t : kErrors) if (t.code == e) return &t;
  return nullptr;
}
const char* cudaGetErrorName(cudaError_t e) {
  const ErrorText* t = error_text(e);
  return t ? t->name : "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  const ErrorText* t = error_text(e);
  return t ? t->text : "unknown error";
}

}  // extern "C"

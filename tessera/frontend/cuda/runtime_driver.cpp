// The CUDA driver API of `tessera run-cuda`'s runtime (runtime.cpp): what a program that
// compiles its kernels at run time (NVRTC) or loads PTX files calls. A module loaded
// from PTX text becomes one more module of tessera's, its kernels launched as the
// program's own are and its variables placed in device memory with their initial
// values; the device, context, memory, stream and event calls forward to the runtime
// API's. Cubins and fat binaries are refused: tessera runs PTX.
#include <cuda.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime.h"

struct CUctx_st {};
struct CUmod_st { int module; };
struct CUfunc_st { int module; std::string name; int opt_in = -1; };

namespace {

// loads PTX text as a module, named `name` in reports; its number, or -1 after saying
// on stderr why it is no PTX tessera reads
using LoadHook = int (*)(const char* image, size_t size, const char* name);
// the device address and size of a loaded module's variable, or 0
using GlobalHook = unsigned long long (*)(int module, const char* name, size_t* size);
// a tensor map of cuTensorMapEncodeTiled's arguments (enumerations as cuda.h numbers
// them): its handle, or 0 after saying on stderr why a GPU would refuse it
using TensorMapHook = unsigned long long (*)(int dtype, unsigned rank, void* address,
                                             const cuuint64_t* dims, const cuuint64_t* strides,
                                             const cuuint32_t* box, const cuuint32_t* steps,
                                             int interleave, int swizzle, int l2, int fill);
LoadHook g_load = nullptr;
GlobalHook g_global = nullptr;
TensorMapHook g_tensor_map = nullptr;
// the first word of a tensor map tessera encoded, the handle in the second (a GPU's
// encoding is its driver's own; kernels pass the 128 bytes on as they are)
constexpr unsigned long long kTensorMapMagic = 0x54657373546d6170ULL;  // "TessTmap"
CUctx_st g_context;  // the one device's primary context
int g_loaded = 0;

CUresult result(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return CUDA_SUCCESS;
    case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
    case cudaErrorInvalidDeviceFunction: return CUDA_ERROR_INVALID_HANDLE;
    case cudaErrorInvalidDevice: return CUDA_ERROR_INVALID_DEVICE;
    default: return CUDA_ERROR_INVALID_VALUE;  // as a launch a GPU refuses returns it
  }
}

CUresult load(CUmodule* m, const char* image, size_t size, const char* name) {
  if (!m || !image || !g_load) return CUDA_ERROR_INVALID_VALUE;
  int module = g_load(image, size, name);
  if (module < 0) return CUDA_ERROR_INVALID_IMAGE;
  *m = new CUmod_st{module};
  return CUDA_SUCCESS;
}

// a copy's work, run now or issued to `s`
CUresult copy(void* ret, const char* call, void* d, const void* s, size_t n, cudaMemcpyKind k,
              CUstream stream, bool async) {
  TesseraWork work = tessera_copy_work(ret, call, d, s, n, k);
  return result(async ? tessera_issue(stream, std::move(work)) : work());
}

CUresult set(void* ret, const char* call, CUdeviceptr d, unsigned value, size_t unit, size_t n,
             CUstream stream, bool async) {
  cudaMemsetParams p = {reinterpret_cast<void*>(d), 0, value, static_cast<unsigned>(unit), n, 1};
  TesseraWork work = tessera_memset_work(ret, call, p);
  return result(async ? tessera_issue(stream, std::move(work)) : work());
}

void* at(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

}  // namespace

extern "C" {

void tessera_set_driver_hooks(LoadHook load_, GlobalHook global, TensorMapHook tensor_map) {
  g_load = load_; g_global = global; g_tensor_map = tensor_map;
}

// --- tensor maps (TMA) ------------------------------------------------------------------
CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank,
                                void* address, const cuuint64_t* dims,
                                const cuuint64_t* strides, const cuuint32_t* box,
                                const cuuint32_t* steps, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                CUtensorMapFloatOOBfill fill) {
  if (!map || !g_tensor_map) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long handle = g_tensor_map(dtype, rank, address, dims, strides, box, steps,
                                           interleave, swizzle, l2, fill);
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  std::memset(map, 0, sizeof *map);
  unsigned long long words[2] = {kTensorMapMagic, handle};
  std::memcpy(map, words, sizeof words);
  return CUDA_SUCCESS;
}
// the driver's entry points a program asks the runtime for (cudaGetDriverEntryPoint)
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned,
                                             unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  static const struct { const char* name; void* fn; } kEntries[] = {
      {"cuTensorMapEncodeTiled", reinterpret_cast<void*>(cuTensorMapEncodeTiled)},
      {"cuGetErrorName", reinterpret_cast<void*>(cuGetErrorName)},
      {"cuGetErrorString", reinterpret_cast<void*>(cuGetErrorString)}};
  for (const auto& e : kEntries) {
    if (std::strcmp(e.name, symbol) == 0) {
      *fn = e.fn;
      if (status) *status = cudaDriverEntryPointSuccess;
      return cudaSuccess;
    }
  }
  *fn = nullptr;
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion(symbol, fn, CUDART_VERSION, flags, status);
}

// --- the device and its context ---------------------------------------------------------
CUresult cuInit(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int* v) { *v = CUDA_VERSION; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, d);
  if (e == cudaSuccess && len > 0) std::snprintf(name, static_cast<size_t>(len), "%s", p.name);
  return result(e);
}
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  return result(cudaDeviceGetAttribute(v, static_cast<cudaDeviceAttr>(a), d));  // same codes
}
CUresult cuDeviceTotalMem(size_t* bytes, CUdevice) {
  *bytes = size_t(8) << 30;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) { *c = &g_context; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxReset(CUdevice) { return CUDA_SUCCESS; }
CUresult cuCtxCreate(CUcontext* c, CUctxCreateParams*, unsigned, CUdevice d) {
  *c = &g_context;
  return d == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
CUresult cuCtxDestroy(CUcontext) { return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext* c) { *c = &g_context; return CUDA_SUCCESS; }
CUresult cuCtxPushCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult cuCtxPopCurrent(CUcontext* c) { if (c) *c = &g_context; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice* d) { *d = 0; return CUDA_SUCCESS; }
CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }

// --- modules and kernels ---------------------------------------------------------------
CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  const char* text = static_cast<const char*>(image);
  std::string name = "cuModuleLoadData image " + std::to_string(++g_loaded);
  return load(m, text, text ? std::strlen(text) : 0, name.c_str());
}
CUresult cuModuleLoadDataEx(CUmodule* m, const void* image, unsigned, CUjit_option*, void**) {
  return cuModuleLoadData(m, image);
}
CUresult cuModuleLoad(CUmodule* m, const char* path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return load(m, text.c_str(), text.size(), path);
}
CUresult cuModuleUnload(CUmodule m) { delete m; return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  size_t sizes[1], offsets[1];
  if (!m || tessera_params(m->module, name, sizes, offsets, 0) < 0) return CUDA_ERROR_NOT_FOUND;
  *f = new CUfunc_st{m->module, name, -1};
  return CUDA_SUCCESS;
}
CUresult cuModuleGetGlobal(CUdeviceptr* p, size_t* bytes, CUmodule m, const char* name) {
  size_t size = 0;
  unsigned long long address = m && g_global ? g_global(m->module, name, &size) : 0;
  if (!address) return CUDA_ERROR_NOT_FOUND;
  if (p) *p = address;
  if (bytes) *bytes = size;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, CUstream s, void** params,
                        void** extra) {
  if (!f || (!params && !extra)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<void*> args;
  if (!params) {  // CU_LAUNCH_PARAM_BUFFER_POINTER: the parameters at their offsets
    char* buffer = nullptr;
    for (size_t k = 0; extra[k] != CU_LAUNCH_PARAM_END; k += 2)
      if (extra[k] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = static_cast<char*>(extra[k + 1]);
    size_t sizes[4096], offsets[4096];
    int n = tessera_params(f->module, f->name.c_str(), sizes, offsets, 4096);
    if (!buffer || n < 0) return CUDA_ERROR_INVALID_VALUE;
    for (int k = 0; k < n; ++k) args.push_back(buffer + offsets[k]);
    params = args.data();
  }
  return result(tessera_launch(f->module, f->name.c_str(), dim3(gx, gy, gz), dim3(bx, by, bz),
                               shared, params, 0, s, f->opt_in));
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                   CUstream s, void** params) {
  if (!f || !params) return CUDA_ERROR_INVALID_VALUE;
  return result(tessera_launch(f->module, f->name.c_str(), dim3(gx, gy, gz), dim3(bx, by, bz),
                               shared, params, 1, s, f->opt_in));
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) f->opt_in = v;
  return CUDA_SUCCESS;
}
CUresult cuFuncSetCacheConfig(CUfunction, CUfunc_cache) { return CUDA_SUCCESS; }
CUresult cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction) {
  *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : a == CU_FUNC_ATTRIBUTE_NUM_REGS ? 32
       : a == CU_FUNC_ATTRIBUTE_PTX_VERSION || a == CU_FUNC_ATTRIBUTE_BINARY_VERSION ? TESSERA_SM
       : 0;
  return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction f, int threads,
                                                     size_t dynamic) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  *n = tessera_occupancy(f->module, f->name.c_str(), threads, dynamic, f->opt_in);
  return CUDA_SUCCESS;
}

// --- memory ------------------------------------------------------------------------------
CUresult cuMemAlloc(CUdeviceptr* p, size_t n) {
  return result(tessera_malloc(__builtin_return_address(0), reinterpret_cast<void**>(p), n));
}
CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned) {
  return result(tessera_malloc(__builtin_return_address(0), reinterpret_cast<void**>(p), n));
}
CUresult cuMemFree(CUdeviceptr p) {
  return result(tessera_free(__builtin_return_address(0), "cuMemFree", at(p)));
}
CUresult cuMemAllocHost(void** p, size_t n) { return result(cudaMallocHost(p, n)); }
CUresult cuMemHostAlloc(void** p, size_t n, unsigned) { return result(cudaMallocHost(p, n)); }
CUresult cuMemFreeHost(void* p) { return result(cudaFreeHost(p)); }
CUresult cuMemGetInfo(size_t* free_, size_t* total) { return result(cudaMemGetInfo(free_, total)); }
CUresult cuMemcpyHtoD(CUdeviceptr d, const void* s, size_t n) {
  return copy(__builtin_return_address(0), "cuMemcpyHtoD", at(d), s, n, cudaMemcpyHostToDevice,
              nullptr, false);
}
CUresult cuMemcpyDtoH(void* d, CUdeviceptr s, size_t n) {
  return copy(__builtin_return_address(0), "cuMemcpyDtoH", d, at(s), n, cudaMemcpyDeviceToHost,
              nullptr, false);
}
CUresult cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) {
  return copy(__builtin_return_address(0), "cuMemcpyDtoD", at(d), at(s), n,
              cudaMemcpyDeviceToDevice, nullptr, false);
}
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) {
  return copy(__builtin_return_address(0), "cuMemcpy", at(d), at(s), n, cudaMemcpyDefault,
              nullptr, false);
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, CUstream st) {
  return copy(__builtin_return_address(0), "cuMemcpyHtoDAsync", at(d), s, n,
              cudaMemcpyHostToDevice, st, true);
}
CUresult cuMemcpyDtoHAsync(void* d, CUdeviceptr s, size_t n, CUstream st) {
  return copy(__builtin_return_address(0), "cuMemcpyDtoHAsync", d, at(s), n,
              cudaMemcpyDeviceToHost, st, true);
}
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  return set(__builtin_return_address(0), "cuMemsetD8", d, v, 1, n, nullptr, false);
}
CUresult cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n) {
  return set(__builtin_return_address(0), "cuMemsetD16", d, v, 2, n, nullptr, false);
}
CUresult cuMemsetD32(CUdeviceptr d, unsigned v, size_t n) {
  return set(__builtin_return_address(0), "cuMemsetD32", d, v, 4, n, nullptr, false);
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream st) {
  return set(__builtin_return_address(0), "cuMemsetD32Async", d, v, 4, n, st, true);
}

// --- streams, events and errors ------------------------------------------------------------
CUresult cuStreamCreate(CUstream* s, unsigned) { return result(cudaStreamCreate(s)); }
CUresult cuStreamDestroy(CUstream s) { return result(cudaStreamDestroy(s)); }
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamQuery(CUstream) { return CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent* e, unsigned) { return result(cudaEventCreate(e)); }
CUresult cuEventDestroy(CUevent e) { return result(cudaEventDestroy(e)); }
CUresult cuEventRecord(CUevent e, CUstream s) { return result(cudaEventRecord(e, s)); }
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  return result(cudaEventElapsedTime(ms, a, b));
}
CUresult cuGetErrorName(CUresult e, const char** name) {
  static const struct { CUresult code; const char* name; } kNames[] = {
      {CUDA_SUCCESS, "CUDA_SUCCESS"}, {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
      {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
      {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
      {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
      {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND"},
      {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
      {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"}};
  for (const auto& n : kNames) {
    if (n.code == e) { *name = n.name; return CUDA_SUCCESS; }
  }
  *name = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult e, const char** text) { return cuGetErrorName(e, text); }

}  // extern "C"

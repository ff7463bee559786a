// The device, streams and events of `tessera run-cuda`'s CUDA runtime (runtime.cpp): the
// target the PTX was compiled for (TESSERA_SM) with 4 SMs; streams and events are
// accepted, and every call has finished when it returns.
#include <chrono>
#include <cstdio>
#include <cstring>

#include "runtime.h"

namespace {

int g_stream_token;

float now_ms() {
  using namespace std::chrono;
  return duration<float, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

extern "C" {

// --- the device --------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : tessera_fail(cudaErrorInvalidDevice);
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaSetDeviceFlags(unsigned) { return cudaSuccess; }
cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }
cudaError_t cudaDeviceGetLimit(size_t* v, cudaLimit l) {
  *v = l == cudaLimitStackSize ? 1024 : l == cudaLimitPrintfFifoSize ? (1 << 20) : 0;
  return cudaSuccess;
}
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
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *v = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *v = 64; break;
    case cudaDevAttrMaxGridDimX: *v = 0x7FFFFFFF; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *v = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 * 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (hopper ? 227 : 163) * 1024; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (hopper ? 228 : 164) * 1024; break;
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
  p->maxThreadsPerBlock = 1024; p->maxThreadsPerMultiProcessor = 2048;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7FFFFFFF; p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->sharedMemPerBlock = 48 * 1024; p->regsPerBlock = 65536;
  p->sharedMemPerBlockOptin = (TESSERA_SM >= 90 ? 227 : 163) * 1024;
  p->totalGlobalMem = size_t(8) << 30; p->managedMemory = 1; p->cooperativeLaunch = 1;
  return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void*) {
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024; a->numRegs = 32;
  a->ptxVersion = a->binaryVersion = TESSERA_SM;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) { return cudaSuccess; }
cudaError_t cudaFuncSetCacheConfig(const void*, cudaFuncCache) { return cudaSuccess; }
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int, size_t) {
  *n = 1; return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void*, int,
                                                                   size_t, unsigned) {
  *n = 1; return cudaSuccess;
}

// --- streams and events: accepted; every call has finished when it returns -----------
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = reinterpret_cast<cudaStream_t>(&g_stream_token); return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned, int) {
  return cudaStreamCreate(s);
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0; *greatest = -5; return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new float(0)); return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<float*>(e); return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  *reinterpret_cast<float*>(e) = now_ms(); return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
// the CPU's time between the two records: what the interpreter took, not a GPU's time
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = *reinterpret_cast<float*>(b) - *reinterpret_cast<float*>(a); return cudaSuccess;
}

}  // extern "C"

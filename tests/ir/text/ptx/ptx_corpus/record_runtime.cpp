// A CUDA runtime that runs no kernel: linked into a host program built with
// `nvcc -cudart none`, it prints each launch (kernel, grid, block, dynamic shared memory,
// each argument's bytes), memset and copy as a JSON line, and answers CUB's questions as
// an A100 with 4 SMs would (compute capability 8.0; few SMs keep the grids small).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

struct KernelSizes { const char* name; std::vector<int> sizes; };
#include "sizes.inc"  // kKernels: each kernel's parameter sizes, read from its PTX

// registration runs before main, so the table is made on first use
static std::map<const void*, std::string>& names() {
  static std::map<const void*, std::string> table;
  return table;
}
static dim3 g_grid, g_block;
static size_t g_shared;
static const int kSms = 4;

static void hex(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) printf("%02x", b[i]);
}

static void launch(const void* fun, dim3 g, dim3 b, size_t shared, void** args) {
  const std::string& name = names().at(fun);
  const KernelSizes* k = nullptr;
  for (const KernelSizes& s : kKernels) if (name == s.name) k = &s;
  if (!k) { fprintf(stderr, "no sizes for %s\n", name.c_str()); std::abort(); }
  printf("{\"launch\": \"%s\", \"grid\": [%u, %u, %u], \"block\": [%u, %u, %u], \"shared\": %zu, \"args\": [",
         name.c_str(), g.x, g.y, g.z, b.x, b.y, b.z, shared);
  for (size_t i = 0; i < k->sizes.size(); ++i) {
    printf(i ? ", \"" : "\"");
    hex(args[i], k->sizes[i]);
    printf("\"");
  }
  printf("]}\n");
}

extern "C" {
void note(const char* what, long a) { printf("{\"note\": \"%s\", \"value\": %ld}\n", what, a); }
void** __cudaRegisterFatBinary(void*) { static void* h; return &h; }
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterFunction(void**, const char* host, char* dev, const char*, int, uint3*, uint3*,
                            dim3*, dim3*, int*) {
  names()[host] = dev;
}
unsigned __cudaPushCallConfiguration(dim3 g, dim3 b, size_t shared, struct CUstream_st*) {
  g_grid = g; g_block = b; g_shared = shared; return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3* g, dim3* b, size_t* shared, void*) {
  *g = g_grid; *b = g_block; *shared = g_shared; return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t* k, const void* fun) {
  *k = (cudaKernel_t)fun; return cudaSuccess;
}
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 g, dim3 b, void** args, size_t shared,
                               cudaStream_t) {
  launch((const void*)k, g, b, shared, args); return cudaSuccess;
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* c, const void* fun, void** args) {
  launch(fun, c->gridDim, c->blockDim, c->dynamicSmemBytes, args); return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
// CUB asks for the SM count and the grid's x limit; what it does not ask is 0
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrMultiProcessorCount ? kSms : a == cudaDevAttrMaxGridDimX ? 0x7FFFFFFF
     : a == cudaDevAttrComputeCapabilityMajor ? 8 : 0;
  return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void*) {
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024; a->numRegs = 32; a->ptxVersion = 80; a->binaryVersion = 80;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void*, int, size_t,
                                                                   unsigned) {
  *n = 1; return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  printf("{\"memset\": \"%p\", \"value\": %d, \"bytes\": %zu}\n", p, v, n); return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) {
  printf("{\"memcpy\": \"%p\", \"from\": \"%p\", \"bytes\": %zu, \"kind\": %d}\n", d, s, n, (int)k);
  return cudaSuccess;
}
}

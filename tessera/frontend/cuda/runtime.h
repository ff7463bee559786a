// What the files of `tessera run-cuda`'s CUDA runtime share (runtime.cpp,
// runtime_device.cpp, runtime_graph.cpp, runtime_memory.cpp, runtime_texture.cpp).
#pragma once

#include <cuda_runtime.h>

#include <functional>

#ifndef TESSERA_SM
#define TESSERA_SM 80  // the target the program's PTX is compiled for, as 10 * major + minor
#endif

// an SM of the target (CUDA C++ Programming Guide, "Technical Specifications per Compute
// Capability"): its shared memory, threads and CTAs (sm_86 and sm_89 have fewer)
constexpr bool kTesseraSmallSm = TESSERA_SM == 86 || TESSERA_SM == 89;
constexpr int kTesseraSharedPerSm = (TESSERA_SM >= 90 ? 228 : kTesseraSmallSm ? 100 : 164) * 1024;
constexpr int kTesseraThreadsPerSm = kTesseraSmallSm ? 1536 : 2048;
constexpr int kTesseraBlocksPerSm = kTesseraSmallSm ? 16 : 32;

// the shared memory a CTA may take without opting in (CUDA C++ Programming Guide, "Shared
// Memory"): above it a kernel must raise cudaFuncAttributeMaxDynamicSharedMemorySize
constexpr int kTesseraPortableShared = 48 * 1024;

// the dynamic shared memory kernel `name` of `module` may take: what the program allowed
// it (`opt_in`), or by default 48 KB less its static shared memory; -1 for no such kernel
extern "C" int tessera_dynamic_limit(int module, const char* name, int opt_in);
// a kernel's static shared memory in bytes (-1: no such kernel)
int tessera_static_shared(int module, const char* name);

// CTAs of `threads` threads and `dynamic` bytes of dynamic shared memory one SM holds for
// kernel `name` of `module` (its static shared memory counted, 1 KB a CTA reserved), 0
// when the launch would fail: what the occupancy calculator answers
int tessera_occupancy(int module, const char* name, int threads, size_t dynamic, int opt_in);

// records e as the error cudaGetLastError returns next (unless it is cudaSuccess)
cudaError_t tessera_fail(cudaError_t e);
// ends the program with a report of an API misuse at the line that made the call (`ret`,
// the call's return address), formatted as printf formats
[[noreturn]] void tessera_report(void* ret, const char* fmt, ...);

// work issued to a stream: a launch, a copy, a set, a host function
using TesseraWork = std::function<cudaError_t()>;
// runs `work` now, or records it where stream `s` is being captured into a graph
cudaError_t tessera_issue(cudaStream_t s, TesseraWork work);
bool tessera_capturing(cudaStream_t s);

// launches kernel `name` of module `module` (a .cu file's fat binary, or a module the
// driver API loaded) on `stream`, or records the launch where the stream is captured;
// `opt_in`: the dynamic shared memory the program allowed it (-1: the default);
// `cluster`: the thread block cluster shape asked for (0 x 0 x 0: none)
cudaError_t tessera_launch(int module, const char* name, dim3 g, dim3 b, size_t shared,
                           void** args, int coop, cudaStream_t stream, int opt_in = -1,
                           dim3 cluster = dim3(0, 0, 0));
// the byte size and offset of each parameter of a kernel; how many (-1: no such kernel)
int tessera_params(int module, const char* name, size_t* sizes, size_t* offsets, int most);
// a launch as work that keeps its own copy of the arguments' bytes (the program's
// variables they point at are gone when a graph runs it)
cudaError_t tessera_launch_work(const void* fun, dim3 g, dim3 b, size_t shared, void** args,
                                int coop, TesseraWork* work);
// what memory kernels reach: device memory (cudaMalloc), pinned host memory
// (cudaMallocHost, mapped for kernels as with unified addressing), host memory the
// program registered (cudaHostRegister) and managed memory (cudaMallocManaged)
enum TesseraMemory {
  kTesseraDevice = 0, kTesseraPinned = 1, kTesseraRegistered = 2, kTesseraManaged = 3,
  kTesseraSymbol = 4  // a __managed__ variable's storage, whose address the program took
};
// frees the allocation of `kind` at `p`, or reports at the caller's line (`ret`) that it
// is none, or one of another kind
cudaError_t tessera_free(void* ret, const char* call, void* p, int kind = kTesseraDevice);
// places the host memory [p, p + bytes) in every launch (a __device__ variable's storage
// whose address the program takes); whether it is
bool tessera_register_storage(void* p, size_t bytes);
// the kind of the allocation holding `p`, or -1
int tessera_memory_kind(const void* p);
// device memory of `bytes` for the program's call at `ret` (cudaMalloc's and the others')
cudaError_t tessera_malloc(void* ret, void** p, size_t bytes, int kind = kTesseraDevice);
// records memory tessera placed (a loaded module's variables) as an allocation
extern "C" void tessera_add_allocation(const void* p, size_t size);
// the allocation holding `p` (its base and size), or false
bool tessera_allocation(const void* p, const char** base, size_t* size);
// the storage and size of the __device__ variable whose host shadow is `host`, or false
bool tessera_symbol_storage(const void* host, char** storage, size_t* size);
// [p, p + n) lies in one allocation, or a report naming the call and the side
void tessera_check_device(void* ret, const char* call, const char* side, const void* p,
                          size_t n);
// a copy's device sides, as its kind names them, of nd bytes at the destination and ns
// at the source, checked as tessera_check_device checks them
void tessera_check_copy(void* ret, const char* call, void* d, size_t nd, const void* s,
                        size_t ns, cudaMemcpyKind k);
// a copy or a set as work, checked against the allocations now (`ret`: the caller, whose
// line a misuse is reported at) and when it runs
TesseraWork tessera_copy_work(void* ret, const char* call, void* d, const void* s, size_t n,
                              cudaMemcpyKind k);
TesseraWork tessera_memset_work(void* ret, const char* call, cudaMemsetParams p);

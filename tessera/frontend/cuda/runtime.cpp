// The CUDA runtime of `tessera run-cuda`: linked into a CUDA program (built with
// `nvcc -cudart none`), it keeps the program's host code as it is and hands every kernel
// launch to tessera, which runs the kernel's PTX on the CPU with its checks.
//
// This file registers the program's kernels and variables, launches kernels and keeps
// the table of allocations. Device memory is host memory that tessera allocates and
// keeps at its own address, so copies and sets are memmove and memset
// (runtime_memory.cpp) and managed memory needs nothing more. A __device__ variable's
// storage is device memory apart from its host shadow, as on a GPU (a __managed__ one's
// is the memory its host pointer names). The device it describes is the target the PTX was compiled
// for, with 4 SMs (runtime_device.cpp); streams, events and graphs are in
// runtime_graph.cpp, CUDA arrays and textures in runtime_texture.cpp.
#include "runtime.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// `module`: which registered fat binary (one per .cu file, in registration order) the
// kernel or variable belongs to, since two files may each have a `static` one of a name
// `opt_in`: the dynamic shared memory the program allowed it (cudaFuncSetAttribute's
// MaxDynamicSharedMemorySize), -1 for the default (48 KB less its static shared memory)
struct Kernel { const void* host; std::string name; int module; int opt_in = -1; };
// `device`: the variable's storage kernels see (tessera allocates it once hooks are set)
struct Symbol {
  const void* host; std::string name; size_t size; int module; bool managed;
  char* device = nullptr;
};

// registration runs before main (and before tessera sets its hooks): tables made on use
std::vector<Kernel>& kernels() { static std::vector<Kernel> t; return t; }
std::vector<Symbol>& symbols() { static std::vector<Symbol> t; return t; }
// each fat binary's handle: a slot holding its module number
std::vector<void**>& handles() { static std::vector<void**> t; return t; }
int module_of(void** handle) { return static_cast<int>(reinterpret_cast<intptr_t>(*handle)); }

// `dims`: the grid, the block and the cluster shape (0 x 0 x 0: no clusters)
using LaunchHook = int (*)(int module, const char* name, const unsigned* dims, size_t shared,
                           void** args, int cooperative, int opt_in);
using AllocHook = void* (*)(size_t bytes);
using FreeHook = int (*)(void* p);
// each of a kernel's parameters' byte size and offset; how many (-1: no such kernel)
using SizesHook = int (*)(int module, const char* name, size_t* sizes, size_t* offsets,
                          int most);
// a kernel's static shared memory in bytes (-1: no such kernel)
using StaticHook = int (*)(int module, const char* name);
// a misuse of the API: what is wrong, and where in this library the call came from
using ReportHook = void (*)(const char* message, size_t caller);
LaunchHook g_launch = nullptr;
AllocHook g_alloc = nullptr;
FreeHook g_free = nullptr;
SizesHook g_sizes = nullptr;
StaticHook g_static = nullptr;
ReportHook g_report = nullptr;
using FinishHook = void (*)();  // called as the program ends (the leak check)
FinishHook g_finish = nullptr;
int g_launches = 0;

// `caller`: the program's call that made it (0: memory tessera placed itself)
struct Allocation { const char* base; size_t size; void* caller; int kind; };
// never destroyed: the leak check reads it as the program exits, after static destructors
std::vector<Allocation>& allocations() {
  static auto* t = new std::vector<Allocation>;
  return *t;
}

const Allocation* allocation_of(const void* p) {
  const char* c = static_cast<const char*>(p);
  for (const Allocation& a : allocations())
    if (c >= a.base && c < a.base + (a.size ? a.size : 1)) return &a;
  return nullptr;
}

// the offset in this library of the instruction that called the API (for addr2line)
size_t caller_offset(void* ret) {
  Dl_info info;
  if (!ret || !dladdr(ret, &info) || !info.dli_fbase) return 0;
  return static_cast<size_t>(static_cast<char*>(ret) - static_cast<char*>(info.dli_fbase)) - 1;
}

}  // namespace

void tessera_report(void* ret, const char* fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (g_report) g_report(text, caller_offset(ret));
  std::fprintf(stderr, "tessera run-cuda: %s\n", text);
  std::abort();  // not reached: tessera ends the program after its report
}

namespace {

dim3 g_grid, g_block;
size_t g_shared = 0;
cudaStream_t g_stream = nullptr;

const Kernel* kernel_of(const void* host) {
  for (const Kernel& k : kernels()) if (k.host == host) return &k;
  return nullptr;
}

cudaError_t run_launch(const Kernel& k, dim3 g, dim3 b, size_t shared, void** args, int coop,
                       dim3 cluster) {
  unsigned dims[9] = {g.x, g.y, g.z, b.x, b.y, b.z, cluster.x, cluster.y, cluster.z};
  fflush(stdout);  // the program's output so far comes before the kernel's printf
  cudaError_t e = static_cast<cudaError_t>(
      g_launch(k.module, k.name.c_str(), dims, shared, args, coop, k.opt_in));
  g_launches += e == cudaSuccess;
  return tessera_fail(e);
}

// a launch as work that keeps its own copy of the arguments' bytes
cudaError_t launch_work(const Kernel& k, dim3 g, dim3 b, size_t shared, void** args, int coop,
                        TesseraWork* work, dim3 cluster) {
  size_t sizes[4096], offsets[4096];  // the PTX ISA allows 4 KB of parameters
  int n = g_sizes(k.module, k.name.c_str(), sizes, offsets, 4096);
  if (n < 0) return tessera_fail(cudaErrorInvalidDeviceFunction);
  std::vector<std::vector<char>> copies;
  for (int i = 0; i < n; ++i) {
    const char* arg = static_cast<const char*>(args[i]);
    copies.emplace_back(arg, arg + sizes[i]);
  }
  *work = [kernel = k, g, b, shared, coop, copies, cluster]() mutable {
    std::vector<void*> pointers;
    for (std::vector<char>& c : copies) pointers.push_back(c.data());
    return run_launch(kernel, g, b, shared, pointers.data(), coop, cluster);
  };
  return cudaSuccess;
}

cudaError_t launch(const void* fun, dim3 g, dim3 b, size_t shared, void** args, int coop,
                   cudaStream_t stream, dim3 cluster = dim3(0, 0, 0)) {
  const Kernel* k = kernel_of(fun);
  if (!k) return tessera_fail(cudaErrorInvalidDeviceFunction);
  return tessera_launch(k->module, k->name.c_str(), g, b, shared, args, coop, stream,
                        k->opt_in, cluster);
}

void summary() {
  if (g_finish) g_finish();  // the leak check's report, where it was asked for
  std::fprintf(stderr, "tessera run-cuda: %d kernel launch%s checked, no fault\n", g_launches,
               g_launches == 1 ? "" : "es");
}

}  // namespace

cudaError_t tessera_launch(int module, const char* name, dim3 g, dim3 b, size_t shared,
                           void** args, int coop, cudaStream_t stream, int opt_in, dim3 cluster) {
  if (!g_launch) return tessera_fail(cudaErrorInvalidDeviceFunction);
  Kernel k{nullptr, name, module, opt_in};
  if (!tessera_capturing(stream)) return run_launch(k, g, b, shared, args, coop, cluster);
  TesseraWork work;
  cudaError_t e = launch_work(k, g, b, shared, args, coop, &work, cluster);
  return e == cudaSuccess ? tessera_issue(stream, std::move(work)) : e;
}

cudaError_t tessera_launch_work(const void* fun, dim3 g, dim3 b, size_t shared, void** args,
                                int coop, TesseraWork* work) {
  const Kernel* k = kernel_of(fun);
  if (!k || !g_launch) return tessera_fail(cudaErrorInvalidDeviceFunction);
  return launch_work(*k, g, b, shared, args, coop, work, dim3(0, 0, 0));
}

int tessera_static_shared(int module, const char* name) {
  return g_static ? g_static(module, name) : -1;
}

int tessera_dynamic_limit(int module, const char* name, int opt_in) {
  int fixed = tessera_static_shared(module, name);
  if (fixed < 0) return -1;
  return opt_in >= 0 ? opt_in : kTesseraPortableShared - fixed;
}

int tessera_params(int module, const char* name, size_t* sizes, size_t* offsets, int most) {
  return g_sizes ? g_sizes(module, name, sizes, offsets, most) : -1;
}

cudaError_t tessera_free(void* ret, const char* call, void* p, int kind) {
  static const char* const kFreers[] = {"cudaFree", "cudaFreeHost", "cudaHostUnregister",
                                        "cudaFree", "no call (a __device__ variable's)"};
  if (!p) return cudaSuccess;
  std::vector<Allocation>& all = allocations();
  for (size_t k = 0; k < all.size(); ++k) {
    if (all[k].base != p) continue;
    if (all[k].kind != kind && !(all[k].kind == kTesseraManaged && kind == kTesseraDevice))
      tessera_report(ret, "%s(%p): this memory is given back by %s", call, p,
                     kFreers[all[k].kind]);
    all.erase(all.begin() + static_cast<long>(k));
    if (kind == kTesseraRegistered) return cudaSuccess;  // the program's own memory
    return g_free && g_free(p) == 0 ? cudaSuccess : tessera_fail(cudaErrorInvalidValue);
  }
  tessera_report(ret, "%s(%p): not an allocation (freed twice, or not from %s)", call, p,
                 kind == kTesseraDevice ? "cudaMalloc" : kind == kTesseraPinned
                 ? "cudaMallocHost" : "cudaHostRegister");
}

void tessera_add_allocation(const void* p, size_t size) {
  allocations().push_back({static_cast<const char*>(p), size, nullptr, kTesseraDevice});
}

cudaError_t tessera_malloc(void* ret, void** p, size_t bytes, int kind) {
  if (!p) return tessera_fail(cudaErrorInvalidValue);
  if (kind == kTesseraRegistered || kind == kTesseraSymbol) {  // memory the program names
    allocations().push_back({static_cast<const char*>(*p), bytes, ret, kind});
    return cudaSuccess;
  }
  *p = g_alloc ? g_alloc(bytes) : nullptr;
  if (*p) allocations().push_back({static_cast<const char*>(*p), bytes, ret, kind});
  return *p || bytes == 0 ? cudaSuccess : tessera_fail(cudaErrorMemoryAllocation);
}

int tessera_memory_kind(const void* p) {
  const Allocation* a = allocation_of(p);
  return a ? a->kind : -1;
}

bool tessera_allocation(const void* p, const char** base, size_t* size) {
  const Allocation* a = allocation_of(p);
  if (a) { *base = a->base; *size = a->size; }
  return a != nullptr;
}

bool tessera_symbol_storage(const void* host, char** storage, size_t* size) {
  for (const Symbol& s : symbols()) {
    if (s.host == host) {
      *storage = s.device ? s.device : static_cast<char*>(const_cast<void*>(s.host));
      *size = s.size;
      return true;
    }
  }
  return false;
}

extern "C" {

// --- what tessera calls ------------------------------------------------------------
void tessera_set_hooks(LaunchHook launch, AllocHook alloc, FreeHook free_, ReportHook report_,
                       SizesHook sizes) {
  g_launch = launch; g_alloc = alloc; g_free = free_; g_report = report_; g_sizes = sizes;
  std::atexit(summary);  // a fault ends the program without it
}
int tessera_symbol_count() { return static_cast<int>(symbols().size()); }
const char* tessera_symbol(int k, void** host, size_t* size, int* module, int* managed) {
  const Symbol& s = symbols().at(k);
  *host = const_cast<void*>(s.host); *size = s.size; *module = s.module; *managed = s.managed;
  return s.name.c_str();
}
void tessera_set_symbol_device(int k, void* storage) {
  symbols().at(k).device = static_cast<char*>(storage);
}
// the registered kernels (tessera matches each fat binary with its .cu file's PTX)
int tessera_kernel_count() { return static_cast<int>(kernels().size()); }
const char* tessera_kernel(int k, int* module) {
  *module = kernels().at(k).module;
  return kernels().at(k).name.c_str();
}
int tessera_module_count() { return static_cast<int>(handles().size()); }
// the live allocations the program made: base, size and its call's offset (for the leak
// check, which tessera_set_finish_hook asks for)
int tessera_allocation_count() { return static_cast<int>(allocations().size()); }
const void* tessera_allocation_info(int k, size_t* size, size_t* caller, int* kind) {
  const Allocation& a = allocations().at(k);
  *size = a.size;
  *kind = a.kind;
  *caller = a.caller ? caller_offset(a.caller) : 0;
  return a.base;
}
void tessera_set_finish_hook(FinishHook hook) { g_finish = hook; }
void tessera_set_static_hook(StaticHook hook) { g_static = hook; }

// --- kernels' attributes -------------------------------------------------------------
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void* f) {
  const Kernel* k = kernel_of(f);
  int fixed = k && g_static ? g_static(k->module, k->name.c_str()) : -1;
  if (fixed < 0) return tessera_fail(cudaErrorInvalidDeviceFunction);
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024; a->numRegs = 32;
  a->ptxVersion = a->binaryVersion = TESSERA_SM;
  a->sharedSizeBytes = static_cast<size_t>(fixed);
  a->maxDynamicSharedSizeBytes = tessera_dynamic_limit(k->module, k->name.c_str(), k->opt_in);
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void* f, int threads,
                                                          size_t dynamic) {
  const Kernel* k = kernel_of(f);
  if (!k) return tessera_fail(cudaErrorInvalidDeviceFunction);
  *n = tessera_occupancy(k->module, k->name.c_str(), threads, dynamic, k->opt_in);
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* n, const void* f, int threads, size_t dynamic, unsigned) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, f, threads, dynamic);
}
cudaError_t cudaFuncSetAttribute(const void* f, cudaFuncAttribute a, int v) {
  for (Kernel& k : kernels()) {
    if (k.host != f) continue;
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) k.opt_in = v;
    if (a == cudaFuncAttributeNonPortableClusterSizeAllowed && v)
      tessera_report(__builtin_return_address(0), "clusters of more than 8 CTAs "
                     "(cudaFuncAttributeNonPortableClusterSizeAllowed) are not modelled");
    return cudaSuccess;
  }
  return tessera_fail(cudaErrorInvalidDeviceFunction);
}

// --- registration and launch, as nvcc's host code calls them -----------------------
void** __cudaRegisterFatBinary(void*) {
  void** handle = new void*(reinterpret_cast<void*>(static_cast<intptr_t>(handles().size())));
  handles().push_back(handle);
  return handle;
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
char __cudaInitModule(void**) { return 1; }
void __cudaRegisterFunction(void** h, const char* host, char* dev, const char*, int, uint3*,
                            uint3*, dim3*, dim3*, int*) {
  kernels().push_back({host, dev, module_of(h)});
}
void __cudaRegisterVar(void** h, char* host, char* dev, const char*, int, size_t size, int, int) {
  symbols().push_back({host, dev, size, module_of(h), false});
}
void __cudaRegisterManagedVar(void** h, void** host_ptr, char* dev, const char*, int,
                              size_t size, int, int) {
  void* storage = std::calloc(1, size ? size : 1);  // the program's lifetime
  *host_ptr = storage;
  symbols().push_back({storage, dev, size, module_of(h), true});
}
unsigned __cudaPushCallConfiguration(dim3 g, dim3 b, size_t shared, cudaStream_t s) {
  g_grid = g; g_block = b; g_shared = shared; g_stream = s; return 0;
}
cudaError_t __cudaPopCallConfiguration(dim3* g, dim3* b, size_t* shared, void* s) {
  *g = g_grid; *b = g_block; *shared = g_shared; *static_cast<cudaStream_t*>(s) = g_stream;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t* k, const void* fun) {
  *k = (cudaKernel_t)fun; return cudaSuccess;
}
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 g, dim3 b, void** args, size_t shared,
                               cudaStream_t s) {
  return launch((const void*)k, g, b, shared, args, 0, s);
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 g, dim3 b, void** args, size_t shared,
                                    cudaStream_t s) {
  return launch((const void*)k, g, b, shared, args, 0, s);
}
cudaError_t cudaLaunchKernel(const void* f, dim3 g, dim3 b, void** args, size_t shared,
                             cudaStream_t s) {
  return launch(f, g, b, shared, args, 0, s);
}
cudaError_t cudaLaunchCooperativeKernel(const void* f, dim3 g, dim3 b, void** args, size_t shared,
                                        cudaStream_t s) {
  return launch(f, g, b, shared, args, 1, s);
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* c, const void* f, void** args) {
  int coop = 0;
  dim3 cluster(0, 0, 0);
  for (unsigned k = 0; k < c->numAttrs; ++k) {
    const cudaLaunchAttribute& a = c->attrs[k];
    if (a.id == cudaLaunchAttributeCooperative) coop = a.val.cooperative;
    if (a.id == cudaLaunchAttributeClusterDimension)
      cluster = dim3(a.val.clusterDim.x, a.val.clusterDim.y, a.val.clusterDim.z);
  }
  return launch(f, c->gridDim, c->blockDim, c->dynamicSmemBytes, args, coop, c->stream,
                cluster);
}

// --- memory --------------------------------------------------------------------------
cudaError_t cudaMalloc(void** p, size_t bytes) {
  return tessera_malloc(__builtin_return_address(0), p, bytes);
}
cudaError_t cudaMallocManaged(void** p, size_t bytes, unsigned) {
  return tessera_malloc(__builtin_return_address(0), p, bytes, kTesseraManaged);
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) {
  return tessera_malloc(__builtin_return_address(0), p, bytes);
}
cudaError_t cudaFree(void* p) {
  return tessera_free(__builtin_return_address(0), "cudaFree", p);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  return tessera_free(__builtin_return_address(0), "cudaFreeAsync", p);
}
}  // extern "C"

// The CUDA runtime of `tessera run-cuda`: linked into a CUDA program (built with
// `nvcc -cudart none`), it keeps the program's host code as it is and hands every kernel
// launch to tessera, which runs the kernel's PTX on the CPU with its checks.
//
// Device memory is host memory that tessera allocates and keeps at its own address, so
// cudaMemcpy and cudaMemset are memcpy and memset, and managed memory needs nothing
// more. A __device__ variable's storage is its host shadow. Streams and events are
// accepted; every call is synchronous. The device it describes is the target the PTX
// was compiled for (TESSERA_SM), with 4 SMs, so that grids sized by the SM count stay
// small on a CPU (runtime_device.cpp: the device, streams and events).
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
struct Kernel { const void* host; std::string name; int module; };
struct Symbol { const void* host; std::string name; size_t size; int module; };

// registration runs before main (and before tessera sets its hooks): tables made on use
std::vector<Kernel>& kernels() { static std::vector<Kernel> t; return t; }
std::vector<Symbol>& symbols() { static std::vector<Symbol> t; return t; }
// each fat binary's handle: a slot holding its module number
std::vector<void**>& handles() { static std::vector<void**> t; return t; }
int module_of(void** handle) { return static_cast<int>(reinterpret_cast<intptr_t>(*handle)); }

using LaunchHook = int (*)(int module, const char* name, const unsigned* dims, size_t shared,
                           void** args, int cooperative);
using AllocHook = void* (*)(size_t bytes);
using FreeHook = int (*)(void* p);
// the byte size of each of a kernel's parameters; how many it has (-1: no such kernel)
using SizesHook = int (*)(int module, const char* name, size_t* sizes, int most);
// a misuse of the API: what is wrong, and where in this library the call came from
using ReportHook = void (*)(const char* message, size_t caller);
LaunchHook g_launch = nullptr;
AllocHook g_alloc = nullptr;
FreeHook g_free = nullptr;
SizesHook g_sizes = nullptr;
ReportHook g_report = nullptr;
int g_launches = 0;

struct Allocation { const char* base; size_t size; };
std::vector<Allocation>& allocations() { static std::vector<Allocation> t; return t; }

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

// [p, p + n) in device memory: inside one allocation, or a report naming the call
void check_device(void* ret, const char* call, const char* side, const void* p, size_t n) {
  const Allocation* a = allocation_of(p);
  if (!a) {
    tessera_report(ret, "%s: the %s %p is not device memory (cudaMalloc returns it)", call,
                   side, p);
  } else if (static_cast<const char*>(p) + n > a->base + a->size) {
    size_t past = static_cast<size_t>(static_cast<const char*>(p) + n - (a->base + a->size));
    tessera_report(ret, "%s of %zu bytes: the %s %p runs %zu bytes past the end of its "
                   "allocation (%zu bytes at %p)", call, n, side, p, past, a->size,
                   static_cast<const void*>(a->base));
  }
}

// a copy's device sides, as its kind names them (cudaMemcpyDefault: where they lie), of
// nd bytes at the destination and ns at the source
void check_copy(void* ret, const char* call, void* d, size_t nd, const void* s, size_t ns,
                cudaMemcpyKind k) {
  bool to = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice ||
            (k == cudaMemcpyDefault && allocation_of(d));
  bool from = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice ||
              (k == cudaMemcpyDefault && allocation_of(s));
  if (to) check_device(ret, call, "destination", d, nd);
  if (from) check_device(ret, call, "source", s, ns);
}

// the bytes rows of a 2-D copy span: whole pitches but the last row's width
size_t extent(size_t pitch, size_t width, size_t height) {
  return height ? pitch * (height - 1) + width : 0;
}

cudaError_t copy_2d(void* ret, const char* call, void* d, size_t dpitch, const void* s,
                    size_t spitch, size_t width, size_t height, cudaMemcpyKind k) {
  if (width > dpitch || width > spitch) return tessera_fail(cudaErrorInvalidPitchValue);
  check_copy(ret, call, d, extent(dpitch, width, height), s, extent(spitch, width, height), k);
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(d) + r * dpitch, static_cast<const char*>(s) + r * spitch,
                 width);
  return cudaSuccess;
}
// how a misuse found when recorded work runs (in a graph) names the call that recorded it
std::string deferred(const char* call) {
  return std::string(call) + " (recorded here; checked again when its graph ran)";
}

dim3 g_grid, g_block;
size_t g_shared = 0;
cudaStream_t g_stream = nullptr;

const Kernel* kernel_of(const void* host) {
  for (const Kernel& k : kernels()) if (k.host == host) return &k;
  return nullptr;
}

cudaError_t run_launch(const Kernel& k, dim3 g, dim3 b, size_t shared, void** args, int coop) {
  unsigned dims[6] = {g.x, g.y, g.z, b.x, b.y, b.z};
  fflush(stdout);  // the program's output so far comes before the kernel's printf
  cudaError_t e = static_cast<cudaError_t>(
      g_launch(k.module, k.name.c_str(), dims, shared, args, coop));
  g_launches += e == cudaSuccess;
  return tessera_fail(e);
}

cudaError_t launch(const void* fun, dim3 g, dim3 b, size_t shared, void** args, int coop,
                   cudaStream_t stream) {
  const Kernel* k = kernel_of(fun);
  if (!k || !g_launch) return tessera_fail(cudaErrorInvalidDeviceFunction);
  if (!tessera_capturing(stream)) return run_launch(*k, g, b, shared, args, coop);
  TesseraWork work;
  cudaError_t e = tessera_launch_work(fun, g, b, shared, args, coop, &work);
  return e == cudaSuccess ? tessera_issue(stream, std::move(work)) : e;
}

cudaError_t allocate(void** p, size_t bytes) {
  if (!p) return tessera_fail(cudaErrorInvalidValue);
  *p = g_alloc ? g_alloc(bytes) : nullptr;
  if (*p) allocations().push_back({static_cast<const char*>(*p), bytes});
  return *p || bytes == 0 ? cudaSuccess : tessera_fail(cudaErrorMemoryAllocation);
}

void summary() {
  std::fprintf(stderr, "tessera run-cuda: %d kernel launch%s checked, no fault\n", g_launches,
               g_launches == 1 ? "" : "es");
}

const Symbol* symbol_of(const void* host) {
  for (const Symbol& s : symbols()) if (s.host == host) return &s;
  return nullptr;
}

}  // namespace

cudaError_t tessera_launch_work(const void* fun, dim3 g, dim3 b, size_t shared, void** args,
                                int coop, TesseraWork* work) {
  const Kernel* k = kernel_of(fun);
  if (!k || !g_launch) return tessera_fail(cudaErrorInvalidDeviceFunction);
  size_t sizes[4096];  // the PTX ISA allows 4 KB of parameters, each at least a byte
  int n = g_sizes(k->module, k->name.c_str(), sizes, 4096);
  if (n < 0) return tessera_fail(cudaErrorInvalidDeviceFunction);
  std::vector<std::vector<char>> copies;
  for (int i = 0; i < n; ++i) {
    const char* arg = static_cast<const char*>(args[i]);
    copies.emplace_back(arg, arg + sizes[i]);
  }
  *work = [kernel = *k, g, b, shared, coop, copies]() mutable {
    std::vector<void*> pointers;
    for (std::vector<char>& c : copies) pointers.push_back(c.data());
    return run_launch(kernel, g, b, shared, pointers.data(), coop);
  };
  return cudaSuccess;
}

TesseraWork tessera_copy_work(void* ret, const char* call, void* d, const void* s, size_t n,
                              cudaMemcpyKind k) {
  check_copy(ret, call, d, n, s, n, k);
  return [=, later = deferred(call)] {
    check_copy(ret, later.c_str(), d, n, s, n, k);  // an allocation may be gone by now
    std::memmove(d, s, n);
    return cudaSuccess;
  };
}

TesseraWork tessera_memset_work(void* ret, const char* call, cudaMemsetParams p) {
  size_t unit = p.elementSize, width = p.width * unit;
  if ((unit != 1 && unit != 2 && unit != 4) || (p.height > 1 && p.pitch < width))
    tessera_report(ret, "%s: elements of 1, 2 or 4 bytes, rows no wider than the pitch", call);
  size_t span = extent(p.height > 1 ? p.pitch : width, width, p.height);
  check_device(ret, call, "destination", p.dst, span);
  return [=, later = deferred(call)] {
    check_device(ret, later.c_str(), "destination", p.dst, span);
    for (size_t r = 0; r < p.height; ++r) {
      char* row = static_cast<char*>(p.dst) + r * p.pitch;
      for (size_t x = 0; x < p.width; ++x) std::memcpy(row + x * unit, &p.value, unit);
    }
    return cudaSuccess;
  };
}

extern "C" {

// --- what tessera calls ------------------------------------------------------------
void tessera_set_hooks(LaunchHook launch, AllocHook alloc, FreeHook free_, ReportHook report_,
                       SizesHook sizes) {
  g_launch = launch; g_alloc = alloc; g_free = free_; g_report = report_; g_sizes = sizes;
  std::atexit(summary);  // a fault ends the program without it
}
int tessera_symbol_count() { return static_cast<int>(symbols().size()); }
const char* tessera_symbol(int k, void** host, size_t* size, int* module) {
  const Symbol& s = symbols().at(k);
  *host = const_cast<void*>(s.host); *size = s.size; *module = s.module;
  return s.name.c_str();
}
// the registered kernels (tessera matches each fat binary with its .cu file's PTX)
int tessera_kernel_count() { return static_cast<int>(kernels().size()); }
const char* tessera_kernel(int k, int* module) {
  *module = kernels().at(k).module;
  return kernels().at(k).name.c_str();
}
int tessera_module_count() { return static_cast<int>(handles().size()); }

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
  symbols().push_back({host, dev, size, module_of(h)});
}
void __cudaRegisterManagedVar(void** h, void** host_ptr, char* dev, const char*, int,
                              size_t size, int, int) {
  void* storage = std::calloc(1, size ? size : 1);  // the program's lifetime
  *host_ptr = storage;
  symbols().push_back({storage, dev, size, module_of(h)});
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
  for (unsigned k = 0; k < c->numAttrs; ++k)
    if (c->attrs[k].id == cudaLaunchAttributeCooperative) coop = c->attrs[k].val.cooperative;
  return launch(f, c->gridDim, c->blockDim, c->dynamicSmemBytes, args, coop, c->stream);
}

// --- memory --------------------------------------------------------------------------
cudaError_t cudaMalloc(void** p, size_t bytes) { return allocate(p, bytes); }
cudaError_t cudaMallocManaged(void** p, size_t bytes, unsigned) { return allocate(p, bytes); }
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) { return allocate(p, bytes); }
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::vector<Allocation>& all = allocations();
  for (size_t k = 0; k < all.size(); ++k) {
    if (all[k].base == p) {
      all.erase(all.begin() + static_cast<long>(k));
      return g_free && g_free(p) == 0 ? cudaSuccess : tessera_fail(cudaErrorInvalidValue);
    }
  }
  tessera_report(__builtin_return_address(0), "cudaFree(%p): not an allocation (freed twice, "
                 "or not from cudaMalloc)", p);
  return cudaErrorInvalidValue;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  check_copy(__builtin_return_address(0), "cudaMemcpy", d, n, s, n, k);
  std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k,
                            cudaStream_t stream) {
  return tessera_issue(stream, tessera_copy_work(__builtin_return_address(0), "cudaMemcpyAsync",
                                                 d, s, n, k));
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  check_device(__builtin_return_address(0), "cudaMemset", "destination", p, n);
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
  check_device(__builtin_return_address(0), "cudaMemPrefetchAsync", "range", p, n);
  return cudaSuccess;
}
cudaError_t cudaMemAdvise(const void* p, size_t n, cudaMemoryAdvise, cudaMemLocation) {
  check_device(__builtin_return_address(0), "cudaMemAdvise", "range", p, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyToSymbol(const void* sym, const void* src, size_t n, size_t off,
                               cudaMemcpyKind) {
  const Symbol* s = symbol_of(sym);
  if (!s || off + n > s->size) return tessera_fail(cudaErrorInvalidSymbol);
  std::memcpy(static_cast<char*>(const_cast<void*>(s->host)) + off, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* sym, size_t n, size_t off,
                                 cudaMemcpyKind) {
  const Symbol* s = symbol_of(sym);
  if (!s || off + n > s->size) return tessera_fail(cudaErrorInvalidSymbol);
  std::memcpy(dst, static_cast<const char*>(s->host) + off, n);
  return cudaSuccess;
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
  return allocate(p, *pitch * height);
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
  check_device(__builtin_return_address(0), "cudaMemset2D", "destination", p,
               extent(pitch, width, height));
  for (size_t r = 0; r < height; ++r) std::memset(static_cast<char*>(p) + r * pitch, v, width);
  return cudaSuccess;
}

}  // extern "C"

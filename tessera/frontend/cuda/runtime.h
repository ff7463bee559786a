// What the files of `tessera run-cuda`'s CUDA runtime share (runtime.cpp,
// runtime_device.cpp, runtime_graph.cpp, runtime_texture.cpp).
#pragma once

#include <cuda_runtime.h>

#include <functional>

#ifndef TESSERA_SM
#define TESSERA_SM 80  // the target the program's PTX is compiled for, as 10 * major + minor
#endif

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

// a launch as work that keeps its own copy of the arguments' bytes (the program's
// variables they point at are gone when a graph runs it)
cudaError_t tessera_launch_work(const void* fun, dim3 g, dim3 b, size_t shared, void** args,
                                int coop, TesseraWork* work);
// a copy or a set as work, checked against the allocations now (`ret`: the caller, whose
// line a misuse is reported at) and when it runs
TesseraWork tessera_copy_work(void* ret, const char* call, void* d, const void* s, size_t n,
                              cudaMemcpyKind k);
TesseraWork tessera_memset_work(void* ret, const char* call, cudaMemsetParams p);

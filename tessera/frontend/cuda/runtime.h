// What the two files of `tessera run-cuda`'s CUDA runtime share (runtime.cpp,
// runtime_device.cpp).
#pragma once

#include <cuda_runtime.h>

#ifndef TESSERA_SM
#define TESSERA_SM 80  // the target the program's PTX is compiled for, as 10 * major + minor
#endif

// records e as the error cudaGetLastError returns next (unless it is cudaSuccess)
cudaError_t tessera_fail(cudaError_t e);

// cuRAND's device API (header-only): Philox4_32_10 with subsequences and offsets, and
// XORWOW with offsets (its skip-ahead reads cuRAND's precomputed __device__ tables).
// Prints each thread's raw bits and floats in hexadecimal, so that any difference shows.
#include <cstdio>
#include <curand_kernel.h>

constexpr int kThreads = 64;

__global__ void philox(unsigned long long seed, unsigned* bits, float* uniform, float* normal) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  curandStatePhilox4_32_10_t state;
  curand_init(seed, i, 2 * i + 1, &state);  // subsequence i, offset 2i + 1
  for (int k = 0; k < 3; ++k) bits[3 * i + k] = curand(&state);
  uniform[i] = curand_uniform(&state);
  normal[i] = curand_normal(&state);
}

__global__ void xorwow(unsigned long long seed, unsigned* bits, float* uniform) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  curandState state;
  curand_init(seed, 0, i, &state);  // offset i
  bits[2 * i] = curand(&state);
  bits[2 * i + 1] = curand(&state);
  uniform[i] = curand_uniform(&state);
}

int main() {
  unsigned* bits;
  float *uniform, *normal;
  cudaMallocManaged(&bits, 3 * kThreads * sizeof(unsigned));
  cudaMallocManaged(&uniform, kThreads * sizeof(float));
  cudaMallocManaged(&normal, kThreads * sizeof(float));
  philox<<<2, kThreads / 2>>>(0x123456789abcdefULL, bits, uniform, normal);
  cudaDeviceSynchronize();
  for (int i = 0; i < kThreads; ++i)
    std::printf("philox %d %08x %08x %08x %a %a\n", i, bits[3 * i], bits[3 * i + 1],
                bits[3 * i + 2], uniform[i], normal[i]);
  xorwow<<<2, kThreads / 2>>>(1234, bits, uniform);
  cudaDeviceSynchronize();
  for (int i = 0; i < kThreads; ++i)
    std::printf("xorwow %d %08x %08x %a\n", i, bits[2 * i], bits[2 * i + 1], uniform[i]);
  return 0;
}

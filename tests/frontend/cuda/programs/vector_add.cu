// Device memory, managed memory, a __device__ counter, a __constant__ scale, device
// printf and two launches; main prints what it copied back.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__device__ int launches;
__constant__ float scale;

__global__ void scaled_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = scale * (a[i] + b[i]);
  if (i == 0) {
    atomicAdd(&launches, 1);
    printf("kernel: n = %d\n", n);
  }
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  float *a, *b, *c;
  cudaMalloc(&a, n * sizeof(float));
  cudaMalloc(&b, n * sizeof(float));
  cudaMallocManaged(&c, n * sizeof(float));
  float* h = static_cast<float*>(malloc(n * sizeof(float)));
  for (int i = 0; i < n; ++i) h[i] = static_cast<float>(i);
  cudaMemcpy(a, h, n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(b, h, n * sizeof(float), cudaMemcpyHostToDevice);
  float s = 0.5f;
  cudaMemcpyToSymbol(scale, &s, sizeof s);
  printf("host: launching\n");
  scaled_add<<<(n + 255) / 256, 256>>>(a, b, c, n);
  scaled_add<<<(n + 255) / 256, 256>>>(a, b, c, n);
  cudaError_t err = cudaDeviceSynchronize();
  int count = 0;
  cudaMemcpyFromSymbol(&count, launches, sizeof count);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += c[i];  // managed memory, read on the host
  printf("host: %s, launches = %d, sum = %.1f\n", cudaGetErrorString(err), count, sum);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  free(h);
  return count == 2 ? 0 : 3;
}

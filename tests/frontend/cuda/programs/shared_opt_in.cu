// More than 48 KB of dynamic shared memory: refused (and an occupancy of 0) until the
// program raises cudaFuncAttributeMaxDynamicSharedMemorySize, then launched.
#include <cstdio>

__global__ void reverse(const int* in, int* out, int n) {
  extern __shared__ int buffer[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buffer[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buffer[n - 1 - i];
}

int main() {
  const int n = 16 * 1024;  // 64 KB of ints
  const size_t bytes = n * sizeof(int);
  int *in, *out;
  cudaMallocManaged(&in, bytes);
  cudaMallocManaged(&out, bytes);
  for (int i = 0; i < n; ++i) in[i] = 3 * i;
  int ctas = -1;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, reverse, 256, bytes);
  reverse<<<1, 256, bytes>>>(in, out, n);
  std::printf("before opting in: occupancy %d, refused %d\n", ctas,
              cudaGetLastError() != cudaSuccess);
  cudaFuncSetAttribute(reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  cudaFuncAttributes attrs;
  cudaFuncGetAttributes(&attrs, reverse);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, reverse, 256, bytes);
  reverse<<<1, 256, bytes>>>(in, out, n);
  cudaDeviceSynchronize();
  std::printf("after: max dynamic %d, occupancy above 0 %d, %s, out[0] %d out[%d] %d\n",
              attrs.maxDynamicSharedSizeBytes, ctas > 0, cudaGetErrorString(cudaGetLastError()),
              out[0], n - 1, out[n - 1]);
  return 0;
}

// Memory a program never frees, for --leak-check: a cudaMalloc kept, one freed, a CUDA
// array kept, and a device heap block a kernel never gives back.
#include <cstdio>

__global__ void keep(int** slot) { *slot = static_cast<int*>(malloc(64)); }

int main() {
  float *kept, *freed;
  cudaMalloc(&kept, 4000);
  cudaMalloc(&freed, 100);
  cudaFree(freed);
  cudaChannelFormatDesc desc = cudaCreateChannelDesc<float>();
  cudaArray_t array;
  cudaMallocArray(&array, &desc, 16, 4);
  int** slot;
  cudaMallocManaged(&slot, sizeof(int*));
  keep<<<1, 1>>>(slot);
  cudaDeviceSynchronize();
  cudaFree(slot);
  std::printf("done\n");
  return 0;
}

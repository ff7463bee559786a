// Two files with file-local (static) device variables and kernels of the same names:
// each file's kernels see their own. main is here; second.cu has the other half.
#include <cstdio>

static __device__ int counter;
static __constant__ int step = 1;
static __global__ void bump(int times) { counter += times * step; }
__global__ void show_first(int* out) { *out = counter; }

void run_second(int* out);

int main() {
  int* out;
  cudaMallocManaged(&out, sizeof(int));
  bump<<<1, 1>>>(5);
  show_first<<<1, 1>>>(out);
  cudaDeviceSynchronize();
  std::printf("first %d\n", *out);
  run_second(out);
  std::printf("second %d\n", *out);
  bump<<<1, 1>>>(1);
  show_first<<<1, 1>>>(out);
  cudaDeviceSynchronize();
  std::printf("first %d\n", *out);
  return 0;
}

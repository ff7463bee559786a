// The other file: its own `counter`, `step` and `bump` (first.cu's are file-local too).
static __device__ int counter;
static __constant__ int step = 100;
static __global__ void bump(int times) { counter += times * step; }
__global__ void show_second(int* out) { *out = counter; }

void run_second(int* out) {
  bump<<<1, 1>>>(2);
  show_second<<<1, 1>>>(out);
  cudaDeviceSynchronize();
}

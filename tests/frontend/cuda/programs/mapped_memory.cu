// Host memory kernels reach: pinned memory from cudaHostAlloc (through the pointer
// cudaHostGetDevicePointer gives) and a malloc'd buffer registered with cudaHostRegister.
// With `unregistered` a kernel reads the buffer after cudaHostUnregister; with
// `wrong-free` the pinned memory goes to cudaFree.
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void bump(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += i;
}

int main(int argc, char** argv) {
  const char* mistake = argc > 1 ? argv[1] : "";
  int* pinned;
  cudaHostAlloc(&pinned, 64 * sizeof(int), cudaHostAllocMapped);
  for (int i = 0; i < 64; ++i) pinned[i] = 1000;
  int* mapped;
  cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped), pinned, 0);
  bump<<<1, 64>>>(mapped, 64);
  cudaDeviceSynchronize();
  std::printf("pinned %d %d\n", pinned[0], pinned[63]);

  const int n = 3000;
  int* plain = static_cast<int*>(std::malloc(n * sizeof(int)));
  for (int i = 0; i < n; ++i) plain[i] = -i;
  cudaHostRegister(plain, n * sizeof(int), cudaHostRegisterDefault);
  bump<<<(n + 255) / 256, 256>>>(plain, n);
  cudaDeviceSynchronize();
  cudaHostUnregister(plain);
  long long sum = 0;
  for (int i = 0; i < n; ++i) sum += plain[i];
  std::printf("registered sum %lld\n", sum);
  if (!std::strcmp(mistake, "unregistered")) {
    bump<<<(n + 255) / 256, 256>>>(plain, n);
    cudaDeviceSynchronize();
  }
  if (!std::strcmp(mistake, "wrong-free")) cudaFree(pinned);
  cudaFreeHost(pinned);
  std::free(plain);
  std::printf("done\n");
  return 0;
}

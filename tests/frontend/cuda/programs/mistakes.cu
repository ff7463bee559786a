// One mistake a run, chosen by argv[1]: a read past an allocation, a block too large to
// launch (the program checks the error), a shared value never written that decides a
// store, a copy past an allocation, a second free, a failed device assert, a graph that
// sets memory freed after its capture, a 2-D copy of a row more than the rows allocated.
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void copy_all(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = in[i];  // no bound check: the last block reads past n
}

__global__ void half_written(int* out) {
  __shared__ int s[64];
  if (threadIdx.x < 32) s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x] + 1;  // threads 32-63 read what nobody wrote
}

__global__ void positive(const int* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) assert(in[i] >= 0);
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "bounds";
  int n = 1000;
  int *in, *out;
  cudaMalloc(&in, n * sizeof(int));
  cudaMalloc(&out, 1024 * sizeof(int));
  if (what[0] == 'b') {
    copy_all<<<(n + 255) / 256, 256>>>(in, out, n);
  } else if (what[0] == 'l') {
    copy_all<<<1, 2048>>>(in, out, n);
    printf("launch: %s\n", cudaGetErrorString(cudaGetLastError()));
  } else if (what[0] == 'u') {
    half_written<<<1, 64>>>(out);
  } else if (what[0] == 'a') {
    int minus_one = -1;
    cudaMemcpy(in + 300, &minus_one, sizeof minus_one, cudaMemcpyHostToDevice);
    positive<<<(n + 255) / 256, 256>>>(in, n);
  } else if (what[0] == 'c') {
    static int host[1001];
    cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice);  // one int too many
  } else if (what[0] == 'f') {
    cudaFree(in);
    cudaFree(in);
  } else if (what[0] == 'g') {
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaGraph_t g;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    cudaMemsetAsync(out, 0, 1024 * sizeof(int), s);  // runs when the graph runs
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&exec, g, 0);
    cudaFree(out);
    cudaGraphLaunch(exec, s);
  } else {
    float* rows;
    size_t pitch;
    cudaMallocPitch(&rows, &pitch, 50 * sizeof(float), 8);
    static float host[9][50];
    cudaMemcpy2D(host, sizeof host[0], rows, pitch, sizeof host[0], 9, cudaMemcpyDeviceToHost);
  }
  cudaDeviceSynchronize();
  printf("done\n");
  return 0;
}

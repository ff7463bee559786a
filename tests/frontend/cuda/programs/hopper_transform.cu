// CUB's device-wide transform on sm_90a: its Hopper path copies tiles into shared memory
// with cp.async.bulk through an mbarrier (the byte count in a register), elects one lane
// with elect.sync, and brackets its launches with griddepcontrol.
#include <cstdio>
#include <cub/device/device_transform.cuh>
#include <cuda/std/tuple>

struct Axpy {
  __device__ float operator()(float x, float y) const { return 2.0f * x + y; }
};

int main() {
  const int n = 100000;
  float *x, *y, *out;
  cudaMallocManaged(&x, n * sizeof(float));
  cudaMallocManaged(&y, n * sizeof(float));
  cudaMallocManaged(&out, n * sizeof(float));
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000);
    y[i] = static_cast<float>(i % 7);
  }
  cub::DeviceTransform::Transform(cuda::std::make_tuple(x, y), out, n, Axpy{});
  cudaDeviceSynchronize();
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += out[i];
  printf("sum %.1f\n", sum);
  return 0;
}

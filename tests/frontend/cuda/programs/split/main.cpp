// The host half: plain C++ that calls the launching function of kernels.cu.
#include <cstdio>
#include <cstdlib>

void scale_on_device(float* host, float a, int n);

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 10;
  float* x = new float[n];
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  scale_on_device(x, 3.0f, n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += x[i];
  std::printf("sum %.1f\n", sum);
  delete[] x;
  return 0;
}

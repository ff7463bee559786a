// A kernel compiled at run time by NVRTC and run through the driver API: a module loaded
// from the PTX, a __device__ variable set through cuModuleGetGlobal, launches with a
// kernelParams array and with a parameter buffer, copies and sets. With an argument it
// also loads that PTX file (cuModuleLoad) and runs its `scale` kernel; with `overrun` it
// launches over one element more than it allocated; with `cubin` it offers a cubin.
#include <cuda.h>
#include <nvrtc.h>

#include <cstdio>
#include <string>
#include <vector>

#define CHECK(call)                                                                   \
  do {                                                                                \
    CUresult r = (call);                                                              \
    if (r != CUDA_SUCCESS) {                                                          \
      const char* name;                                                               \
      cuGetErrorName(r, &name);                                                       \
      std::printf("%s: %s\n", #call, name);                                           \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

const char* kSource = R"(
__device__ int bias = 7;
extern "C" __global__ void axpb(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i] + bias;
}
)";

int main(int argc, char** argv) {
  nvrtcProgram prog;
  nvrtcCreateProgram(&prog, kSource, "axpb.cu", 0, nullptr, nullptr);
  const char* options[] = {"--gpu-architecture=compute_80", "-lineinfo"};
  if (nvrtcCompileProgram(prog, 2, options) != NVRTC_SUCCESS) {
    std::printf("nvrtc failed\n");
    return 1;
  }
  size_t size;
  nvrtcGetPTXSize(prog, &size);
  std::string ptx(size, '\0');
  nvrtcGetPTX(prog, &ptx[0]);
  nvrtcDestroyProgram(&prog);

  CHECK(cuInit(0));
  if (argc > 1 && std::string(argv[1]) == "cubin") {
    CUmodule cubin;
    const char* name;
    cuGetErrorName(cuModuleLoadData(&cubin, "\x7f" "ELF\x02\x01\x01"), &name);
    std::printf("cubin: %s\n", name);
    return 0;
  }
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, ptx.c_str()));
  CUfunction axpb;
  CHECK(cuModuleGetFunction(&axpb, mod, "axpb"));
  CUfunction none;
  std::printf("missing kernel: %d\n", cuModuleGetFunction(&none, mod, "nope") ==
                                          CUDA_ERROR_NOT_FOUND);

  const int n = 1000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  CUdeviceptr dx, dy, dbias;
  size_t bias_size;
  CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CHECK(cuMemsetD32(dy, 0x3f800000, n));  // 1.0f
  CHECK(cuModuleGetGlobal(&dbias, &bias_size, mod, "bias"));
  int bias;
  CHECK(cuMemcpyDtoH(&bias, dbias, sizeof bias));
  std::printf("bias %d (%zu bytes)\n", bias, bias_size);

  float a = 2.0f;
  int count = argc > 1 && std::string(argv[1]) == "overrun" ? n + 1 : n;
  void* args[] = {&a, &dx, &dy, &count};
  CHECK(cuLaunchKernel(axpb, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr));
  bias = -100;
  CHECK(cuMemcpyHtoD(dbias, &bias, sizeof bias));
  struct { float a; int pad; CUdeviceptr x, y; int n; } packed = {0.5f, 0, dx, dy, n};
  size_t packed_size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &packed_size, CU_LAUNCH_PARAM_END};
  CHECK(cuLaunchKernel(axpb, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  double sum = 0;
  for (float v : y) sum += v;
  std::printf("y[0] %g y[999] %g sum %.1f\n", y[0], y[n - 1], sum);

  if (argc > 1 && count == n) {  // a PTX file from disk
    CUmodule file;
    CHECK(cuModuleLoad(&file, argv[1]));
    CUfunction scale;
    CHECK(cuModuleGetFunction(&scale, file, "scale"));
    float factor = 3.0f;
    void* sargs[] = {&dx, &factor, &count};
    CHECK(cuLaunchKernel(scale, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, sargs, nullptr));
    CHECK(cuMemcpyDtoH(x.data(), dx, n * sizeof(float)));
    std::printf("scaled x[999] %g\n", x[n - 1]);
    CHECK(cuModuleUnload(file));
  }
  CHECK(cuMemFree(dx));
  CHECK(cuMemFree(dy));
  CHECK(cuModuleUnload(mod));
  CHECK(cuDevicePrimaryCtxRelease(dev));
  std::printf("done\n");
  return 0;
}

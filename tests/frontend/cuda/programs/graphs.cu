// CUDA graphs: one captured from two streams (a fork and a join through events, a set, a
// copy from pinned host memory read when the graph runs, a host function), launched
// three times; one built node by node, its kernel's arguments gone before it runs.
#include <cstdio>

__global__ void axpb(float* x, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = a * x[i] + b;
}

__global__ void add(float* x, const float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

void CUDART_CB count(void* calls) { ++*static_cast<int*>(calls); }

// a kernel node whose arguments live on this function's stack only
cudaGraphNode_t add_scale(cudaGraph_t g, const cudaGraphNode_t* after, float* x, int n) {
  float a = 3.0f, b = -1.0f;
  void* args[] = {&x, &a, &b, &n};
  cudaKernelNodeParams p = {};
  p.func = reinterpret_cast<void*>(axpb);
  p.gridDim = dim3((n + 63) / 64);
  p.blockDim = dim3(64);
  p.kernelParams = args;
  cudaGraphNode_t node;
  cudaGraphAddKernelNode(&node, g, after, after ? 1 : 0, &p);
  return node;
}

int main() {
  const int n = 200;
  float *x, *y, *host, *out;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  cudaMallocHost(&host, n * sizeof(float));
  cudaMallocHost(&out, n * sizeof(float));
  int calls = 0;

  cudaStream_t s1, s2;
  cudaStreamCreate(&s1);
  cudaStreamCreate(&s2);
  cudaEvent_t fork, join;
  cudaEventCreate(&fork);
  cudaEventCreate(&join);
  cudaStreamCaptureStatus status;
  cudaGraph_t graph;
  cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal);
  cudaMemcpyAsync(x, host, n * sizeof(float), cudaMemcpyHostToDevice, s1);
  cudaEventRecord(fork, s1);
  cudaStreamWaitEvent(s2, fork, 0);
  cudaStreamIsCapturing(s2, &status);
  std::printf("s2 joined the capture: %d\n", status == cudaStreamCaptureStatusActive);
  cudaMemsetAsync(y, 0, n * sizeof(float), s2);
  axpb<<<(n + 63) / 64, 64, 0, s2>>>(y, 0.0f, 2.0f, n);
  cudaEventRecord(join, s2);
  axpb<<<(n + 63) / 64, 64, 0, s1>>>(x, 2.0f, 1.0f, n);
  cudaStreamWaitEvent(s1, join, 0);
  add<<<(n + 63) / 64, 64, 0, s1>>>(x, y, n);
  cudaLaunchHostFunc(s1, count, &calls);
  cudaMemcpyAsync(out, x, n * sizeof(float), cudaMemcpyDeviceToHost, s1);
  cudaStreamEndCapture(s1, &graph);
  cudaStreamIsCapturing(s2, &status);
  std::printf("captured, nothing ran: calls %d, s2 capturing %d\n", calls,
              status == cudaStreamCaptureStatusActive);

  cudaGraphExec_t exec;
  cudaGraphInstantiate(&exec, graph, 0);
  for (int launch = 0; launch < 3; ++launch) {
    for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i + launch);
    cudaGraphLaunch(exec, s1);
    cudaStreamSynchronize(s1);
    std::printf("launch %d: out[0] %g out[%d] %g calls %d\n", launch, out[0], n - 1,
                out[n - 1], calls);
  }

  // built node by node: set x to 1.0f, scale it, add a child graph's copy, count
  cudaGraph_t built, child;
  cudaGraphCreate(&built, 0);
  cudaGraphCreate(&child, 0);
  cudaGraphNode_t set, scale, copy, nested, host_node;
  cudaMemsetParams ms = {};
  ms.dst = x;
  ms.value = 0x3f800000;  // 1.0f
  ms.elementSize = 4;
  ms.width = n;
  ms.height = 1;
  cudaGraphAddMemsetNode(&set, built, nullptr, 0, &ms);
  scale = add_scale(built, &set, x, n);
  cudaGraphAddMemcpyNode1D(&copy, child, nullptr, 0, out, x, n * sizeof(float),
                           cudaMemcpyDeviceToHost);
  cudaGraphAddChildGraphNode(&nested, built, &scale, 1, child);
  cudaHostNodeParams hp = {count, &calls};
  cudaGraphAddHostNode(&host_node, built, &nested, 1, &hp);
  size_t nodes = 0;
  cudaGraphGetNodes(built, nullptr, &nodes);
  cudaGraphExec_t built_exec;
  cudaGraphInstantiate(&built_exec, built, 0);
  cudaGraphLaunch(built_exec, s2);
  cudaStreamSynchronize(s2);
  std::printf("built: %zu nodes, out[7] %g calls %d\n", nodes, out[7], calls);

  cudaError_t e = cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal);
  std::printf("capture of the legacy stream refused: %d\n", e != cudaSuccess);
  cudaGetLastError();
  cudaGraphExecDestroy(exec);
  cudaGraphExecDestroy(built_exec);
  cudaGraphDestroy(graph);
  cudaGraphDestroy(built);
  cudaGraphDestroy(child);
  std::printf("done: %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}

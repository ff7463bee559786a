// Streams, events and graphs of `tessera run-cuda`'s CUDA runtime (runtime.cpp).
//
// Work issued to a stream runs before the call returns, so any two streams' work is
// ordered as the program issued it: one of the orders a GPU may choose. A stream being
// captured (cudaStreamBeginCapture) records its work into a graph instead, and so does
// a stream that waits on an event recorded in a captured stream (it joins the capture).
// A graph's nodes run in the order they were recorded or added, which respects every
// dependency, since a node can only depend on nodes that exist before it.
#include <chrono>
#include <memory>
#include <vector>

#include "runtime.h"

struct CUstream_st {
  CUgraph_st* capture = nullptr;  // the graph this stream records into, if any
};
struct CUevent_st {
  float ms = 0;                   // when it was recorded, on the CPU's clock
  CUgraph_st* capture = nullptr;  // recorded in a captured stream: waiting on it joins
};
struct CUgraphNode_st {
  TesseraWork work;
};
struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};
struct CUgraphExec_st {
  std::vector<TesseraWork> work;  // a copy: changing the graph later changes no exec
};

namespace {

CUstream_st g_default_stream;  // the legacy and per-thread default streams
std::vector<CUstream_st*>& streams() { static std::vector<CUstream_st*> t; return t; }
thread_local cudaStreamCaptureMode g_capture_mode = cudaStreamCaptureModeGlobal;

CUstream_st* stream_of(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread ? &g_default_stream
                                                                           : s;
}

float now_ms() {
  using namespace std::chrono;
  return duration<float, std::milli>(steady_clock::now().time_since_epoch()).count();
}

cudaError_t run_all(const std::vector<TesseraWork>& work) {
  for (const TesseraWork& w : work) {
    cudaError_t e = w();
    if (e != cudaSuccess) return tessera_fail(e);
  }
  return cudaSuccess;
}

// a node of an explicitly built graph (its dependencies already exist, so adding it
// last keeps the nodes in an order that respects them)
cudaError_t add_node(cudaGraphNode_t* node, cudaGraph_t g, TesseraWork work) {
  if (!node || !g) return tessera_fail(cudaErrorInvalidValue);
  g->nodes.push_back(std::make_unique<CUgraphNode_st>(CUgraphNode_st{std::move(work)}));
  *node = g->nodes.back().get();
  return cudaSuccess;
}

}  // namespace

bool tessera_capturing(cudaStream_t s) { return stream_of(s)->capture != nullptr; }

cudaError_t tessera_issue(cudaStream_t s, TesseraWork work) {
  CUstream_st* stream = stream_of(s);
  if (!stream->capture) return work();
  stream->capture->nodes.push_back(std::make_unique<CUgraphNode_st>(
      CUgraphNode_st{std::move(work)}));
  return cudaSuccess;
}

extern "C" {

// --- streams ---------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new CUstream_st;
  streams().push_back(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned, int) {
  return cudaStreamCreate(s);
}
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0; *greatest = -5; return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::vector<CUstream_st*>& all = streams();
  for (size_t k = 0; k < all.size(); ++k) {
    if (all[k] == s) {
      all.erase(all.begin() + static_cast<long>(k));
      delete s;
      return cudaSuccess;
    }
  }
  return tessera_fail(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamGetFlags(cudaStream_t, unsigned* flags) { *flags = 0; return cudaSuccess; }
cudaError_t cudaStreamGetPriority(cudaStream_t, int* priority) {
  *priority = 0; return cudaSuccess;
}
cudaError_t cudaStreamAttachMemAsync(cudaStream_t, void*, size_t, unsigned) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  CUstream_st* stream = stream_of(s);
  if (e && e->capture && !stream->capture) stream->capture = e->capture;  // joins
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  return tessera_issue(s, [fn, data] { fn(data); return cudaSuccess; });
}
cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t fn, void* data,
                                  unsigned) {
  return tessera_issue(s, [s, fn, data] { fn(s, cudaSuccess, data); return cudaSuccess; });
}

// --- capture ---------------------------------------------------------------------------
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  CUstream_st* stream = stream_of(s);
  if (stream == &g_default_stream || stream->capture)
    return tessera_fail(stream->capture ? cudaErrorIllegalState
                                        : cudaErrorStreamCaptureUnsupported);
  stream->capture = new CUgraph_st;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  CUstream_st* stream = stream_of(s);
  if (!stream->capture) return tessera_fail(cudaErrorIllegalState);
  *g = stream->capture;
  for (CUstream_st* other : streams())  // the streams that joined leave with it
    if (other->capture == *g) other->capture = nullptr;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  *status = tessera_capturing(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* status,
                                     unsigned long long* id, cudaGraph_t* g,
                                     const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                     size_t* ndeps) {
  CUgraph_st* capture = stream_of(s)->capture;
  *status = capture ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  if (id) *id = reinterpret_cast<unsigned long long>(capture);
  if (g) *g = capture;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (ndeps) *ndeps = 0;
  return cudaSuccess;
}
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  cudaStreamCaptureMode old = g_capture_mode;
  g_capture_mode = *mode;
  *mode = old;
  return cudaSuccess;
}

// --- graphs ----------------------------------------------------------------------------
cudaError_t cudaGraphCreate(cudaGraph_t* g, unsigned) { *g = new CUgraph_st; return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) {
  if (nodes)
    for (size_t k = 0; k < *n && k < g->nodes.size(); ++k) nodes[k] = g->nodes[k].get();
  *n = g->nodes.size();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long) {
  if (!exec || !g) return tessera_fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st;
  for (const auto& node : g->nodes) (*exec)->work.push_back(node->work);
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t g,
                                          unsigned long long flags) {
  return cudaGraphInstantiate(exec, g, flags);
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { delete exec; return cudaSuccess; }
cudaError_t cudaGraphUpload(cudaGraphExec_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (!exec) return tessera_fail(cudaErrorInvalidValue);
  return tessera_issue(s, [work = exec->work] { return run_all(work); });
}
cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t*,
                                  size_t) {
  return add_node(node, g, [] { return cudaSuccess; });
}
cudaError_t cudaGraphAddHostNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t*,
                                 size_t, const cudaHostNodeParams* p) {
  cudaHostFn_t fn = p->fn;
  void* data = p->userData;
  return add_node(node, g, [fn, data] { fn(data); return cudaSuccess; });
}
cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t* node, cudaGraph_t g,
                                       const cudaGraphNode_t*, size_t, cudaGraph_t child) {
  std::vector<TesseraWork> work;
  for (const auto& n : child->nodes) work.push_back(n->work);
  return add_node(node, g, [work] { return run_all(work); });
}
cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t*,
                                   size_t, const cudaKernelNodeParams* p) {
  if (p->extra) return tessera_fail(cudaErrorInvalidValue);  // kernelParams only
  TesseraWork work;
  cudaError_t e = tessera_launch_work(p->func, p->gridDim, p->blockDim, p->sharedMemBytes,
                                      p->kernelParams, 0, &work);
  return e == cudaSuccess ? add_node(node, g, std::move(work)) : e;
}
cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t* node, cudaGraph_t g,
                                     const cudaGraphNode_t*, size_t, void* d, const void* s,
                                     size_t n, cudaMemcpyKind k) {
  return add_node(node, g, tessera_copy_work(__builtin_return_address(0),
                                             "cudaGraphAddMemcpyNode1D", d, s, n, k));
}
cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t* node, cudaGraph_t g, const cudaGraphNode_t*,
                                   size_t, const cudaMemsetParams* p) {
  return add_node(node, g, tessera_memset_work(__builtin_return_address(0),
                                               "cudaGraphAddMemsetNode", *p));
}

// --- events: a record notes the CPU's clock -------------------------------------------
cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st; return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  e->capture = stream_of(s)->capture;
  return tessera_issue(s, [e] { e->ms = now_ms(); return cudaSuccess; });
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned) {
  return cudaEventRecord(e, s);
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
// the CPU's time between the two records: what the interpreter took, not a GPU's time
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = b->ms - a->ms; return cudaSuccess;
}

}  // extern "C"

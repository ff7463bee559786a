"""The seed examples of the specification, verbatim.

Each constant is one ``python`` code block of the specification's seed documents, copied
character for character (a ``# noqa`` after a closing quote only silences the linter
for that string). The conformance cases (``cases/graph.py``, ``cases/seeds_mesh.py``)
and ``tests/examples/test_seeds.py`` run them with inputs added. The tile-kernel seeds
are in ``tile_seeds.py``.
"""

#: guide-ch2-programming-model.md, 2.2 Operator Graphs
ATTENTION = '''\
from tessera import op, graph

@graph.module("attention")
def attention(Q, K, V):
    S = op.matmul(Q, K.T)
    A = op.softmax(S)
    return op.matmul(A, V)
'''


#: guide-ch2-programming-model.md, 2.3 Tiles
TILE_SHAPE = '''\
Y = op.matmul(A, B, tile_shape=(128, 128, 64))
'''


#: guide-ch2-programming-model.md, 2.4 Meshes
MESH_72 = '''\
from tessera import dist

# Define a 3D mesh over 72 GPUs: tensor, pipeline, and data parallel axes
mesh = dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))
'''


#: guide-ch2-programming-model.md, 2.5 Shard Specifications
SHARD_1M = '''\
W = dist.tensor(
    shape=(1_000_000, 1_000_000),
    layout=dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp")),
    mesh=mesh,
    dtype="bf16"
)
'''


#: guide-ch1-introduction-updated.md, 1.4 Teaser Example
TEASER_NVL72 = '''\
from tessera import dist

# Create a 72-GPU mesh: 4 (dp) × 9 (tp) × 2 (pp)
mesh = dist.mesh(
    devices=[f"cuda:{i}" for i in range(72)],
    axes=("dp","tp","pp"),
    shape=(4,9,2)
)

# Shard weights across tensor-parallel axis
W = dist.tensor(
    shape=(8192, 8192),
    layout=dist.ShardSpec(partition=("col",), mesh_axes=("tp",)),
    mesh=mesh,
    dtype="fp8_e4m3"
)

# Compute a distributed matmul
Y = gemm(X, W)   # compiler inserts all_gather/reduce_scatter on TP shards
'''


#: overview-and-quickstart.md, Example 3: Distributed Training on Multiple GPUs
TRAINING_STEP = '''\
# Create mesh for distributed execution
mesh = ts.dist.mesh(
    devices=[f"cuda:{i}" for i in range(8)],
    axes=("dp", "tp"),  # Data parallel and tensor parallel
    shape=(4, 2)        # 4-way DP, 2-way TP
)

# Distributed tensor with sharding
W = ts.dist.tensor(
    shape=(8192, 8192),
    layout=ts.ShardSpec(partition=("col",), mesh_axes=("tp",)),
    mesh=mesh,
    dtype="bf16 @accum(f32)"  # BF16 storage, FP32 accumulation
)

@ts.jit
@ts.autodiff
def train_step(x, y, W):
    """Training step with automatic gradient computation"""
    pred = ts.gemm(x, W)  # Automatically handles TP sharding
    loss = ts.mse(pred, y)
    return loss

# Gradients automatically handle distributed communication
grad_W = ts.grad(train_step)(x, y, W)
'''


#: overview-and-quickstart.md, Numerical Policies
POLICY_BARE = '''\
# Explicit precision control
x: Tensor["B", "D", fp8_e4m3 @accum(fp32) @loss_scale(128.0)]
'''


#: programming-model-guide.md, Type System with Policies
POLICY_TYPES = '''\
# Basic types with accumulation policies
x1: ts.Tensor["B", "D", ts.fp8_e4m3 @accum(ts.f32)]
x2: ts.Tensor["B", "D", ts.bf16 @accum(ts.f32) @stochastic_round]
x3: ts.Tensor["B", "D", ts.fp6 @accum(ts.f32) @loss_scale(128.0)]

# Mixed precision computation
@ts.jit
def mixed_precision_gemm(
    A: ts.Tensor["M", "K", ts.fp8_e4m3 @accum(ts.f32)],
    B: ts.Tensor["K", "N", ts.fp8_e4m3 @accum(ts.f32)]
) -> ts.Tensor["M", "N", ts.f32]:
    """FP8 inputs, FP32 accumulation and output"""
    return ts.gemm(A, B)  # Automatic precision handling
'''


#: programming-model-guide.md, Safe Numerical Operations
STABLE_SOFTMAX = '''\
@ts.jit
def numerically_stable_softmax(x: ts.Tensor["B", "S", ts.bf16]) -> ts.Tensor["B", "S", ts.bf16]:
    """Numerically stable softmax with explicit precision control"""
    # Convert to FP32 for stability
    x_f32 = ts.cast(x, ts.f32)
    
    # Safe operations
    x_max = ts.max(x_f32, axis=-1, keepdims=True)
    exp_x = ts.exp(x_f32 - x_max)  # Prevent overflow
    sum_exp = ts.sum(exp_x, axis=-1, keepdims=True)
    
    # Safe division with epsilon
    softmax = exp_x / (sum_exp + 1e-10)
    
    # Cast back to BF16
    return ts.cast(softmax, ts.bf16)
'''  # noqa: W293


#: programming-model-guide.md, Custom Numeric Policies
QUANTIZED_POLICY = '''\
# Define custom precision policy
@ts.precision_policy
class QuantizedPolicy:
    storage = ts.int8
    scale = ts.f32
    compute = ts.f32
    accumulate = ts.f32
    
    def quantize(self, x: ts.f32) -> ts.int8:
        scale = ts.max(ts.abs(x)) / 127.0
        return ts.round(x / scale).astype(ts.int8), scale
    
    def dequantize(self, x: ts.int8, scale: ts.f32) -> ts.f32:
        return x.astype(ts.f32) * scale

# Use custom policy
quantized_weight: ts.Tensor["D", "D", QuantizedPolicy]
'''  # noqa: W293


#: programming-model-guide.md, Basic Autodiff
BASIC_AUTODIFF = '''\
@ts.jit
@ts.autodiff
def loss_function(x, W, b, y_true):
    """Automatic differentiation example"""
    # Forward pass
    y_pred = ts.matmul(x, W) + b
    y_pred = ts.relu(y_pred)
    loss = ts.mse(y_pred, y_true)
    return loss

# Compute gradients
grad_fn = ts.grad(loss_function)
grad_W, grad_b = grad_fn(x, W, b, y_true)
'''


#: programming-model-guide.md, Custom VJP/JVP Rules
CUSTOM_GELU = '''\
@ts.custom_vjp
def custom_gelu(x):
    """GELU with custom backward pass"""
    return 0.5 * x * (1 + ts.tanh(0.79788456 * (x + 0.044715 * x**3)))

def custom_gelu_fwd(x):
    y = custom_gelu(x)
    return y, (x, y)  # Save for backward

def custom_gelu_bwd(saved, grad_output):
    x, y = saved
    # Custom gradient computation
    cdf = 0.5 * (1 + ts.tanh(0.79788456 * (x + 0.044715 * x**3)))
    pdf = ts.exp(-0.5 * x**2) / ts.sqrt(2 * ts.pi)
    grad_input = grad_output * (cdf + x * pdf)
    return grad_input

custom_gelu.defvjp(custom_gelu_fwd, custom_gelu_bwd)
'''


#: programming-model-guide.md, Effect-Aware Autodiff
DISTRIBUTED_LOSS = '''\
@ts.jit
@ts.autodiff
def distributed_loss(x, W):
    """Autodiff with distributed operations"""
    # Forward pass with collective operations
    y = ts.matmul(x, W)
    y = ts.all_gather(y, axis="tp")  # Tensor parallel gather
    loss = ts.sum(y**2)
    
    # Backward automatically inserts reduce_scatter
    return loss

# Gradients handle distributed communication
grad_W = ts.grad(distributed_loss)(x, W)
# Automatically includes reduce_scatter in backward
'''  # noqa: W293


#: programming-model-guide.md, Mesh Construction
MESHES = '''\
# Create various mesh configurations
# Data parallel mesh
dp_mesh = ts.dist.mesh(
    devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3"],
    axes=("dp",),
    shape=(4,)
)

# Tensor parallel mesh
tp_mesh = ts.dist.mesh(
    devices=["cuda:0", "cuda:1"],
    axes=("tp",),
    shape=(2,)
)

# Hybrid mesh (DP + TP + PP)
hybrid_mesh = ts.dist.mesh(
    devices=[f"cuda:{i}" for i in range(16)],
    axes=("dp", "tp", "pp"),
    shape=(4, 2, 2)  # 4-way DP, 2-way TP, 2-way PP
)
'''


#: guide-ch1-introduction-updated.md, table "Key Capabilities at a Glance" (example column)
CAPABILITY_CELLS = {
    "numerics": 'Tensor["B","D", fp8_e4m3 @accum(fp32)]',
    "autodiff": "grad(loss_fn)(W)",
    "ir_stack": 'inspect_ir("tile")',
    "deployment": "@jit(capture_graph=True)",
}

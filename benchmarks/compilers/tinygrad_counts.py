"""tinygrad's column of ``schedule_counts.py``: kernels it launches for each program, and
the time from the Python function to PTX for sm_90 with no GPU.

Runs in ``benchmarks/.env-tinygrad`` (``setup_compiler_envs.sh``), one process per
program: ``python tinygrad_counts.py PROGRAM`` prints one JSON object. tinygrad runs on
its NULL device (kernels are scheduled, lowered and rendered, and launches do nothing)
with its PTX renderer for ``sm_90`` (``DEV=MOCK+NULL:PTX:sm_90``, set below before
tinygrad is imported; the MOCK interface makes the renderer's compiler only fill in the
PTX target and version, where a GPU machine would assemble with nvJitLink). The first
call schedules, lowers and renders every kernel; a warm call finds them in tinygrad's
caches, so compile time = first call − warm call. A small unrelated program runs first,
so the process's one-time set-up (tinygrad's own start-up, its compile worker pool) is
not counted. The kernel count is ``GlobalCounters.kernel_count`` of one warm call.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("DEV", "MOCK+NULL:PTX:sm_90")
os.environ.setdefault("CACHELEVEL", "0")  # no on-disk kernel cache between runs

if __package__:  # imported by the tests, as part of the package
    from .common import arrays, child_main, first_and_warm, transformer_block
else:  # run as a script in the compiler's own environment
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import arrays, child_main, first_and_warm, transformer_block


def programs() -> dict[str, Any]:
    """The programs of ``common.PROGRAMS`` written with tinygrad Tensors."""

    def attention(q: Any, k: Any, v: Any) -> Any:
        return ((q @ k.transpose(-1, -2)) * 0.125).softmax(-1) @ v

    def causal_where(q: Any, k: Any, v: Any, mask: Any) -> Any:
        return mask.where((q @ k.transpose(-1, -2)) * 0.125, -1e9).softmax(-1) @ v

    def causal_additive(q: Any, k: Any, v: Any, bias: Any) -> Any:
        return ((q @ k.transpose(-1, -2)) * 0.125 + bias).softmax(-1) @ v

    def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
        return (x @ w1 + b1).gelu() @ w2 + b2

    def layernorm(x: Any, g: Any, b: Any) -> Any:
        d = x - x.mean(-1, keepdim=True)
        return d / ((d * d).mean(-1, keepdim=True) + 1e-5).sqrt() * g + b

    block = transformer_block(layernorm, attention, mlp)

    return {"attention": attention, "attention_4d": attention, "causal_where": causal_where,
            "causal_additive": causal_additive, "mlp": mlp, "layernorm": layernorm,
            "softmax": lambda x: x.softmax(-1),
            "chain": lambda x: ((x * 2.0 + 1.0).relu() - 0.5).exp() / 3.0, "block": block}


def measure(name: str) -> dict[str, Any]:
    from tinygrad import Tensor
    from tinygrad.codegen import to_program_cache
    from tinygrad.helpers import GlobalCounters
    from tinygrad.uop.ops import Ops

    fn = programs()[name]
    (Tensor.empty(16, 32).softmax(-1) @ Tensor.empty(32, 8)).realize()  # one-time set-up
    args = [Tensor(a).realize() for a in arrays(name)]
    cached = set(to_program_cache)
    times = first_and_warm(lambda: fn(*args).realize())
    GlobalCounters.reset()
    fn(*args).realize()
    sources = [s.arg for key, prg in to_program_cache.items() if key not in cached
               for s in prg.toposort() if s.op is Ops.SOURCE]
    # distinct kernels rendered to PTX (identical kernels, e.g. the Q, K and V
    # projections, are rendered once) and how many of them use mma.sync
    return {"kernels": GlobalCounters.kernel_count, **times, "ptx_kernels": len(sources),
            "mma": sum("mma.sync" in s for s in sources)}


def version() -> str:
    from importlib.metadata import version as dist_version

    return f"tinygrad {dist_version('tinygrad')}"


if __name__ == "__main__":
    child_main(measure, version())

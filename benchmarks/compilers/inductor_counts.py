"""``torch.compile`` (Inductor, CPU)'s column of ``schedule_counts.py``: the kernels its
generated program launches for each program, and its compile time.

Runs in ``benchmarks/.env-inductor`` (``setup_compiler_envs.sh``), one process per
program: ``python inductor_counts.py PROGRAM`` prints one JSON object. The count is
read from the Python wrapper Inductor generates (``run_and_get_code``): each call of a
generated C++ kernel (``cpp_fused_*``) and each library call it keeps (``extern_kernels.*``
such as ``addmm`` and ``bmm``, or an ATen op such as the CPU flash-attention kernel its
pattern matcher maps attention onto) is one kernel launch. Compile time = first call −
median of three warm calls. A small unrelated program is compiled first, so the
process's one-time set-up (Dynamo, the C++ toolchain's headers) is not counted; Inductor's
caches live in a fresh directory per run (``TORCHINDUCTOR_CACHE_DIR``, set by the driver)
and its FX graph cache is off, so every program is compiled from scratch. One thread
for both compiling and running (two cores are shared here).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

if __package__:  # imported by the tests, as part of the package
    from .common import arrays, child_main, first_and_warm, timed, transformer_block
else:  # run as a script in the compiler's own environment
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import arrays, child_main, first_and_warm, timed, transformer_block

#: a launch in the generated wrapper: a generated kernel, a library call or an ATen op
GENERATED = re.compile(r"^\s+(?:\w+ = )?(cpp_fused_\w+)\(", re.M)
LIBRARY = re.compile(r"^\s+(?:\w+ = )?(extern_kernels\.\w+|torch\.ops\.[\w.]+)\(", re.M)


def programs() -> dict[str, Any]:
    """The programs of ``common.PROGRAMS`` written with torch tensors."""
    import torch
    import torch.nn.functional as F

    def attention(q: Any, k: Any, v: Any) -> Any:
        return torch.softmax((q @ k.transpose(-1, -2)) * 0.125, -1) @ v

    def causal_where(q: Any, k: Any, v: Any, mask: Any) -> Any:
        s = torch.where(mask, (q @ k.transpose(-1, -2)) * 0.125, -1e9)
        return torch.softmax(s, -1) @ v

    def causal_additive(q: Any, k: Any, v: Any, bias: Any) -> Any:
        return torch.softmax((q @ k.transpose(-1, -2)) * 0.125 + bias, -1) @ v

    def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
        return F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2

    def layernorm(x: Any, g: Any, b: Any) -> Any:
        d = x - x.mean(-1, keepdim=True)
        return d / torch.sqrt((d * d).mean(-1, keepdim=True) + 1e-5) * g + b

    block = transformer_block(layernorm, attention, mlp)

    return {"attention": attention, "attention_4d": attention, "causal_where": causal_where,
            "causal_additive": causal_additive, "mlp": mlp, "layernorm": layernorm,
            "softmax": lambda x: torch.softmax(x, -1),
            "chain": lambda x: torch.exp(torch.relu(x * 2.0 + 1.0) - 0.5) / 3.0,
            "block": block}


def launches(codes: list[str]) -> tuple[int, int, list[str]]:
    """Generated kernels and library calls in the ``call`` functions of ``codes``."""
    generated = library = 0
    names: list[str] = []
    for code in codes:
        body = code[code.find("def call("):]
        body = body[:body.find("\nrunner = ")] if "\nrunner = " in body else body
        generated += len(GENERATED.findall(body))
        found = LIBRARY.findall(body)
        library += len(found)
        names += found
    return generated, library, names


def measure(name: str) -> dict[str, Any]:
    import torch
    from torch._inductor.utils import run_and_get_code

    torch.set_num_threads(1)
    warm_up = torch.compile(lambda x: torch.tanh(x @ x) * 2.0)
    warm_up(torch.ones(8, 8))  # one-time set-up
    args = [torch.from_numpy(a) for a in arrays(name)]
    compiled = torch.compile(programs()[name])
    first, (_, codes) = timed(lambda: run_and_get_code(compiled, *args))
    times = first_and_warm(lambda: compiled(*args))
    warm = times["warm_s"]
    generated, library, names = launches(codes)
    return {"kernels": generated + library, "first_s": first, "warm_s": warm,
            "compile_s": max(first - warm, 0.0), "generated": generated, "library": library,
            "library_calls": sorted(set(names))}


def version() -> str:
    import torch

    return f"torch {torch.__version__} (Inductor, CPU)"


if __name__ == "__main__":
    child_main(measure, version())

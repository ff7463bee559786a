"""JAX (XLA on the CPU)'s column of ``schedule_counts.py``: the kernels of each program's
optimized HLO, and its compile time.

Runs in ``benchmarks/.env-jax`` (``setup_compiler_envs.sh``), one process per program:
``python jax_counts.py PROGRAM`` prints one JSON object. The count is read from
``jax.jit(f).lower(*args).compile().as_text()``: every instruction of the entry
computation that runs code (a fusion, or an op XLA left unfused such as a ``dot`` or a
``copy``) is one kernel; parameters, constants, tuples and bitcasts are not. Compile
time = first call − median of three warm calls (and, beside it, the time of
``lower(...).compile()`` alone). A small unrelated program is compiled first, so the
process's one-time set-up is not counted.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

if __package__:  # imported by the tests, as part of the package
    from .common import arrays, child_main, first_and_warm, timed, transformer_block
else:  # run as a script in the compiler's own environment
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import arrays, child_main, first_and_warm, timed, transformer_block

#: ``%name = TYPE opcode(...)`` in HLO text; the lazy match stops at the first opcode
INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%\S+ = .*? ([a-z][a-z0-9-]*)\(", re.M)
NO_CODE = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}


def programs() -> dict[str, Any]:
    """The programs of ``common.PROGRAMS`` written with ``jax.numpy``."""
    import jax
    import jax.numpy as jnp

    def attention(q: Any, k: Any, v: Any) -> Any:
        return jax.nn.softmax((q @ jnp.swapaxes(k, -1, -2)) * 0.125, -1) @ v

    def causal_where(q: Any, k: Any, v: Any, mask: Any) -> Any:
        s = jnp.where(mask, (q @ jnp.swapaxes(k, -1, -2)) * 0.125, -1e9)
        return jax.nn.softmax(s, -1) @ v

    def causal_additive(q: Any, k: Any, v: Any, bias: Any) -> Any:
        return jax.nn.softmax((q @ jnp.swapaxes(k, -1, -2)) * 0.125 + bias, -1) @ v

    def mlp(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
        return jax.nn.gelu(x @ w1 + b1, approximate=True) @ w2 + b2

    def layernorm(x: Any, g: Any, b: Any) -> Any:
        d = x - x.mean(-1, keepdims=True)
        return d / jnp.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * g + b

    block = transformer_block(layernorm, attention, mlp)

    return {"attention": attention, "attention_4d": attention, "causal_where": causal_where,
            "causal_additive": causal_additive, "mlp": mlp, "layernorm": layernorm,
            "softmax": lambda x: jax.nn.softmax(x, -1),
            "chain": lambda x: jnp.exp(jax.nn.relu(x * 2.0 + 1.0) - 0.5) / 3.0,
            "block": block}


def entry_ops(hlo: str) -> Counter[str]:
    """Opcodes of the entry computation's instructions that run code."""
    entry = hlo[hlo.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    return Counter(op for op in INSTRUCTION.findall(entry) if op not in NO_CODE)


def measure(name: str) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    jax.jit(lambda x: jnp.tanh(x @ x) * 2.0)(jnp.ones((8, 8))).block_until_ready()
    args = [jnp.asarray(a) for a in arrays(name)]
    fn = programs()[name]
    jitted = jax.jit(fn)
    times = first_and_warm(lambda: jitted(*args).block_until_ready())
    jax.clear_caches()  # so that lower(...).compile() compiles afresh
    lower_compile, compiled = timed(lambda: jax.jit(fn).lower(*args).compile())
    ops = entry_ops(compiled.as_text())
    return {"kernels": sum(ops.values()), **times, "fusions": ops.get("fusion", 0),
            "lower_compile_s": lower_compile,
            "unfused": {k: v for k, v in sorted(ops.items()) if k != "fusion"}}


def version() -> str:
    import jax
    import jaxlib

    return f"JAX {jax.__version__}, jaxlib {jaxlib.__version__} (XLA, CPU)"


if __name__ == "__main__":
    child_main(measure, version())

"""Record what the GPU's tensor cores return for crafted operands, against the model.

The Target IR interpreter's golden convention sums one ``mma.sync``/``wgmma`` step
exactly and rounds once; ``tensor_cores="hopper"`` (:mod:`tessera.arch.mma_hopper`) is
what an H200 was measured to do instead (Fasi, Higham, Mikaitis and Pranesh, "Numerical
behavior of NVIDIA tensor cores", PeerJ CS 2021, describe the kind of rule). This
script launches GEMMs through ``ts.launch(..., backend="cuda")`` on operands chosen to
expose the rule: products spread over many binades, large terms that cancel, and K of
one to sixteen steps (so chained accumulation shows); bf16 and f16 on both targets,
e4m3 and e5m2 on sm_90a, e4m3 through sm_89's ``mma.sync``. For each case it prints
the share of outputs the model predicts bit for bit, and it saves operands and results
to one ``.npz`` for fitting what the model does not cover yet (e5m2 and e4m3
``mma.sync`` are unmeasured).

    python benchmarks/tensorcore_probe.py OUT.npz            # on a GPU machine
    python benchmarks/tensorcore_probe.py OUT.npz --dry      # Target IR interpreter, small
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tessera as ts  # noqa: E402
from tessera.arch import mma_hopper  # noqa: E402
from tessera.conformance.kernels.fp8_gemm import fp8_gemm  # noqa: E402
from tessera.conformance.kernels.gemm import gemm  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from probe_kernels import gemm_e5m2, gemm_f16  # noqa: E402

BF16 = ml_dtypes.bfloat16
#: (target, tile): sm_80 lowers to mma.sync m16n8k16, sm_90a to wgmma m64nNk16
CONFIGS = [("sm_80", (64, 64, 16)), ("sm_90a", (64, 64, 64))]
KS = (16, 32, 64, 128)


def operands(kind: str, m: int, n: int, k: int, rng: np.random.Generator,
             fmt: type = BF16, span: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Operands of one distribution in ``fmt``: ``normal``; ``wide`` (magnitudes over
    2^-span..2^span, so products span 4 * span binades); ``cancel`` (one large term per
    dot product and its negation, beside small ones: what survives the alignment
    shows)."""
    if kind == "normal":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    elif kind == "wide":
        a = rng.choice([-1, 1], (m, k)) * np.exp2(rng.integers(-span, span + 1, (m, k))) \
            * (1 + rng.random((m, k)))
        b = rng.choice([-1, 1], (k, n)) * np.exp2(rng.integers(-span, span + 1, (k, n))) \
            * (1 + rng.random((k, n)))
    else:
        a = rng.standard_normal((m, k)) * 2.0 ** -(span - 2)
        b = rng.standard_normal((k, n))
        big = np.exp2(rng.integers(0, span + 2, m)) * (1 + rng.random(m))
        a[:, 0], a[:, 1] = big, -big
        b[1, :] = b[0, :]
    return a.astype(fmt), b.astype(fmt)


#: format -> (kernel, NumPy type, whether B is passed N x K, K of one step, operand span)
KERNELS: dict[str, tuple[Any, type, bool, int, int]] = {
    "bf16": (gemm, BF16, False, 16, 12), "f16": (gemm_f16, np.float16, False, 16, 6),
    "e4m3": (fp8_gemm, ml_dtypes.float8_e4m3fn, True, 32, 4),
    "e5m2": (gemm_e5m2, ml_dtypes.float8_e5m2, True, 32, 6),
}
#: (format, target, tile, K, distribution), what the model does not cover first: a run
#: out of time (--budget) leaves out cases it already predicts
CASES = (
    # e4m3 mma.sync (sm_89 code; on a Hopper it runs as sm_90a): the model's e4m3 rule
    # was measured through wgmma, and mma.sync keeps more bits
    [("e4m3", "sm_89", (64, 64, 32), k, kind)
     for k, kind in [(32, "normal"), (32, "wide"), (32, "cancel"), (128, "normal")]]
    + [(fmt, "sm_90a", (64, 64, min(k, 128)), k, kind) for fmt in ("e5m2", "e4m3")
       for k, kind in [(32, "normal"), (32, "wide"), (32, "cancel"), (64, "wide"),
                       (128, "normal"), (256, "normal")]]
    + [(fmt, target, tile, k, kind) for fmt in ("bf16", "f16")
       for target, tile in CONFIGS for k in KS for kind in ("normal", "wide", "cancel")])


def predicted(fmt: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What :mod:`tessera.arch.mma_hopper` predicts: steps in ascending k, the f32
    accumulator between them (``b`` is K x N)."""
    step = KERNELS[fmt][3]
    acc = np.zeros((a.shape[0], b.shape[1]))
    for s in range(0, a.shape[1], step):
        acc = mma_hopper.mma(a[:, s:s + step], b[s:s + step], acc, fmt)
        acc = acc.astype(np.float32).astype(np.float64)
    return acc.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the .npz to write")
    parser.add_argument("--dry", action="store_true",
                        help="run on the Target IR interpreter, small shapes (no GPU)")
    parser.add_argument("--budget", type=float, default=float("inf"),
                        help="seconds after which no new case starts (the .npz is "
                             "written at the end, so a run cut off from outside keeps "
                             "nothing)")
    opts = parser.parse_args()
    began = time.perf_counter()
    backend, size = ("target", 64) if opts.dry else ("cuda", 256)
    rng = np.random.default_rng(2024)
    saved: dict[str, np.ndarray] = {}
    cases = CASES if not opts.dry else [c for c in CASES if c[3] <= 32 and c[4] != "wide"]
    for fmt, target, tile, k, kind in cases:
        if time.perf_counter() - began > opts.budget:
            print(f"budget of {opts.budget:.0f} s spent: the remaining cases are left out")
            break
        kernel, dtype, transposed, _, span = KERNELS[fmt]
        a, b = operands(kind, size, size, k, rng, dtype, span)
        bt = np.ascontiguousarray(b.T) if transposed else b
        c = np.zeros((size, size), np.float32)
        key = f"{target}_{fmt}_k{k}_{kind}"
        t0 = time.perf_counter()
        try:
            ts.launch(kernel, None, (a, bt, c), backend=backend, target=target,
                      tile_shape=tile)
        except Exception as exc:  # one format the backend refuses must not stop the rest
            print(f"{key}: {type(exc).__name__}: {exc}"[:300], flush=True)
            continue
        saved[key + "_a"], saved[key + "_b"], saved[key + "_c"] = a, bt, c
        same = float((predicted(fmt, a, b) == c).mean())
        print(f"{key}: {time.perf_counter() - t0:.2f} s, the Hopper model predicts "
              f"{same:.2%} of the outputs", flush=True)
    np.savez_compressed(opts.out, **{k: v.view(np.uint8) if v.dtype.itemsize == 1 else
                                     v.view(np.uint16) if v.dtype.itemsize == 2 else v
                                     for k, v in saved.items()})
    print(f"wrote {len(saved) // 3} cases to {opts.out}")


if __name__ == "__main__":
    main()

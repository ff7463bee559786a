"""Record what the GPU's tensor cores return for crafted bf16/fp8 products, to model them.

The Target IR interpreter models one ``mma.sync``/``wgmma`` as the exact sum of its
products and accumulator rounded once to f32. Hardware aligns the products to the
largest exponent and keeps a limited number of bits (Fasi, Higham, Mikaitis and
Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021). This script runs
the example GEMM through ``ts.launch(..., backend="cuda")`` on inputs chosen to expose
that: products spread over many binades, large terms that cancel, and K of one to
eight instructions (so chained accumulation shows), on both targets, and saves the
operands with the GPU's results to one ``.npz`` for offline fitting.

    python benchmarks/tensorcore_probe.py OUT.npz            # on a GPU machine
    python benchmarks/tensorcore_probe.py OUT.npz --dry      # Target IR interpreter, small
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tessera as ts  # noqa: E402
from tessera.conformance.kernels.fp8_gemm import fp8_gemm  # noqa: E402
from tessera.conformance.kernels.gemm import gemm  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the .npz to write")
    parser.add_argument("--dry", action="store_true",
                        help="run on the Target IR interpreter, small shapes (no GPU)")
    opts = parser.parse_args()
    backend, size = ("target", 64) if opts.dry else ("cuda", 256)
    rng = np.random.default_rng(2024)
    saved: dict[str, np.ndarray] = {}
    for target, tile in CONFIGS:
        for k in KS if not opts.dry else KS[:2]:
            for kind in ("normal", "wide", "cancel"):
                a, b = operands(kind, size, size, k, rng)
                c = np.zeros((size, size), np.float32)
                t0 = time.perf_counter()
                ts.launch(gemm, None, (a, b, c), backend=backend, target=target,
                          tile_shape=tile)
                key = f"{target}_k{k}_{kind}"
                saved[key + "_a"], saved[key + "_b"], saved[key + "_c"] = a, b, c
                print(f"{key}: {time.perf_counter() - t0:.2f} s", flush=True)
    fp8_cases = [(32, "normal"), (32, "wide"), (32, "cancel"), (64, "wide"), (128, "normal"),
                 (256, "normal")]
    for k, kind in fp8_cases if not opts.dry else fp8_cases[:2]:  # e4m3 wgmma (sm_90a)
        a, b = operands(kind, size, size, k, rng, ml_dtypes.float8_e4m3fn, span=4)
        bt = np.ascontiguousarray(b.T)
        c = np.zeros((size, size), np.float32)
        try:
            ts.launch(fp8_gemm, None, (a, bt, c), backend=backend, target="sm_90a",
                      tile_shape=(64, 64, min(k, 128)))
        except Exception as exc:  # the fp8 probe is optional
            print(f"fp8 k={k}: {type(exc).__name__}: {exc}"[:300])
            continue
        key = f"sm_90a_k{k}_{kind}_fp8"  # B saved transposed, as the kernel takes it
        saved[key + "_a"], saved[key + "_b"], saved[key + "_c"] = a, bt, c
        print(f"{key}: done", flush=True)
    np.savez_compressed(opts.out, **{k: (v.view(np.uint8) if v.dtype.itemsize == 1
                                          and v.dtype != np.uint8 else
                                          v.view(np.uint16) if v.dtype == BF16 else v)
                                     for k, v in saved.items()})
    print(f"wrote {len(saved) // 3} cases to {opts.out}")


if __name__ == "__main__":
    main()

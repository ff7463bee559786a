"""The explain page of the quick-start training step on a 2x2 mesh (Example 3).

``x`` and ``y`` are split over the data-parallel axis ``dp``, ``W`` over the
tensor-parallel axis ``tp`` by columns, as the seed shards it. The page shows the
step's Graph and Schedule IR (drawn), the levels below it as far as they lower, and
which device holds which block of each argument and of the loss.

Run: ``python examples/explain/training_step_page.py [out.html]``
"""

import sys
from pathlib import Path

import numpy as np

import tessera as ts
from tessera.explain import write_page


@ts.jit
@ts.autodiff
def train_step(x, y, W):
    """Training step with automatic gradient computation"""
    pred = ts.gemm(x, W)
    loss = ts.mse(pred, y)
    return loss


def main(out: str = "build/explain/training_step.html") -> Path:
    rng = np.random.default_rng(5)
    mesh = ts.dist.mesh(axes=("dp", "tp"), shape=(2, 2))
    x = ts.dist.from_numpy(rng.standard_normal((32, 64)).astype(np.float32), mesh=mesh,
                           layout=ts.ShardSpec(("row",), ("dp",)))
    y = ts.dist.from_numpy(rng.standard_normal((32, 16)).astype(np.float32), mesh=mesh,
                           layout=ts.ShardSpec(("row",), ("dp",)))
    W = ts.dist.from_numpy(rng.standard_normal((64, 16)).astype(np.float32) * 0.1,
                           mesh=mesh, layout=ts.ShardSpec(("col",), ("tp",)))
    return write_page(train_step, out, x=x, y=y, W=W)


if __name__ == "__main__":
    print(main(*sys.argv[1:]))

"""Static performance estimate of lowered Target IR: per main-loop iteration and per
launch, on the SM constants of one GPU (docs/ptx-backend.md, "Static performance
estimate", gives the model, its sources and its limits).

* ``threads``: which thread ids run a ``ptx.if`` region (warp-specialised kernels);
* ``trips``: loop trip counts from index arithmetic on ``ctaid`` and ``tid.x``;
* ``census``: what one CTA issues (warp instructions by pipe, tensor FLOPs, bytes,
  barriers and waits), per loop iteration;
* ``hardware``: H100 SXM and A100 SXM rates, limits and latencies, with sources;
* ``model``: the iteration's critical path, occupancy and the launch's time;
* ``kernel``: ``estimate(kernel)``, ``estimate_census`` and ``format_estimate``;
* ``ptx_text``: the census read from PTX text, for kernels that exist only as PTX.
"""

from tessera.backend.ptx.estimate.hardware import A100_SXM, DEVICES, H100_SXM, SMHardware
from tessera.backend.ptx.estimate.kernel import (
    LaunchEstimate,
    estimate,
    estimate_census,
    estimate_compiled,
    format_estimate,
    hot_loop,
)

__all__ = ["A100_SXM", "DEVICES", "H100_SXM", "LaunchEstimate", "SMHardware", "estimate",
           "estimate_census", "estimate_compiled", "format_estimate", "hot_loop"]

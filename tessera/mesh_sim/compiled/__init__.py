"""Graph functions placed on a mesh, compiled per device: the fused kernels of each
device's blocks with the collectives between them (docs/schedule.md, "On a mesh").

* :mod:`.partials` evaluates exact partial sums where the mesh simulator does: after
  the collective that completes them, on operands gathered for them;
* :mod:`.localize` gives each device's local types and its graph function of a segment
  between collectives;
* :mod:`.program` schedules and generates each segment per group of devices with equal
  block shapes (:func:`mesh_program`);
* :mod:`.run` runs every device's kernels (tile simulator or Target IR interpreter) and
  the collectives through the mesh simulator (:func:`run_mesh_program`).
"""

from __future__ import annotations

from tessera.mesh_sim.compiled.program import (
    DeviceProgram,
    MeshProgram,
    Segment,
    Step,
    mesh_program,
)
from tessera.mesh_sim.compiled.run import run_mesh_program

__all__ = ["DeviceProgram", "MeshProgram", "Segment", "Step", "mesh_program",
           "run_mesh_program"]

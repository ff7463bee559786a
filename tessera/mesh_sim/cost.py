"""The cost model: alpha-beta collectives and a roofline for compute.

Collective formulas (``n`` ranks, ``S`` bytes per rank as nccl-tests counts them:
the buffer an all-reduce reduces, the *output* of an all-gather, the *input* of a
reduce-scatter, the send buffer of an all-to-all; ``a`` latency, ``B`` bus bandwidth):

==========================  ==================================================
ring all-reduce             ``2(n-1)a + 2(n-1)/n * S/B``
tree all-reduce             ``2 ceil(log2 n) a + 2 S/B``
in-switch (NVLS) all-reduce ``2 a_hop + 2(n-1)/n * S/B_nvls``
ring all-gather             ``(n-1)a + (n-1)/n * S/B``
ring reduce-scatter         ``(n-1)a + (n-1)/n * S/B``
all-to-all (switch)         ``a_hop + (n-1)/n * S/B``
ring broadcast              ``(n-1)a + S/B``
send/recv                   ``a_hop + S/B``
==========================  ==================================================

The *bus bandwidth* of a run is ``factor * S / t`` with nccl-tests' factors
(:data:`BUS_FACTOR`); for large ``S`` every ring formula's bus bandwidth tends to ``B``.
Compute time is a roofline: ``max(tensor_flops/peak + other_flops/vector_peak,
bytes/hbm_bw)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tessera.mesh_sim.errors import MeshError
from tessera.mesh_sim.topology import Topology, topology


def ring_all_reduce(n: int, s: float, alpha: float, bw: float) -> float:
    """Seconds for a ring all-reduce of ``s`` bytes over ``n`` ranks."""
    return 0.0 if n <= 1 else 2 * (n - 1) * alpha + 2 * (n - 1) / n * s / bw


def tree_all_reduce(n: int, s: float, alpha: float, bw: float) -> float:
    """Seconds for a (double binary) tree all-reduce: depth ``ceil(log2 n)`` each way."""
    return 0.0 if n <= 1 else 2 * math.ceil(math.log2(n)) * alpha + 2 * s / bw


def nvls_all_reduce(n: int, s: float, hop: float, bw: float) -> float:
    """Seconds for an all-reduce reduced in the switch: one hop up, one hop down."""
    return 0.0 if n <= 1 else 2 * hop + 2 * (n - 1) / n * s / bw


def ring_all_gather(n: int, s: float, alpha: float, bw: float) -> float:
    """Seconds for a ring all-gather producing ``s`` bytes on every rank."""
    return 0.0 if n <= 1 else (n - 1) * alpha + (n - 1) / n * s / bw


def ring_reduce_scatter(n: int, s: float, alpha: float, bw: float) -> float:
    """Seconds for a ring reduce-scatter of ``s`` input bytes per rank."""
    return ring_all_gather(n, s, alpha, bw)


def switch_all_to_all(n: int, s: float, hop: float, bw: float) -> float:
    """Seconds for an all-to-all of ``s`` bytes per rank through a non-blocking switch."""
    return 0.0 if n <= 1 else hop + (n - 1) / n * s / bw


def ring_broadcast(n: int, s: float, alpha: float, bw: float) -> float:
    """Seconds for a pipelined ring broadcast of ``s`` bytes."""
    return 0.0 if n <= 1 else (n - 1) * alpha + s / bw


def send_recv(s: float, hop: float, bw: float) -> float:
    """Seconds for one point-to-point transfer of ``s`` bytes."""
    return hop + s / bw


#: nccl-tests' bus-bandwidth factors (busbw = factor * algbw), per collective.
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
ALIASES = {"ppermute": "send_recv", "send": "send_recv", "recv": "send_recv",
           "shift": "send_recv", "allreduce": "all_reduce", "allgather": "all_gather"}


@dataclass(frozen=True)
class CommCost:
    """The modelled cost of one collective: ``seconds`` and the bandwidths it implies."""

    kind: str
    algorithm: str
    n: int
    nbytes: float
    seconds: float

    @property
    def algbw(self) -> float:
        """Algorithm bandwidth, ``S / t`` in bytes/s (0 for a free operation)."""
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def busbw(self) -> float:
        """Bus bandwidth, ``factor * S / t`` in bytes/s (nccl-tests' convention)."""
        return BUS_FACTOR[self.kind](self.n) * self.algbw if self.n > 1 else 0.0


@dataclass(frozen=True)
class ComputeCost:
    """The roofline cost of one piece of compute."""

    flops: float
    tensor_flops: float
    nbytes: float
    family: str
    seconds: float
    bound: str  # "compute" or "memory"


class CostModel:
    """Costs on a :class:`Topology` (``"nvl72"``, ``"h100"`` or a Topology)."""

    def __init__(self, topo: Any = "nvl72") -> None:
        self.topology: Topology = topology(topo)

    def algorithms(self, kind: str) -> tuple[str, ...]:
        """The algorithms the model knows for a collective on this topology."""
        kind = ALIASES.get(kind, kind)
        if kind == "all_reduce":
            return ("ring", "tree", "nvls") if self.topology.nvls_bw else ("ring", "tree")
        if kind in ("all_to_all", "send_recv"):
            return ("switch",)
        if kind in BUS_FACTOR:
            return ("ring",)
        raise MeshError(f"the cost model knows no collective {kind!r}",
                        hint=f"use one of {sorted(BUS_FACTOR)}")

    def collective(self, kind: str, nbytes: float, n: int,
                   algorithm: str | None = None) -> CommCost:
        """The cost of a collective of ``nbytes`` per rank over ``n`` ranks.

        Without ``algorithm`` an all-reduce uses the topology's calibrated algorithm
        (``Topology.all_reduce_algorithm``: the one its measured bandwidth came from);
        ``algorithm="best"`` takes the fastest the model knows.
        """
        kind = ALIASES.get(kind, kind)
        names = self.algorithms(kind)
        if algorithm is None:
            algorithm = self.topology.all_reduce_algorithm if kind == "all_reduce" \
                else names[0]
        if algorithm != "best" and algorithm not in names:
            raise MeshError(f"no algorithm {algorithm!r} for {kind} on "
                            f"{self.topology.name}", hint=f"use one of {names} or 'best'")
        costs = [CommCost(kind, a, n, nbytes, self._seconds(kind, a, n, nbytes))
                 for a in (names if algorithm == "best" else [algorithm])]
        return min(costs, key=lambda c: c.seconds)

    def _seconds(self, kind: str, algorithm: str, n: int, s: float) -> float:
        t = self.topology
        if kind == "all_reduce":
            if algorithm == "nvls":
                return nvls_all_reduce(n, s, t.hop_latency, t.nvls_bw or t.bus_bw)
            fn = ring_all_reduce if algorithm == "ring" else tree_all_reduce
            return fn(n, s, t.alpha, t.bus_bw)
        if kind == "all_to_all":
            return switch_all_to_all(n, s, t.hop_latency, t.bus_bw)
        if kind == "send_recv":
            return send_recv(s, t.hop_latency, t.bus_bw)
        table = {"all_gather": ring_all_gather, "reduce_scatter": ring_reduce_scatter,
                 "broadcast": ring_broadcast}
        return table[kind](n, s, t.alpha, t.bus_bw)

    def work(self, w: Work) -> ComputeCost:
        """Roofline cost of a :class:`Work`."""
        return self.compute(w.flops, w.nbytes, w.family, w.tensor_flops)

    def compute(self, flops: float, nbytes: float, family: str = "fp32",
                tensor_flops: float = 0.0) -> ComputeCost:
        """Roofline seconds for ``flops`` (of which ``tensor_flops`` run on tensor cores
        at the ``family`` peak, the rest at the f32 vector peak) moving ``nbytes``."""
        dev = self.topology.device
        other = max(flops - tensor_flops, 0.0)
        math_s = tensor_flops / dev.peak_for(family) + other / dev.peak_for("fp32")
        mem_s = nbytes / dev.hbm_bw
        return ComputeCost(flops, tensor_flops, nbytes, family, max(math_s, mem_s),
                           "compute" if math_s >= mem_s else "memory")


def family_of(dtype_name: str) -> str:
    """The roofline family of a tessera storage format name."""
    if dtype_name in ("bf16", "f16"):
        return "bf16"
    if dtype_name.startswith("fp8"):
        return "fp8"
    if dtype_name.startswith("fp6"):
        return "fp6"  # Blackwell runs FP6 at the FP8 rate (NVIDIA lists "FP8/FP6")
    if dtype_name.startswith("fp4"):
        return "fp4"
    return {"tf32": "tf32", "f64": "fp64"}.get(dtype_name, "fp32")


@dataclass(frozen=True)
class Work:
    """What a piece of compute does: FLOPs (``tensor_flops`` of them in matmuls), the
    bytes it must move through HBM, and the format family of its matmuls."""

    flops: float = 0.0
    tensor_flops: float = 0.0
    nbytes: float = 0.0
    family: str = "fp32"

    def scaled(self, k: float) -> Work:
        """The same work ``k`` times over (a backward pass is about twice a forward)."""
        return Work(self.flops * k, self.tensor_flops * k, self.nbytes * k, self.family)


_FREE_OPS = {"graph.constant", "graph.return", "graph.broadcast", "graph.reshape",
             "graph.transpose", "graph.yield"}


def graph_work(function: Any) -> Work:
    """The work of a Graph IR function: ``2*M*N*K`` per matmul, one FLOP per element
    of every other op's largest operand or result; bytes as if the whole function were
    one fused kernel (arguments read once, results written once)."""
    from tessera.ir.core import walk
    from tessera.numerics import storage_of

    def size(t: Any) -> int:
        return int(getattr(t, "size", 0) or 0)

    def nbytes(t: Any) -> int:
        return size(t) * storage_of(t.element).np_dtype.itemsize

    flops = tensor = 0.0
    families = []
    for instr in walk(function):
        name = instr.op.name
        if name in _FREE_OPS:
            continue
        types = [v.type for v in instr.operands] + [v.type for v in instr.results]
        if name == "graph.matmul":
            a, b = (v.type for v in instr.operands)
            work = 2.0 * size(instr.results[0].type) * a.shape[-1]
            tensor += work
            flops += work
            fams = {family_of(storage_of(t.element).name) for t in (a, b)}
            families.append(fams.pop() if len(fams) == 1 else "fp32")
        else:
            flops += max((size(t) for t in types), default=0)
    moved = sum(nbytes(a.type) for a in function.args) + \
        sum(nbytes(t) for t in function.result_types)
    family = min(families, key=_WIDTH.index) if families else "fp32"
    return Work(flops, tensor, float(moved), family)


_WIDTH = ["fp64", "fp32", "tf32", "bf16", "fp8", "fp6", "fp4"]


def call_work(fn: Any, *args: Any) -> Work:
    """The work of calling ``fn(*args)``: from its Graph IR for a ``@ts.jit`` function
    (traced once per signature, from the cache after), else only the bytes of the
    arguments (an opaque function is taken as memory-bound)."""
    from tessera.frontend.graph.jit import JitFunction

    if isinstance(fn, JitFunction):
        return graph_work(fn.compile(*args).function)
    import numpy as np

    return Work(nbytes=float(sum(np.asarray(a).nbytes for a in args)))


__all__ = ["ALIASES", "BUS_FACTOR", "CommCost", "ComputeCost", "CostModel", "Work",
           "call_work", "family_of", "graph_work",
           "nvls_all_reduce", "ring_all_gather", "ring_all_reduce", "ring_broadcast",
           "ring_reduce_scatter", "send_recv", "switch_all_to_all", "tree_all_reduce"]

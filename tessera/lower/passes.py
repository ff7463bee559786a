"""The lowering as passes of the pass manager: ``lower-ptx-sm80`` and
``lower-ptx-sm90a`` turn every ``tile.kernel`` of a module into a ``ptx.kernel``
(checked by the Target IR verifier and the ordering rules), so Tile IR text goes to
Target IR text with ``tessera opt FILE.tir --passes lower-ptx-sm90a``."""

from __future__ import annotations

from tessera.ir.core import Module
from tessera.ir.dialects.target.check import check_kernel
from tessera.ir.dialects.tile import KERNEL
from tessera.ir.passes import register_pass


class _LowerToPtx:
    target = ""

    def apply(self, module: Module) -> Module:
        from tessera.lower.core import lower_kernel

        out = Module(module.name)
        for fn in module.functions.values():
            if fn.kind == KERNEL:
                fn = lower_kernel(fn, self.target)
                check_kernel(fn)
            out.add(fn)
        return out


@register_pass
class LowerToSm80(_LowerToPtx):
    """Lower tile kernels to Target IR for sm_80 (cp.async, ldmatrix, mma.sync)."""

    name = "lower-ptx-sm80"
    target = "sm_80"


@register_pass
class LowerToSm90a(_LowerToPtx):
    """Lower tile kernels to Target IR for sm_90a (TMA, mbarrier, wgmma)."""

    name = "lower-ptx-sm90a"
    target = "sm_90a"


__all__ = ["LowerToSm80", "LowerToSm90a"]

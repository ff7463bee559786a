"""The Target IR interpreter: PTX semantics bit for bit, thread by thread.

``runner`` runs a ``ptx.kernel`` over a grid; ``state`` and ``regs`` hold the threads'
registers; ``memory_state`` the memories and ``memory_steps`` their loads and stores;
``async_copy`` ``cp.async``, TMA and mbarriers; ``mma`` the matrix ops; ``convert`` and
``numeric`` conversions and arithmetic; ``flow`` control flow. ``cfg`` runs PTX read
from text (:mod:`tessera.ir.text.ptx`) as a control-flow graph over PTX's registers,
with the rules of the instructions other compilers use, is the ``ptx`` subpackage.
"""

from tessera import lazy

__all__ = ["TargetFault", "TensorMapArg", "run_target"]
__getattr__, __dir__ = lazy.attach(__name__, globals(),
                                   lazy.names("tessera.interp.target.runner", *__all__))

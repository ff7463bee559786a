"""The Target IR interpreter: PTX semantics bit by bit, thread by thread (where a GPU
still differs, docs/ptx-backend.md says: tensor-core sums, NaN encodings, atomics order).

``runner`` runs a ``ptx.kernel`` over a grid; ``state`` and ``regs`` hold the threads'
registers; ``memory`` the memories, their loads and stores, ``cp.async``, TMA and
mbarriers; ``mma`` the matrix ops; ``convert``, ``numeric`` and ``approx`` conversions
and arithmetic; ``flow`` control flow; ``schedule`` producer and consumer branches as
coroutines; ``warp`` ``setmaxnreg`` and ``elect.sync``. The ``ptx`` subpackage runs PTX
read from text (:mod:`tessera.ir.text.ptx`) as a control-flow graph over PTX's
registers, with the rules of the instructions other compilers use.
"""

from tessera import lazy

__all__ = ["TargetFault", "TensorMapArg", "run_target"]
__getattr__, __dir__ = lazy.attach(__name__, globals(),
                                   lazy.names("tessera.interp.target.runner", *__all__))

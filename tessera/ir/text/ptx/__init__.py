"""Reading PTX written by any compiler (nvcc, Triton, by hand) into Target IR.

``parse_ptx(text, file)`` returns a :class:`~tessera.ir.text.ptx.module.PtxModule`
whose kernels are :class:`~tessera.ir.dialects.target.cfg.CfgKernel` objects: PTX's
control-flow graph and registers, each instruction as Target IR instructions, run by
:func:`tessera.interp.target.ptx.run.run_cfg`. ``lexer`` splits statements, ``module``
reads directives, kernels and branches (``declarations`` the variables and
parameters), ``context`` builds one instruction's Target IR, ``arith``, ``memory`` and
``hopper`` hold the instruction handlers. Anything not modelled is a
:class:`PtxUnsupportedError` naming the file, line and instruction.
"""

from tessera import lazy

__all__ = ["PtxModule", "PtxSyntaxError", "PtxUnsupportedError", "parse_ptx"]
__getattr__, __dir__ = lazy.attach(__name__, globals(), {
    **lazy.names("tessera.ir.text.ptx.module", "PtxModule", "parse_ptx"),
    **lazy.names("tessera.ir.text.ptx.lexer", "PtxSyntaxError", "PtxUnsupportedError"),
})

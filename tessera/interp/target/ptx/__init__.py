"""Running PTX read from text (:mod:`tessera.ir.text.ptx`): ``run`` executes a
:class:`~tessera.ir.dialects.target.cfg.CfgKernel` as a control-flow graph over PTX's
registers; ``rules`` and ``memory`` hold the step rules of the instructions other
compilers use (:mod:`tessera.ir.dialects.target.ptx_ops`), which the structured
runner registers too. Names load on first use (the runner imports the rule modules).
"""

from tessera import lazy

__all__ = ["CfgMachine", "run_cfg"]
__getattr__, __dir__ = lazy.attach(__name__, globals(),
                                   lazy.names("tessera.interp.target.ptx.run", *__all__))

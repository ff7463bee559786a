"""``tessera run-cuda``: a whole CUDA program on the CPU. Its host code runs natively,
linked with tessera's CUDA runtime (``runtime*.cpp``); each kernel it launches runs from
its PTX in the Target IR interpreter, with every check ``ts.ptx`` makes
(:mod:`tessera.frontend.cuda.build`, :mod:`tessera.frontend.cuda.program`).
"""

"""The autotuner: the cost model and the configuration space (``autotune``), the
validity checks of a configuration for the call's shapes (``bounds``: sure
out-of-bounds accesses; ``regs``: the register estimate) and the search with its
report (``search``)."""

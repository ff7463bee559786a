"""The front ends: Python code into IR.

``graph/`` traces ``@ts.jit`` functions and ``ts.*`` operators into Graph IR and holds
``ts.Tensor``, the concrete value both halves take and return; ``kernel/`` compiles
``@ts.kernel`` bodies into Tile IR and launches them. The kernel half imports three
names from the graph half (``Tensor``, ``annotations_of``, ``refuse_in_trace``); the
graph half never imports the kernel half.
"""

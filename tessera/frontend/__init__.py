"""The front ends: Python code into IR.

``graph/`` traces ``@ts.jit`` functions and ``ts.*`` operators into Graph IR and holds
``ts.Tensor``, the concrete value both halves take and return; ``kernel/`` compiles
``@ts.kernel`` bodies into Tile IR and launches them. The kernel half imports a few
names from the graph half (``Tensor``, ``annotations_of``, ``current_trace``, and
``call_kernel``, which records a kernel called inside a trace as a
``graph.kernel_call``); the graph half never imports the kernel half.
"""

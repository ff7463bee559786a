"""The graph front end: ``@ts.jit`` and the ``ts.*`` operators, traced into Graph IR.

``jit`` (binding, annotation checks with ``jit_args``, the signature cache) traces a
function with ``trace`` (``Trace`` and ``Tracer``); ``ops``, ``linalg`` and ``shapes``
are the operators, one ``graph.*`` op each, run at once on concrete values or recorded
under a trace; ``tensor`` is ``ts.Tensor`` with the Python operators of ``arraylike``;
``pytree`` flattens nested arguments; ``dist_arg`` lets traced code take distributed
values without loading the mesh simulator; ``kernel_call`` records a ``@ts.kernel``
called on traced values as a ``graph.kernel_call``; ``capture`` is
``capture_graph=True``. The public names live in ``tessera``
(``ts.jit``, ``ts.Tensor``, ``ts.matmul``, ...); nothing is imported here, so importing
one module loads only what it needs.
"""

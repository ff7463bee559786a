"""Graph programs on a simulated mesh: placed Graph IR run SPMD on local shards.

* :mod:`.args` -- distributed arguments of traced functions (``DistArg``, defined in
  :mod:`tessera.frontend.graph.dist_arg`) and ``to_dist``;
* :mod:`.layout` -- moving a ``DistTensor`` between layouts (local slicing, gathers);
* :mod:`.local` -- one op on every distinct block, through the Graph IR interpreter;
* :mod:`.pending` -- exact partial sums, evaluated where a collective completes them;
* :mod:`.collect` -- the collective ops of Graph IR on ``DistTensor`` values;
* :mod:`.execute` -- running a placed function (``run_placed``) and the entry point of
  ``@ts.jit`` and ``ts.grad`` for distributed arguments;
* :mod:`.matmul_blocks` -- matmul blocks that share an operand block, in one call;
* :mod:`.api` -- ``ts.all_gather`` and the other user-facing collectives;
* :mod:`.eager` -- ``ts.*`` operators called on ``DistTensor`` values outside ``jit``;
* :mod:`.lockstep_trace` and :mod:`.lockstep` -- the bodies of an ``index_launch``,
  traced and run in lockstep (local-view collectives);
* :mod:`.launch_kernel` -- ``index_launch`` of a tile kernel;
* :mod:`.writeback` and :mod:`.depend` -- region write-back and the dependence
  analysis of launch sequences (networkx).

``ts.index_launch`` itself is :mod:`tessera.mesh_sim.launch`; region privileges are
:mod:`tessera.mesh_sim.regions`.

The placement rules and the propagation pass live with the other passes, in
``tessera/ir/transforms/sharding/``. The package imports none of its modules: each
loads when it is first used (the front end itself needs none of them; it recognises
distributed values through :mod:`tessera.frontend.graph.dist_arg`).
"""

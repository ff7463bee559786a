"""The vocabulary of distributed programs: what the API builds and the runtime runs.

* :mod:`.mesh` -- :class:`Mesh`, named axes over virtual devices (row-major coordinates);
* :mod:`.sharding` -- :class:`ShardSpec` and ``numpy.array_split`` shard regions;
* :mod:`.tensor` -- :class:`DistTensor`: sharded, replicated or partial along each axis,
  lazily allocated, replicas sharing one array;
* :mod:`.construct` -- ``tensor``, ``from_numpy``, ``from_shards``;
* :mod:`.regions` -- ``Region`` and the ``read``/``write``/``reduce`` privileges of
  index launches.

These sit below the mesh simulator's runtime (:mod:`tessera.mesh_sim`), whose
collectives and SPMD executor take and return them; the rest of :mod:`tessera.dist`
(launches, pipelines, mixture of experts) sits above it. The package imports none of
its modules: ``dist.mesh`` loads the mesh alone.
"""

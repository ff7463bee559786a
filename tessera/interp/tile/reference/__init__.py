"""The reference semantics of Tile IR: what ``mode="reference"`` runs, op by op.

Read these next to docs/kernels.md. Each Tile IR op has one plain rule:

==========================================  ===========================================
op (docs/kernels.md section)                rule
==========================================  ===========================================
``tile.if`` (2, "Control flow")             :func:`.flow.if_step`
``tile.for`` over ``ts.tile.range``         ``flow._for``: each program runs its trips,
                                            programs that finish leave (:class:`.flow.Exits`)
``tile.while``                              ``flow._while`` (the same, with a condition
                                            region; :data:`.flow.MAX_TRIPS` reported)
``return``                                  ``flow._return``
ids (``linear_id``, ``local_id``, ...)      ``memory._ids``
views ``x[a:b, c]``                         :func:`.memory.make_view` (bounds, 8)
``tile.load``, ``load_vector``              :func:`.memory.load_step` → ``memory.globals
                                            .load`` / ``memory.shared.load`` (checks, 8)
``tile.store``, ``tile.update`` (``+=``)    :func:`.memory.store_step` →
                                            ``memory.globals.store`` (write owners, the
                                            fixed reduce order, 6) / ``memory.shared
                                            .write`` (races, 8)
``tile.masked_load``, ``masked_store``      ``masked._masked_load``, ``_masked_store``
(``ts.tile.load``/``store``, ``mask=``)     (masked-on elements only: bounds, then the
                                            checks of ``memory.globals`` or
                                            ``memory.shared_masked``, 8)
``alloc_shared``, ``barrier``, ``cp_async``  ``memory._sync``, ``memory._cp_async`` →
``cp_commit_group``, ``cp_wait_group``      :mod:`tessera.interp.tile.sync` (phases,
                                            copy groups, divergent barriers)
elementwise ops, ``cast``, ``where``        :mod:`tessera.interp.tile.rules` with the
                                            roundings of :mod:`~tessera.interp.tile.numeric`
                                            (6, "Arithmetic")
``row_sum``, ``row_max``, ``reduce_*``      ``rules._reduce`` (6: the float64 pairwise
                                            tree, rounded once)
exact ``reduce`` (``exact=True``, mean)     ``rules._exact_sum``: numerics'
                                            ``sum_rounded`` (7, "Exact accumulators")
``mma``                                     ``rules.mma_rule`` →
                                            :func:`tessera.interp.tile.mma.mma` (7)
exact ``mma`` (``exact=True``)              ``rules._exact_mma`` → numerics'
                                            ``reductions.accumulator`` (7)
==========================================  ===========================================

Programs run together (:mod:`tessera.interp.tile.context`): a value holds every
program's value along leading program axes, so one rule serves every program, and the
reference schedule runs the groups one after another (``launcher``). The fast paths of
checked and fast mode (:mod:`tessera.interp.tile.fastpaths`) wrap these rules; each
states why it gives the same bits and reports, and the tests compare both.
"""

from tessera.interp.tile.reference import flow, masked, memory

__all__ = ["flow", "masked", "memory"]

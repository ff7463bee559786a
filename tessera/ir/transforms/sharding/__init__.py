"""Placements on a mesh: the verifier's check of placed Graph IR (``check``), the
placement rule of every op (``rules``, ``shape``, ``collective``), the collectives that
convert between placements (``convert``) and the ``shard-propagation`` pass
(``propagation``). Importing the package registers the rules and the pass."""

from tessera.ir.transforms.sharding import check, propagation  # noqa: F401

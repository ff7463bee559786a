"""Checks of the arguments of collectives (defined in :mod:`tessera.mesh_checks`, below
the IR, whose placement rules use them too)."""

from __future__ import annotations

from tessera.mesh_checks import (
    MAX_DEVICES,
    NAMED_DIMS,
    as_tuple,
    check_dim,
    check_perm,
    check_rank,
)

__all__ = ["MAX_DEVICES", "NAMED_DIMS", "as_tuple", "check_dim", "check_perm", "check_rank"]

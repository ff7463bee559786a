"""Lowering Tile IR to Target IR (PTX level), per target (sm_80, sm_90a)."""

"""``tile_example`` (programming-model-guide.md, "Basic Tile Operations"): correct as
written.

The kernel and its NumPy check live in ``tessera/conformance/kernels/tile_example.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.tile_example import main, tile_example

__all__ = ["main", "tile_example"]

if __name__ == "__main__":
    main()

"""Flash attention (overview-and-quickstart.md, Example 4), corrected.

The kernel and its NumPy check live in ``tessera/conformance/kernels/flash_attention.py``,
where ``tessera conformance`` runs them too; this script runs the check."""

from tessera.conformance.kernels.flash_attention import flash_attention, main, reference

__all__ = ["flash_attention", "main", "reference"]

if __name__ == "__main__":
    main()

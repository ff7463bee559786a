"""NumPy-style operators shared by concrete tensors and tracers.

Python operators on tensors go through the same ``ts.*`` functions as explicit calls,
so they trace, promote, broadcast and differentiate identically.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tessera.ir.types import TensorType
    from tessera.numerics import DType


def _ops() -> Any:
    from tessera.frontend.graph import ops

    return ops


class ArrayMethods:
    """Operators and methods; subclasses provide ``type`` (a TensorType)."""

    __slots__ = ()
    type: TensorType

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.type.shape)  # type: ignore[arg-type]

    @property
    def ndim(self) -> int:
        return self.type.rank

    @property
    def size(self) -> int:
        return self.type.size

    @property
    def dtype(self) -> DType:
        """The storage format."""
        from tessera.numerics import storage_of

        return storage_of(self.type.element)

    @property
    def element(self) -> Any:
        """The element type: a format or a numerics policy."""
        return self.type.element

    def __len__(self) -> int:
        return self._rows("len() of")

    def _rows(self, what: str) -> int:
        # NumPy raises TypeError for a 0-d array here; tessera's errors are TesseraErrors.
        if not self.type.shape:
            from tessera.errors import ShapeError

            raise ShapeError(f"{what} a 0-d tensor", hint="a scalar has no axis 0; use it "
                             "as it is, or check x.ndim first")
        return int(self.type.shape[0])

    def __iter__(self) -> Any:
        """Iterate along axis 0, as NumPy does: ``x[0], x[1], ...``.

        The length is static (part of the shape), so a ``for`` loop over a traced tensor
        unrolls into one slice per row."""
        return (self[i] for i in range(self._rows("iteration over")))

    def __add__(self, o: Any) -> Any: return _ops().add(self, o)
    def __radd__(self, o: Any) -> Any: return _ops().add(o, self)
    def __sub__(self, o: Any) -> Any: return _ops().sub(self, o)
    def __rsub__(self, o: Any) -> Any: return _ops().sub(o, self)
    def __mul__(self, o: Any) -> Any: return _ops().mul(self, o)
    def __rmul__(self, o: Any) -> Any: return _ops().mul(o, self)
    def __truediv__(self, o: Any) -> Any: return _ops().div(self, o)
    def __rtruediv__(self, o: Any) -> Any: return _ops().div(o, self)
    def __pow__(self, o: Any) -> Any: return _ops().pow(self, o)
    def __rpow__(self, o: Any) -> Any: return _ops().pow(o, self)
    def __matmul__(self, o: Any) -> Any: return _ops().matmul(self, o)
    def __rmatmul__(self, o: Any) -> Any: return _ops().matmul(o, self)
    def __neg__(self) -> Any: return _ops().neg(self)
    def __pos__(self) -> Any: return self
    def __abs__(self) -> Any: return _ops().abs(self)
    def __gt__(self, o: Any) -> Any: return _ops().greater(self, o)
    def __ge__(self, o: Any) -> Any: return _ops().greater_equal(self, o)
    def __lt__(self, o: Any) -> Any: return _ops().less(self, o)
    def __le__(self, o: Any) -> Any: return _ops().less_equal(self, o)
    def __eq__(self, o: Any) -> Any: return _ops().equal(self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Any: return _ops().not_equal(self, o)  # type: ignore[override]

    def __getitem__(self, index: Any) -> Any:
        return _ops().getitem(self, index)

    @property
    def T(self) -> Any:
        return _ops().transpose(self)

    def astype(self, dtype: Any) -> Any:
        return _ops().cast(self, dtype)

    def reshape(self, *shape: Any) -> Any:
        return _ops().reshape(self, shape[0] if len(shape) == 1 else shape)

    def transpose(self, *axes: Any) -> Any:
        return _ops().transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    def sum(self, axis: Any = None, keepdims: bool = False) -> Any:
        return _ops().sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Any:
        return _ops().mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Any:
        return _ops().max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Any:
        return _ops().min(self, axis=axis, keepdims=keepdims)

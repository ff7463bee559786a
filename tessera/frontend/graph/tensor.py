"""Concrete tensors: what graph functions return and eager operators compute on."""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import DTypeError, ShapeError, TesseraError, user_api
from tessera.frontend.graph.arraylike import ArrayMethods
from tessera.ir.types import TensorType
from tessera.numerics import convert, element, from_numpy_dtype, storage_of, tensor_spec


class Tensor(ArrayMethods):
    """A concrete tensor: an array in its storage format plus its element type.

    ``np.asarray(t)`` gives the stored values (low-precision formats as ``ml_dtypes``
    arrays). As an annotation, ``Tensor["B", "D", bf16 @accum(f32)]`` builds a
    :class:`~tessera.numerics.TensorSpec`.
    """

    __slots__ = ("array", "type")
    __array_priority__ = 1000

    @user_api
    def __init__(self, array: np.ndarray, elem: Any = None) -> None:
        array = _array_of(array)
        if elem is None:
            elem = from_numpy_dtype(array.dtype)
        elem = element(elem)
        storage = storage_of(elem)
        # tf32 shares float32 storage, so equal dtypes do not mean the values fit.
        if array.dtype != storage.np_dtype or storage.name == "tf32":
            array = convert(array, elem)
        self.array = array
        self.type = TensorType(array.shape, elem)

    def __class_getitem__(cls, items: Any) -> Any:
        return tensor_spec(items if isinstance(items, tuple) else (items,))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype)

    def numpy(self) -> np.ndarray:
        """The stored values as a NumPy (or ml_dtypes) array."""
        return self.array

    def item(self) -> Any:
        return self.array.item()

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def _scalar(self, to: str) -> np.ndarray:
        """The one stored value, for ``float()`` / ``int()``: a size-1 real tensor."""
        if self.array.size != 1:
            raise ShapeError(f"{to}() of a tensor of shape {self.shape}: only a tensor with "
                             "one element has a single value",
                             hint="reduce it first (ts.sum, ts.mean), or index one element")
        if self.array.dtype.kind == "c":  # NumPy would drop the imaginary part
            raise DTypeError(f"{to}() of a complex tensor ({self.element})",
                             hint="take ts.real(x), ts.imag(x) or ts.abs(x) first")
        return self.array.reshape(())

    def __bool__(self) -> bool:
        return bool(self.array)

    def __iter__(self) -> Any:
        """Rows along axis 0 (ShapeError for a 0-d tensor, where NumPy raises TypeError)."""
        n = self._rows("iteration over")
        return (Tensor(self.array[i], self.type.element) for i in range(n))

    def __repr__(self) -> str:
        return f"Tensor({np.array2string(self.array, threshold=20)}, element={self.element})"

    __hash__ = None  # type: ignore[assignment]


@user_api
def as_tensor(x: Any, elem: Any = None) -> Tensor:
    """``x`` (array, scalar or Tensor) as a Tensor, optionally converted to ``elem``."""
    if isinstance(x, Tensor):
        return x if elem is None or element(elem) == x.type.element else \
            Tensor(convert(x.array, elem), elem)
    return Tensor(_array_of(x), elem)


def _array_of(x: Any) -> np.ndarray:
    """``x`` as a NumPy array of numbers (DTypeError for ragged lists and objects)."""
    try:
        array = np.asarray(x)
    except TesseraError:  # a tracer's refusal says what to do
        raise
    except Exception as err:  # ragged nested lists, objects that refuse conversion
        raise DTypeError(f"cannot make a tensor from {type(x).__name__}: {err}",
                         hint="pass NumPy arrays, Python numbers or tessera tensors") from None
    if array.dtype == object:
        raise DTypeError(f"cannot make a tensor from {type(x).__name__}",
                         hint="pass NumPy arrays, Python numbers or tessera tensors")
    return array

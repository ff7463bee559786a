"""Transcendental functions defined by a specified algorithm, so every backend has its bits.

* :mod:`.exp` -- the f32 exponential: float64 range reduction and polynomial, one
  rounding, correctly rounded for every float32 input.
* :mod:`.exp_native` -- the same operations compiled with llvmlite to a vector loop.
* :mod:`.exp64` -- the same algorithm's binary64 value on binary64 inputs (+0 below
  e^-104): the softmax's terms and the f64 ``tile.exp``.
* :mod:`.arith64` -- the binary64 operations the functions below are written in, once
  for NumPy and for PTX registers.
* :mod:`.erf64` -- erf and erfc by fdlibm's method, branch-free in binary64 with that
  exp: ``graph.erf``, ``tile.erf``, ``tile.erfc``.
* :mod:`.tanh64` -- tanh by its series near 0 and ``1 - 2/(e^2x + 1)`` with that exp:
  ``graph.tanh`` of real formats, ``tile.tanh``.
* :mod:`.log64` -- log by fdlibm's reduction and polynomial: ``graph.log`` of real
  formats, ``tile.log``.
* :mod:`.exact` -- functions correctly rounded to f32, f16 or bf16 from a float64
  library value, decided with decimal arithmetic near a rounding boundary: the PTX
  ``.approx`` models, and ``graph.sin``, ``graph.cos``, ``graph.pow`` and ``tile.pow`` of
  formats of up to 32 bits.
* :mod:`.gelu64` -- the tanh-form GELU as a binary64 quotient ``x / (1 + e^z)`` with
  that exp, the erf form through that erfc: ``graph.gelu`` of every float format, on
  every backend.
"""

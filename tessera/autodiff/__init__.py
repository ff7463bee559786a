"""Automatic differentiation as Graph IR transformations."""

from tessera.autodiff.api import autodiff, default_wrt, grad, jvp, value_and_grad, vjp
from tessera.autodiff.custom import custom_jvp, custom_vjp
from tessera.autodiff.rules import VJP
from tessera.autodiff.transform import backprop, inline, jvp_function, vjp_function

__all__ = ["VJP", "autodiff", "backprop", "custom_jvp", "custom_vjp", "default_wrt", "grad",
           "inline", "jvp", "jvp_function", "value_and_grad", "vjp", "vjp_function"]

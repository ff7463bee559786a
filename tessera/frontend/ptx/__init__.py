"""``ts.ptx``: load PTX from any compiler and run its kernels on the CPU, checked.

:func:`load` reads a file or text (:mod:`tessera.ir.text.ptx`), ``.kernel(name)``
picks an ``.entry`` and ``.run(grid=, block=, args=, shared_bytes=)`` runs it with the
Target IR interpreter's control-flow-graph mode (:mod:`tessera.interp.target.ptx`);
:func:`tensor_map` makes the argument of a tensor-map parameter, :func:`triton_descriptor`
the five arguments of a Triton tensor descriptor, :func:`struct` a struct passed by
value and :func:`pointer` a pointer into an array (:mod:`tessera.frontend.ptx.structs`),
:func:`texture` and :func:`surface` texture and surface objects
(:mod:`tessera.frontend.ptx.textures`).
"""

from tessera import lazy

__all__ = ["DevicePointer", "PtxKernel", "PtxProgram", "Struct", "TensorMapArgument",
           "TextureArgument", "load", "pointer", "struct", "surface", "tensor_map", "texture",
           "triton_descriptor"]
__getattr__, __dir__ = lazy.attach(__name__, globals(), {
    **lazy.names("tessera.frontend.ptx.api", "PtxKernel", "PtxProgram", "TensorMapArgument",
                 "load", "tensor_map", "triton_descriptor"),
    **lazy.names("tessera.frontend.ptx.structs", "DevicePointer", "Struct", "pointer",
                 "struct"),
    **lazy.names("tessera.frontend.ptx.textures", "TextureArgument", "surface",
                 "texture")})

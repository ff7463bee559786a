"""The PTX backend, in two levels:

* ``render/``: Target IR -> PTX text (a rule table keyed by op class, the register
  allocator, the kernel's header, signature and control flow);
* ``driver/``: PTX text -> what runs on the GPU (ptxas and nvJitLink assembly, kernel
  parameter packing, CUDA driver launches, tensor maps, ahead-of-time bundles).

The entry points that take a ``@ts.kernel`` down to PTX and launch it
(``compile_kernel``, ``ts.launch``) sit above the front end, in
:mod:`tessera.frontend.kernel.backends`. Importing this package loads neither level.
"""

"""Element types beyond a storage format: policies, policy classes and tensor specs.

* :mod:`.modifiers` -- ``dtype @accum(t) @stochastic_round @loss_scale(s)`` policies and
  the element helpers (``storage_of``, ``accum_of``, ...).
* :mod:`.parse` -- ``parse_policy``, the string form of a policy.
* :mod:`.classes` -- ``@precision_policy`` classes.
* :mod:`.annotations` -- ``Tensor["B", "D", bf16 @accum(f32)]`` specs and dim binding.
* :mod:`.dims` -- the dim expressions of those specs (``"2*D"``) and their solving.
"""

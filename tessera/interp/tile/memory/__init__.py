"""The tile simulator's memories: global tensors, shared buffers and views (``spaces``),
access plans (``access``), overlapping arguments (``alias``), the loads, stores and
checks of each space (``globals``, ``shared``) and the steps that run them (``steps``)."""

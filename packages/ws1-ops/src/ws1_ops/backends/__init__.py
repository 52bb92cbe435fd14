"""One module per backend family, one shape: ``FAMILY``, ``KERNELS = {node: registry.Impl(...)}`` and,
where the kernel package counts its own calls, ``COUNTER``. The registry imports ``<family>.py``
when a profile of that family is used, checks ``KERNELS`` against the manifest's node table and
registers it (see docs/adding_a_backend.md). Same function signatures in every family."""

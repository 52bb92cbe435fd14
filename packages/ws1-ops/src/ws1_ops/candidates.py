"""Non-profile candidates and their selection: ``torch_default`` and the project's negative controls.

A candidate runs ws1 ops on kernels no profile chooses — plain PyTorch (``torch_default``) or one of the
deliberately variant controls of :mod:`ws1_ops.backends.controls` — so the gates can show that their
invariance and accuracy cells are able to fail. It sits beside the registry, not in it: the registry
(:mod:`ws1_ops.registry`) knows profiles and families only and imports nothing here, and the controls
module is imported on first use of a control, not by ``import ws1_ops`` or by the model.
"""

from __future__ import annotations

import contextlib

from .registry import KernelUnavailable, activate, load_family

TORCH_DEFAULT = "torch_default"


def _controls():
    from .backends import controls  # on first use of a control only (see the module docstring)

    return controls.CONTROLS


def candidate_names() -> tuple[str, ...]:
    """Every non-profile candidate: ``torch_default`` and the project's own negative controls."""
    return (TORCH_DEFAULT, *_controls())


def use_candidate(name: str, family: str | None = None) -> contextlib.AbstractContextManager[str]:
    """Run ws1 ops on a non-profile candidate: ``torch_default`` (plain PyTorch) or one of the
    deliberately variant controls of :mod:`ws1_ops.backends.controls` (a family's kernels with one
    node replaced by a variant whose invariance failure is certain on every host). ``family``: the
    kernels the control is built on (default its own, ``cpu``) — a GPU host's gate runs the control on
    its profile's family; a control that can only be built on the cpu kernels refuses another."""
    if name == TORCH_DEFAULT:
        return activate(name, name)
    controls = _controls()
    ctl = controls.get(name)
    if ctl is None:
        raise KernelUnavailable(
            f"unknown candidate {name!r}; expected one of {list(candidate_names())} (profiles go through use_profile())"
        )
    family = family or ctl.family
    if family not in ctl.families:
        on_family = sorted(n for n, c in controls.items() if family in c.families)
        raise KernelUnavailable(
            f"control {name} is built on the {'/'.join(ctl.families)} kernels only, not on the {family} family; "
            f"controls for {family}: {on_family}"
        )
    load_family(family)
    return activate(name, family, ctl.kernels(family))

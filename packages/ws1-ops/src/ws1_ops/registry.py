"""The kernel registry: one implementation per (op, family), chosen by the active profile.

* ``use_profile("cpu_bf16")`` makes the profile's family active for the ops called inside it;
  the family's kernel package is imported then, and a missing package is an error
  (:class:`KernelUnavailable`), never a fallback to another family.
* Every kernel call is recorded — op, family, kernel id, direction (forward/backward), device —
  into the active :func:`record` scopes: C2's runtime evidence and C9's observed node kinds come
  from here, not from what the code meant to call.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import ws1_accel


class KernelUnavailable(RuntimeError):
    """The active family has no kernel for an op, or its kernel package is not installed."""


class NoProfile(RuntimeError):
    """A ws1 op was called outside ``use_profile(...)``."""


@dataclass(frozen=True)
class Kernel:
    """One family's implementation of one op. ``fwd``/``bwd`` have the same signature in every family."""

    op: str
    family: str
    kernel_id: str
    fwd: Callable
    bwd: Callable | None = None
    # ops with a parameter: its gradient over rows given in canonical order (see ws1_ops.grads)
    param_grad: Callable | None = None
    # set only on a negative control's deliberately variant kernel (ws1_ops.backends.controls): the
    # control's name, recorded with every call so evidence can never pass a control off as the kernel
    variant: str | None = None


# family -> module that registers that family's kernels when imported
FAMILY_BACKENDS = {
    "cpu": "ws1_ops.backends.cpu",
    "triton": "ws1_ops.backends.triton",
    "cuda": "ws1_ops.backends.cuda",
    "ascend": "ws1_ops.backends.ascend",
    # Plain PyTorch ops: the negative control of the gates. Not a profile; never chosen by one.
    "torch_default": "ws1_ops.backends.torch_default",
}

_KERNELS: dict[tuple[str, str], Kernel] = {}
_LOADED: dict[str, str | None] = {}  # family -> None (loaded) or the import error text

_active: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("ws1_active", default=None)
# A negative control's variant kernels, op -> Kernel, in force over the active family's own ones.
_overlay: contextvars.ContextVar[dict[str, Kernel] | None] = contextvars.ContextVar("ws1_overlay", default=None)
# Module-level (not a contextvar): autograd runs CUDA/NPU backward on its own device threads,
# and backward calls must still be recorded.
_recorders: list[Recorder] = []
_rec_lock = threading.Lock()


def register(kernel: Kernel) -> None:
    key = (kernel.op, kernel.family)
    if key in _KERNELS and _KERNELS[key].kernel_id != kernel.kernel_id:
        raise KernelUnavailable(f"{kernel.op}/{kernel.family}: registered twice ({_KERNELS[key].kernel_id}, {kernel.kernel_id})")
    _KERNELS[key] = kernel


def load_family(family: str) -> None:
    """Import the family's backend (which imports its kernel package); raise if it cannot."""
    if family not in FAMILY_BACKENDS:
        raise KernelUnavailable(f"unknown backend family {family!r}; expected one of {sorted(FAMILY_BACKENDS)}")
    if family not in _LOADED:
        try:
            importlib.import_module(FAMILY_BACKENDS[family])
            _LOADED[family] = None
        except ImportError as exc:
            _LOADED[family] = f"{type(exc).__name__}: {exc}"
    if _LOADED[family] is not None:
        raise KernelUnavailable(f"backend family {family!r} is not available: {_LOADED[family]}")


def family_available(family: str) -> str | None:
    """None if the family's kernels load here, else why not (never raises)."""
    try:
        load_family(family)
        return None
    except KernelUnavailable as exc:
        return str(exc)


@contextlib.contextmanager
def _activate(name: str, family: str, overlay: dict[str, Kernel] | None = None) -> Iterator[str]:
    load_family(family)
    token = _active.set((name, family))
    otoken = _overlay.set(overlay)
    try:
        yield name
    finally:
        _overlay.reset(otoken)
        _active.reset(token)


def use_profile(profile: str, device=None) -> contextlib.AbstractContextManager[str]:
    """Run ws1 ops with ``profile``'s kernels. Fails closed: an absent device raises
    ``ws1_accel.AcceleratorUnavailable``, a missing kernel package :class:`KernelUnavailable`."""
    family = ws1_accel.family_of(profile)
    ws1_accel.resolve_device(profile, device)
    load_family(family)  # here, not on __enter__: the error points at the use_profile() line
    return _activate(profile, family)


def candidates() -> tuple[str, ...]:
    """Every non-profile candidate: ``torch_default`` and the project's own negative controls."""
    from .backends import controls

    return ("torch_default", *controls.CONTROLS)


def use_candidate(name: str) -> contextlib.AbstractContextManager[str]:
    """Run ws1 ops on a non-profile candidate: ``torch_default`` (plain PyTorch) or one of the
    deliberately variant controls of :mod:`ws1_ops.backends.controls` (the cpu kernels with one
    node replaced by a variant whose invariance failure is certain on every host)."""
    if name == "torch_default":
        return _activate(name, name)
    from .backends import controls

    ctl = controls.CONTROLS.get(name)
    if ctl is None:
        raise KernelUnavailable(f"unknown candidate {name!r}; expected one of {list(candidates())} "
                                "(profiles go through use_profile())")
    load_family(ctl.family)
    return _activate(name, ctl.family, ctl.kernels())


def active() -> tuple[str, str]:
    """(profile, family) in force, or raise :class:`NoProfile`."""
    a = _active.get()
    if a is None:
        raise NoProfile("no ws1 profile is active: wrap the call in `with ws1_ops.use_profile('cpu_bf16'):`")
    return a


def kernel(op: str) -> Kernel:
    profile, family = active()
    overlay = _overlay.get()
    if overlay and op in overlay:
        return overlay[op]
    k = _KERNELS.get((op, family))
    if k is None:
        mod = importlib.import_module(FAMILY_BACKENDS[family])
        lacks = getattr(mod, "MISSING", {}).get(op)
        why = f": the installed kernel package lacks {lacks}" if lacks else ""
        raise KernelUnavailable(f"{profile}: no {family} kernel for op {op!r} (missing_required; no fallback){why}")
    return k


def kernels_for(family: str) -> dict[str, Kernel]:
    load_family(family)
    return {op: k for (op, fam), k in _KERNELS.items() if fam == family}


# ---- runtime record -------------------------------------------------------------------------


@dataclass
class Recorder:
    """What actually ran inside a ``with record() as rec:`` block."""

    events: Counter = field(default_factory=Counter)  # (op, family, kernel_id, direction, device_type) -> calls
    variants: dict[str, set] = field(default_factory=dict)  # op -> names of the negative controls that ran it

    def summary(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for (op, fam, kid, direction, dev), n in sorted(self.events.items()):
            e = out.setdefault(op, {"kernel_ids": [], "families": [], "devices": [], "forward": 0, "backward": 0})
            for key, val in (("kernel_ids", kid), ("families", fam), ("devices", dev)):
                if val not in e[key]:
                    e[key].append(val)
            e[direction] += n
        for op, names in self.variants.items():
            out[op]["variant"] = sorted(names)
        return out

    def ops(self) -> set[str]:
        return {k[0] for k in self.events}


@contextlib.contextmanager
def record() -> Iterator[Recorder]:
    rec = Recorder()
    with _rec_lock:
        _recorders.append(rec)
    try:
        yield rec
    finally:
        with _rec_lock:
            _recorders.remove(rec)


def note(k: Kernel, direction: str, device_type: str) -> None:
    with _rec_lock:
        for rec in _recorders:
            rec.events[(k.op, k.family, k.kernel_id, direction, device_type)] += 1
            if k.variant is not None:
                rec.variants.setdefault(k.op, set()).add(k.variant)


def call_bwd(k: Kernel, *args, device_type: str = "cpu"):
    if k.bwd is None:
        raise KernelUnavailable(f"{k.family} kernel {k.kernel_id} has no backward")
    note(k, "backward", device_type)
    return k.bwd(*args)

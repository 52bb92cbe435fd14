"""The kernel registry: one implementation per (op, family), chosen by the active profile.

* Every family module ``ws1_ops.backends.<family>`` has one shape: ``FAMILY``, ``KERNELS = {node:
  Impl(fwd, bwd, param_grad, runs)}`` and, for a kernel package that counts its own calls,
  ``COUNTER``. Loading it checks ``KERNELS`` against the manifest's node table (a node the manifest
  declares for the family's profile and the module lacks, or one the table does not know, is an
  error naming both) and registers each kernel under the manifest's kernel id. Families are
  ``ws1_accel``'s (``FAMILY_DEVICE_TYPE``); nothing else lists them.
* ``use_profile("cpu_bf16")`` makes the profile's family active for the ops called inside it;
  the family's kernel package is imported then, and a missing package is an error
  (:class:`KernelUnavailable`), never a fallback to another family.
* Every kernel call is recorded — op, family, kernel id, direction (forward/backward), device —
  into the active :func:`record` scopes: C2's runtime evidence and C9's observed node kinds come
  from here, not from what the code meant to call.
* The label is not trusted alone: each family's kernel package counts its own calls by kernel id
  and the path it took (ISA on CPU), read through :func:`register_counter`. Every recorded call is
  matched with what the package counted while it ran; a call the package did not count (a Python
  callable swapped in behind the label) or a package kernel other than the label's own is a
  ``package_problems`` entry in the record, and the gates turn it red.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields

import ws1_accel
from ws1_contract.manifest import load_manifest


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
    # the kernel package's own ids of what fwd/bwd/param_grad run (its self-report counts by these ids)
    runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Impl:
    """One node's kernel as a family module declares it: ``KERNELS[node] = Impl(...)``.

    ``runs``: the kernel package's own ids of what fwd/bwd/param_grad run (its self-report counts by
    these; the manifest's kernel id must be one of them). ``missing``: the raw kernels this build of
    the package lacks — the node is then unavailable (missing_required, red), never served by another
    family. ``kernel_id``: only for candidates outside the manifest (torch_default)."""

    fwd: Callable | None
    bwd: Callable | None = None
    param_grad: Callable | None = None
    runs: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    kernel_id: str | None = None


# Plain PyTorch ops: the negative control of the gates. Not a family of any profile; never chosen by one.
CANDIDATE_FAMILIES = ("torch_default",)


def backend_module(family: str) -> str:
    """The module that declares ``family``'s kernels (one per family, one shape)."""
    if family not in ws1_accel.FAMILY_DEVICE_TYPE and family not in CANDIDATE_FAMILIES:
        raise KernelUnavailable(
            f"unknown backend family {family!r}; expected one of "
            f"{sorted([*ws1_accel.FAMILY_DEVICE_TYPE, *CANDIDATE_FAMILIES])}"
        )
    return f"ws1_ops.backends.{family}"


_KERNELS: dict[tuple[str, str], Kernel] = {}
_LOADED: dict[str, str | None] = {}  # family -> None (loaded) or the import error text
_MISSING: dict[tuple[str, str], tuple[str, ...]] = {}  # (node, family) -> raw kernels the installed package lacks

_active: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("ws1_active", default=None)
# A negative control's variant kernels, op -> Kernel, in force over the active family's own ones.
_overlay: contextvars.ContextVar[dict[str, Kernel] | None] = contextvars.ContextVar("ws1_overlay", default=None)
# Module-level (not a contextvar): autograd runs CUDA/NPU backward on its own device threads,
# and backward calls must still be recorded.
_recorders: list[Recorder] = []
_rec_lock = threading.Lock()
# family -> the kernel package's self-report: {package kernel id: {path: calls since load}}
_COUNTERS: dict[str, Callable[[], dict[str, dict[str, int]]]] = {}
# the last recorded call, until the next one (or the recorder's summary) settles what the package counted for it
_pending: list = []


def register_counter(family: str, counts: Callable[[], dict[str, dict[str, int]]]) -> None:
    _COUNTERS[family] = counts


def register(kernel: Kernel) -> None:
    key = (kernel.op, kernel.family)
    if key in _KERNELS and _KERNELS[key].kernel_id != kernel.kernel_id:
        raise KernelUnavailable(
            f"{kernel.op}/{kernel.family}: registered twice ({_KERNELS[key].kernel_id}, {kernel.kernel_id})"
        )
    _KERNELS[key] = kernel


def declared_kernel_ids(family: str) -> dict[str, str]:
    """node -> the kernel id the manifest declares for ``family``'s profiles (they must agree)."""
    m = load_manifest()
    out: dict[str, str] = {}
    for decl in m.profiles.values():
        if decl.backend_family != family:
            continue
        for node, d in decl.nodes.items():
            if out.setdefault(node, d.kernel_id) != d.kernel_id:
                raise KernelUnavailable(
                    f"nodes.{node}.kernels: the {family} profiles declare two kernel ids "
                    f"({out[node]}, {d.kernel_id}); one family, one kernel per node"
                )
    return out


def register_backend(mod) -> None:
    """Register a family module's ``KERNELS`` after checking them against the manifest's node table."""
    family, kernels, where = getattr(mod, "FAMILY", None), getattr(mod, "KERNELS", None), mod.__name__
    if not isinstance(family, str) or not isinstance(kernels, dict):
        raise KernelUnavailable(f"{where}: a backend module exports FAMILY (str) and KERNELS ({{node: Impl}})")
    if family in CANDIDATE_FAMILIES:
        declared = {node: impl.kernel_id for node, impl in kernels.items()}
    else:
        declared = declared_kernel_ids(family)
        lacking = [n for n in declared if n not in kernels]
        unknown = [n for n in kernels if n not in declared]
        if lacking or unknown:
            raise KernelUnavailable(
                "; ".join(
                    [
                        f"{where}.KERNELS has no entry for node {n!r}, which contracts/ws1_manifest.json declares for "
                        f"family {family!r} as {declared[n]}"
                        for n in lacking
                    ]
                    + [
                        f"{where}.KERNELS has node {n!r}, which the manifest's node table does not declare for family "
                        f"{family!r}"
                        for n in unknown
                    ]
                )
            )
    for node, impl in kernels.items():
        kid = declared[node]
        if impl.runs and kid not in impl.runs and not impl.missing:
            raise KernelUnavailable(
                f"{where}.KERNELS[{node!r}]: the declared kernel {kid} is not among what it runs {list(impl.runs)}"
            )
        if impl.missing:
            _MISSING[(node, family)] = impl.missing
            continue
        register(
            Kernel(
                op=node,
                family=family,
                kernel_id=kid,
                fwd=impl.fwd,
                bwd=impl.bwd,
                param_grad=impl.param_grad,
                runs=impl.runs,
            )
        )
    counter = getattr(mod, "COUNTER", None)
    if counter is not None:
        register_counter(family, counter)


def load_family(family: str) -> None:
    """Import the family's backend (which imports its kernel package) and register it; raise if it cannot."""
    name = backend_module(family)
    if family not in _LOADED:
        try:
            register_backend(importlib.import_module(name))
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
def activate(name: str, family: str, overlay: dict[str, Kernel] | None = None) -> Iterator[str]:
    """Make ``family``'s kernels active under ``name`` (what records and errors call it) for the ops called
    inside, with ``overlay`` (node -> Kernel: a negative control's variants) in force over them. No device
    resolution: :func:`use_profile` (a profile on its device) and :func:`ws1_ops.use_candidate` are the entries a
    user calls; a harness that has no device for the family (the Triton interpreter, an ahead-of-time
    compile's recording pass) calls this directly."""
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
    return activate(profile, family)


def in_force() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """The kernels in force now (the active profile or candidate and its overlay), as a context manager factory that
    puts them back in force later — for code whose backward runs its own kernel calls outside the forward's
    ``with`` (an autograd backward runs where ``loss.backward()`` is called). Raises :class:`NoProfile` when none is
    active."""
    state, overlay = active(), _overlay.get()

    @contextlib.contextmanager
    def enter() -> Iterator[None]:
        token, otoken = _active.set(state), _overlay.set(overlay)
        try:
            yield
        finally:
            _overlay.reset(otoken)
            _active.reset(token)

    return enter


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
        lacks = _MISSING.get((op, family))
        why = f": the installed kernel package lacks {list(lacks)}" if lacks else ""
        raise KernelUnavailable(f"{profile}: no {family} kernel for op {op!r} (missing_required; no fallback){why}")
    return k


def kernels_for(family: str) -> dict[str, Kernel]:
    load_family(family)
    return {op: k for (op, fam), k in _KERNELS.items() if fam == family}


# ---- runtime record -------------------------------------------------------------------------


@dataclass(eq=False)
class Recorder:
    """What actually ran inside a ``with record() as rec:`` block.

    Compared by identity (``eq=False``): record() blocks nest, and leaving one removes its own recorder from the
    active list — by value, an inner block whose events equal the outer one's removed the outer recorder instead."""

    events: Counter = field(default_factory=Counter)  # (op, family, kernel_id, direction, device_type) -> calls
    variants: dict[str, set] = field(default_factory=dict)  # op -> names of the negative controls that ran it
    # what the kernel package counted during the op's recorded calls: op -> {(package id, path): calls}
    counted: dict[str, Counter] = field(default_factory=dict)
    uncounted: Counter = field(default_factory=Counter)  # (op, kernel_id, direction) -> calls the package did not count
    foreign: dict[str, set] = field(default_factory=dict)  # op -> package ids a non-variant kernel ran beyond its own
    unreported: set = field(default_factory=set)  # (op, family) whose family has no self-report

    def merge(self, other: Recorder) -> None:
        """Add ``other``'s record to this one (a process-wide log fed by many blocks, e.g. ws1_vllm's provenance),
        field by field: Counters add, sets unite, per-op dicts merge by op. A field of another kind raises: a
        Recorder that grows one must say how it merges, not lose it silently."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(theirs, Counter):
                mine.update(theirs)
            elif isinstance(theirs, set):
                mine |= theirs
            elif isinstance(theirs, dict):
                for op, value in theirs.items():
                    if not isinstance(value, (Counter, set)):
                        raise TypeError(f"Recorder.merge: {f.name}[{op!r}] is a {type(value).__name__}")
                    mine.setdefault(op, type(value)()).update(value)
            else:
                raise TypeError(f"Recorder.merge: field {f.name} is a {type(theirs).__name__}")

    def _settle(self, k: Kernel, direction: str, delta: dict | None) -> None:
        if delta is None:
            self.unreported.add((k.op, k.family))
            return
        if not delta:
            self.uncounted[(k.op, k.kernel_id, direction)] += 1
        c = self.counted.setdefault(k.op, Counter())
        for (pid, path), n in delta.items():
            c[(pid, path)] += n
            if k.variant is None and pid not in k.runs:
                self.foreign.setdefault(k.op, set()).add(pid)

    def package_problems(self, op: str) -> list[str]:
        """Why the package's own count does not confirm the op's recorded calls (empty: confirmed)."""
        problems = [
            f"family {fam!r} has no kernel self-report: what ran cannot be confirmed"
            for o, fam in sorted(self.unreported)
            if o == op
        ]
        for (o, kid, direction), n in sorted(self.uncounted.items()):
            if o == op:
                problems.append(
                    f"recorded kernel did not run: {n} {direction} call(s) recorded as {kid} "
                    "were not counted by the kernel package"
                )
        if op in self.foreign:
            problems.append(f"the kernel package ran {sorted(self.foreign[op])}, not the recorded kernel's own")
        return problems

    def arch_key(self) -> str:
        """The ISA the kernels used, from the package's own count (see :func:`arch_key_of`)."""
        return arch_key_of([self.summary()])

    def summary(self) -> dict[str, dict]:
        with _rec_lock:
            _settle_pending()
        out: dict[str, dict] = {}
        for (op, fam, kid, direction, dev), n in sorted(self.events.items()):
            e = out.setdefault(op, {"kernel_ids": [], "families": [], "devices": [], "forward": 0, "backward": 0})
            for key, val in (("kernel_ids", kid), ("families", fam), ("devices", dev)):
                if val not in e[key]:
                    e[key].append(val)
            e[direction] += n
        for op, names in self.variants.items():
            out[op]["variant"] = sorted(names)
        for op, e in out.items():
            pkg: dict = {}
            for (pid, path), n in sorted(self.counted.get(op, Counter()).items()):
                pkg.setdefault(pid, {})[path] = n
            e["package"] = pkg
            e["package_problems"] = self.package_problems(op)
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
            _settle_pending()
            _recorders.remove(rec)


def arch_key_of(summaries) -> str:
    """The path (ISA on CPU) the kernel package reported for the calls of these recorder summaries:
    one path, ``mixed:a+b`` if several, never a guess from the CPU's flags. "generic" (ops that
    dispatch on no ISA: embedding's row copies) is left out."""
    paths = sorted(
        {
            path
            for summ in summaries
            for e in summ.values()
            for by_path in e.get("package", {}).values()
            for path, n in by_path.items()
            if n and path != "generic"
        }
    )
    if not paths:
        return "none (no kernel call counted by a kernel package)"
    return paths[0] if len(paths) == 1 else "mixed:" + "+".join(paths)


def package_counts(family: str) -> dict[tuple[str, str], int] | None:
    counts = _COUNTERS.get(family)
    if counts is None:
        return None
    return {(pid, path): n for pid, paths in counts().items() for path, n in paths.items()}


def _settle_pending() -> None:
    """Give the last recorded call what its family's package counted since it was noted (callers hold
    _rec_lock). Calls are settled one at a time, so each one is confirmed by its own count."""
    if not _pending:
        return
    k, direction, before, recs = _pending.pop()
    after = package_counts(k.family) if before is not None else None
    delta = (
        None if after is None else {key: n - before.get(key, 0) for key, n in after.items() if n != before.get(key, 0)}
    )
    for rec in recs:
        rec._settle(k, direction, delta)


def note(k: Kernel, direction: str, device_type: str) -> None:
    """Record a call of ``k`` about to run (callers call the kernel right after)."""
    if not _recorders and not _pending:
        return  # nothing records (a benchmark, a trainer step): no lock, no counter read per call
    with _rec_lock:
        _settle_pending()
        if _recorders:
            _pending.append((k, direction, package_counts(k.family), list(_recorders)))
        for rec in _recorders:
            rec.events[(k.op, k.family, k.kernel_id, direction, device_type)] += 1
            if k.variant is not None:
                rec.variants.setdefault(k.op, set()).add(k.variant)


def call_bwd(k: Kernel, *args, device_type: str = "cpu"):
    if k.bwd is None:
        raise KernelUnavailable(f"{k.family} kernel {k.kernel_id} has no backward")
    note(k, "backward", device_type)
    return k.bwd(*args)

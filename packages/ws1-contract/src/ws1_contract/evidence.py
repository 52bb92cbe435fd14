"""Evidence records: one JSON file per (profile, gate) under ``evidence/<profile>/<gate>.json``.

A cell is ``green`` (executed, passed), ``red`` (executed and failed, or required and not
executed) or ``N/A`` — the last only for an allowed (op, reason) pair of the manifest (its
helper nodes (``required: false``) marked ``profile_independent``: today only ``pack``) with a written detail; a
hidden N/A is rejected when the cell is built and when a record is read back. A record passes only
when it has a green cell and no red one (all-N/A is not a pass).

Each record names the run that wrote it (``run_id``: ``$WS1_RUN_ID`` when a flow such as C11 set
it, else one id per process), beside its commit, dirty state and ``created_at``, so a reader can
tell a record of this run from an old one left in the folder.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import uuid
from pathlib import Path
from typing import Any

import attrs

from .errors import EvidenceError

SCHEMA = "ws1-evidence-v1"
STATUSES = ("green", "red", "N/A")
# The one reason an N/A is allowed: the op is profile-independent (pack is index copies). Which ops
# may use it is the manifest's word (allowed_na_pairs), not the writer's.
ALLOWED_NA_REASONS = ("profile_independent",)
NOT_EXECUTED = "not executed on this host"


@functools.lru_cache(maxsize=8)
def _na_pairs_of(path: str, mtime_ns: int) -> frozenset[tuple[str, str]]:
    data = json.loads(Path(path).read_text())
    return frozenset(
        (op, "profile_independent")
        for op, d in (data.get("nodes") or {}).items()
        if isinstance(d, dict) and d.get("required") is False and d.get("profile_independent") is True
    )


def allowed_na_pairs() -> frozenset[tuple[str, str]]:
    """The (op, na_reason) pairs the manifest allows as N/A; unreadable manifest: none (fail closed)."""
    from . import locate

    try:
        p = locate.manifest_path()
        return _na_pairs_of(str(p), p.stat().st_mtime_ns)
    except (OSError, ValueError):
        return frozenset()


def na_problem(op, na_reason, detail) -> str | None:
    """Why an N/A cell of ``op`` is not allowed, or None."""
    if not detail:
        return "N/A needs a written detail"
    if (op, na_reason) not in allowed_na_pairs():
        allowed = sorted(allowed_na_pairs()) or "none (manifest unreadable)"
        return f"N/A ({op!r}, {na_reason!r}) is not an allowed (op, reason) pair of the manifest {allowed}"
    return None


@functools.lru_cache(maxsize=1)
def _process_run_id() -> str:
    return f"proc-{uuid.uuid4().hex[:16]}"


def run_id() -> str:
    """This run's id: ``$WS1_RUN_ID`` (set by a flow for all its steps), else one id per process."""
    return os.environ.get("WS1_RUN_ID") or _process_run_id()


def _status(instance, attribute, value):
    if value not in STATUSES:
        raise EvidenceError(f"cell status must be one of {STATUSES}, got {value!r}")


@attrs.frozen
class Cell:
    id: str
    judgment: str
    status: str = attrs.field(validator=_status)
    detail: str
    lhs_role: str | None = None
    rhs_role: str | None = None
    thresholds: dict | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    na_reason: str | None = None
    extra: dict = attrs.field(factory=dict)

    def __attrs_post_init__(self):
        if not self.id:
            raise EvidenceError("a cell needs an id")
        if self.status == "N/A":
            why = na_problem(self.extra.get("op"), self.na_reason, self.detail)
            if why is not None:
                raise EvidenceError(f"cell {self.id}: {why}: hidden N/A rejected")
        if self.status != "N/A" and self.na_reason is not None:
            raise EvidenceError(f"cell {self.id}: na_reason given on a {self.status} cell")

    def to_dict(self) -> dict:
        d = attrs.asdict(self)
        extra = d.pop("extra")
        return {**d, **extra}


def status_of(ok: bool) -> str:
    return "green" if ok else "red"


def judged(id: str, judgment: str, ok: bool, detail: str, *, extra: dict | None = None, **fields) -> Cell:
    """The one green/red cell helper: an executed judgment, green when it passed, red otherwise.
    ``fields``: the Cell's other fields (roles, thresholds, max errors)."""
    return Cell(id=id, judgment=judgment, status=status_of(ok), detail=detail, extra=extra or {}, **fields)


def red_not_executed(id: str, judgment: str, why: str, **extra) -> Cell:
    """A required cell this host cannot execute: red, with the reason."""
    return Cell(id=id, judgment=judgment, status="red", detail=f"{NOT_EXECUTED}: {why}", extra=extra)


def counts(cells: list[Cell]) -> dict[str, int]:
    c = {s: 0 for s in STATUSES}
    for cell in cells:
        c[cell.status] += 1
    return c


def passed(cells: list[Cell]) -> bool:
    """True only if at least one cell is green and none is red (all N/A proves nothing)."""
    c = counts(cells)
    return c["green"] > 0 and c["red"] == 0


def evidence_root() -> Path:
    return Path(os.environ.get("WS1_EVIDENCE_DIR", "evidence"))


def write_evidence(
    gate: str,
    profile: str,
    cells: list[Cell],
    provenance: dict | None,
    *,
    contract_fingerprint: str,
    fixture_hash: str,
    git_sha: str,
    dirty: bool | None,
    root: str | Path | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``<root>/<profile>/<gate>.json`` and return its path."""
    ids = [c.id for c in cells]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise EvidenceError(f"{gate}/{profile}: duplicate cell ids {dup[:5]}")
    record = {
        "schema": SCHEMA,
        "gate": gate,
        "profile": profile,
        "passed": passed(cells),
        "counts": counts(cells),
        "cells": [c.to_dict() for c in cells],
        "provenance": provenance,
        "git_sha": git_sha,
        "dirty": dirty,
        "contract_fingerprint": contract_fingerprint,
        "fixture_hash": fixture_hash,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "run_id": run_id(),
        **(extra or {}),
    }
    out = Path(root) if root is not None else evidence_root()
    path = out / profile / f"{gate}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    os.replace(tmp, path)  # atomic: a reader never sees half a file
    return path


REQUIRED_KEYS = (
    "schema",
    "gate",
    "profile",
    "passed",
    "counts",
    "cells",
    "provenance",
    "git_sha",
    "dirty",
    "contract_fingerprint",
    "fixture_hash",
    "created_at",
)


def read_evidence(path: str | Path) -> dict:
    """Read an evidence file back, checking it is whole and self-consistent."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise EvidenceError(f"{p}: no such evidence file") from None
    except json.JSONDecodeError as exc:
        raise EvidenceError(f"{p}: corrupt evidence (not JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise EvidenceError(f"{p}: corrupt evidence (not a JSON object)")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise EvidenceError(f"{p}: corrupt evidence (missing {missing})")
    if data["schema"] != SCHEMA:
        raise EvidenceError(f"{p}: schema {data['schema']!r} is not {SCHEMA!r}")
    cells = data["cells"]
    if not isinstance(cells, list) or any(not isinstance(c, dict) or c.get("status") not in STATUSES for c in cells):
        raise EvidenceError(f"{p}: corrupt evidence (a cell without a valid status)")
    c = {s: 0 for s in STATUSES}
    for cell in cells:
        c[cell["status"]] += 1
    if c != data["counts"]:
        raise EvidenceError(f"{p}: counts {data['counts']} do not match the cells {c}")
    if data["passed"] != (c["green"] > 0 and c["red"] == 0):
        raise EvidenceError(f"{p}: 'passed' does not match the cells (a pass needs a green cell and no red one)")
    for cell in cells:
        if cell["status"] == "N/A":
            why = na_problem(cell.get("op"), cell.get("na_reason"), cell.get("detail"))
            if why is not None:
                raise EvidenceError(f"{p}: cell {cell.get('id')!r}: {why}: hidden N/A rejected")
    return data

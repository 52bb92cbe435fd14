"""The workload manifest (C2): model identity, fixtures with their identity hash, and the node
table — the one place the set of chain nodes is declared.

Each node of ``nodes`` says whether it is required (one kernel per profile) or a profile-independent
helper, what a row is for it (``token``: rows are independent; ``sequence``: attention; ``layout``:
pack), its parameter, whether it is a C5 inventory kernel item, its representative case per tier and
its kernel per profile. Everything else — required nodes, ops, representative cases, declarations
per profile — is derived here from that table, and every list of nodes in code derives from these
(see docs/adding_a_node.md).
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import Any, Optional, Union

import attrs

from . import locate
from ._strict import canonical_json, read_json, structure
from .contract import Contract, load_contract
from .errors import ContractError

ROW_KINDS = ("token", "sequence", "layout")
TIERS = ("short", "primary", "long")


def kernel_id_pattern(family: str) -> re.Pattern:
    """A kernel id must name an entry point of the profile's own family: ``ws1_<family>::<op>`` for a
    compiled kernel package (torch.ops namespace), ``ws1_ops.<family>.<module>:<kernel>`` for a Python
    one (Triton). A cpu profile declaring a CUDA kernel is a cross-profile fallback written into the
    manifest, and is rejected here."""
    return re.compile(
        rf"^(ws1_{family}::[a-z_][a-z0-9_]*|ws1_ops\.{family}\.[a-z_][a-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*)$"
    )


ShapeValue = Union[int, str]


@attrs.frozen
class Declaration:
    kernel_id: str
    source: str


@attrs.frozen
class ProfileDecl:
    """A profile's view of the node table (derived): its family and the kernel of each required node."""

    backend_family: str
    nodes: dict[str, Declaration]


@attrs.frozen
class CaseDecl:
    tag: str  # the <shape> part of the case id, e.g. "M8K4096N4096"
    shape: dict[str, Union[int, str]]


@attrs.frozen
class Node:
    """One row of the node table."""

    required: bool
    rows: str  # "token" | "sequence" | "layout"
    param: Optional[str]  # the parameter whose gradient is a row reduction, or None
    inventory: bool  # a C5 elementwise inventory item that is a ws1 kernel
    cases: dict[str, CaseDecl]  # tier -> representative case
    kernels: dict[str, Declaration] = attrs.field(factory=dict)  # profile -> kernel (required nodes)
    profile_independent: bool = False  # helpers only: one implementation serves every profile
    reason: str = ""  # helpers only: why


@attrs.frozen
class Sample:
    sample_id: str
    prompt: list[int]
    completion: list[int]

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.completion

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.completion)


@attrs.frozen
class Fixtures:
    pad_id: int
    pad_id_rule: str
    padded_length: int
    positions: str
    primary: list[Sample]
    short: Sample
    long: Sample


@attrs.frozen
class FixtureSummary:
    """What the fixtures add up to (checked against them on load; code quotes these, never constants)."""

    note: str
    primary_lengths: list[int]
    active_tokens: int
    total_tokens: int
    padded_length: int
    short_length: int
    long_length: int


@attrs.frozen
class HelperNode:
    profile_independent: bool
    reason: str


@attrs.frozen
class Model:
    identity: str
    architecture: str
    formal_weights_sha256: Optional[str]
    formal_weights_note: str
    config: dict[str, Any]
    parameter_tensors: int
    parameter_tensors_rule: str


@attrs.frozen
class Case:
    case_id: str
    profile: str
    op: str
    tier: str
    shape: dict[str, ShapeValue]


@attrs.frozen
class Manifest:
    schema: str
    version: str
    workload_id: str
    workload_seed: int
    model: Model
    node_table_note: str
    tiers: list[str]
    nodes: dict[str, Node]
    fixtures: Fixtures
    fixture_identity_sha256: str
    fixture_summary: FixtureSummary
    source: str = attrs.field(default="", kw_only=True)
    # the contract's profiles, in order (set by manifest_from_dict): representative cases exist per profile
    profile_families: dict[str, str] = attrs.field(factory=dict, kw_only=True)

    # ---- derived from the node table --------------------------------------------------------

    @property
    def ops(self) -> list[str]:
        """Every node, required and helper, in table order."""
        return list(self.nodes)

    @property
    def required_nodes(self) -> list[str]:
        return [n for n, d in self.nodes.items() if d.required]

    @property
    def helper_nodes(self) -> dict[str, HelperNode]:
        return {n: HelperNode(d.profile_independent, d.reason) for n, d in self.nodes.items() if not d.required}

    def nodes_where(self, **props) -> list[str]:
        """Nodes whose properties equal ``props``, e.g. ``nodes_where(rows="token", required=True)``."""
        return [n for n, d in self.nodes.items() if all(getattr(d, k) == v for k, v in props.items())]

    @property
    def extra_tiers(self) -> dict[str, list[str]]:
        """Tiers beyond ``tiers`` -> the nodes that have a case there (attention's ``long``)."""
        out: dict[str, list[str]] = {}
        for n, d in self.nodes.items():
            for t in d.cases:
                if t not in self.tiers:
                    out.setdefault(t, []).append(n)
        return out

    def tiers_of(self, node: str) -> list[str]:
        return list(self.nodes[node].cases)

    @functools.cached_property
    def profiles(self) -> dict[str, ProfileDecl]:
        return {
            p: ProfileDecl(fam, {n: d.kernels[p] for n, d in self.nodes.items() if d.required and p in d.kernels})
            for p, fam in self.profile_families.items()
        }

    @functools.cached_property
    def representative_cases(self) -> list[Case]:
        """One case per profile × node × tier of the node table; id ``<node>-<tier>-<tag>-<profile>``."""
        return [
            Case(case_id=f"{n}-{t}-{c.tag}-{p}", profile=p, op=n, tier=t, shape=dict(c.shape))
            for p in self.profile_families
            for n, d in self.nodes.items()
            for t, c in d.cases.items()
        ]

    def kernel_id(self, profile: str, node: str) -> str:
        if profile not in self.profiles:
            raise ContractError("profiles", f"unknown profile {profile!r}; expected one of {sorted(self.profiles)}")
        decl = self.profiles[profile].nodes.get(node)
        if decl is None:
            raise ContractError(f"profiles.{profile}.nodes", f"node {node!r} has no declared kernel (missing_required)")
        return decl.kernel_id

    def cases(self, profile: str | None = None, op: str | None = None, tier: str | None = None) -> list[Case]:
        return [
            c
            for c in self.representative_cases
            if (profile is None or c.profile == profile)
            and (op is None or c.op == op)
            and (tier is None or c.tier == tier)
        ]

    @property
    def active_tokens(self) -> int:
        return sum(len(s.completion) for s in self.fixtures.primary)

    @property
    def total_tokens(self) -> int:
        return sum(s.length for s in self.fixtures.primary)


def fixture_hash(fixtures_json: dict) -> str:
    """sha256 of the canonical JSON of the fixtures object."""
    return hashlib.sha256(canonical_json(fixtures_json)).hexdigest()


def _check(cond: bool, path: str, rule: str) -> None:
    if not cond:
        raise ContractError(path, rule)


def validate(m: Manifest, contract: Contract, fixtures_json: dict) -> None:
    _check(m.schema == "ws1-manifest", "schema", f"expected 'ws1-manifest', got {m.schema!r}")
    for f in ("version", "workload_id"):
        _check(getattr(m, f) != "", f, "must not be empty")
    for t in m.tiers:
        _check(t in TIERS, "tiers", f"unknown tier {t!r}; expected one of {list(TIERS)}")
    # the node table: its node set is the contract's op set (each op has an op class there)
    ops = contract.ops
    for node in m.nodes:
        _check(
            node in ops,
            f"nodes.{node}",
            f"unknown op {node!r}: the contract's op_classes do not name it (expected one of {ops})",
        )
    for op in ops:
        _check(op in m.nodes, "nodes", f"the contract's op {op!r} has no row in the node table")
    for name in contract.profiles:
        _check(name in m.profile_families, "profiles", f"profile {name!r} of the contract is not known")
    seen_kernel: dict[tuple[str, str], str] = {}
    for node, d in m.nodes.items():
        path = f"nodes.{node}"
        _check(d.rows in ROW_KINDS, f"{path}.rows", f"must be one of {list(ROW_KINDS)}, got {d.rows!r}")
        for t, c in d.cases.items():
            _check(t in TIERS, f"{path}.cases.{t}", f"unknown tier {t!r}; expected one of {list(TIERS)}")
            _check(
                bool(re.fullmatch(r"[A-Za-z0-9]+", c.tag)),
                f"{path}.cases.{t}.tag",
                f"{c.tag!r} must be letters and digits",
            )
            for k, v in c.shape.items():
                if isinstance(v, int):
                    _check(v > 0, f"{path}.cases.{t}.shape.{k}", f"must be > 0, got {v}")
        if not d.required:
            _check(
                d.profile_independent and d.reason.strip() != "",
                path,
                "a node that is not required must be a profile_independent helper with a reason",
            )
            _check(not d.kernels, f"{path}.kernels", "a profile-independent helper declares no kernels")
            continue
        for profile in contract.profiles:
            _check(
                profile in d.kernels,
                f"{path}.kernels",
                f"no kernel declared for profile {profile!r} (missing_required)",
            )
        for profile, decl in d.kernels.items():
            kpath = f"{path}.kernels.{profile}"
            _check(profile in contract.profiles, kpath, f"unknown profile {profile!r} (not in the contract)")
            fam = contract.family(profile)
            _check(decl.kernel_id.strip() != "", f"{kpath}.kernel_id", "empty kernel id")
            _check(
                bool(kernel_id_pattern(fam).match(decl.kernel_id)),
                f"{kpath}.kernel_id",
                f"{decl.kernel_id!r} is not a {fam} kernel id (pattern {kernel_id_pattern(fam).pattern})",
            )
            other = seen_kernel.get((profile, decl.kernel_id))
            _check(other is None, f"{kpath}.kernel_id", f"duplicate kernel id {decl.kernel_id!r} (also {other})")
            seen_kernel[(profile, decl.kernel_id)] = node
    # fixtures
    fx = m.fixtures
    declared = m.fixture_identity_sha256
    computed = fixture_hash(fixtures_json)
    _check(
        declared == computed,
        "fixture_identity_sha256",
        f"fixture hash mismatch: declared {declared}, computed {computed}",
    )
    for i, s in enumerate(fx.primary + [fx.short, fx.long]):
        where = f"fixtures.primary[{i}]" if i < len(fx.primary) else f"fixtures.{s.sample_id}"
        _check(len(s.prompt) > 0 and len(s.completion) > 0, where, "a sample needs prompt and completion tokens")
        _check(all(t >= 0 for t in s.tokens), where, "token ids must be >= 0")
    ids = [s.sample_id for s in fx.primary]
    _check(len(set(ids)) == len(ids), "fixtures.primary", f"duplicate sample ids {ids}")
    _check(
        fx.padded_length >= max(s.length for s in fx.primary),
        "fixtures.padded_length",
        "shorter than the longest sample",
    )
    sm = m.fixture_summary
    for name, declared_v, actual in (
        ("primary_lengths", sm.primary_lengths, [s.length for s in fx.primary]),
        ("active_tokens", sm.active_tokens, m.active_tokens),
        ("total_tokens", sm.total_tokens, m.total_tokens),
        ("padded_length", sm.padded_length, fx.padded_length),
        ("short_length", sm.short_length, fx.short.length),
        ("long_length", sm.long_length, fx.long.length),
    ):
        _check(declared_v == actual, f"fixture_summary.{name}", f"declares {declared_v}, the fixtures give {actual}")


def manifest_from_dict(data, contract: Contract, source: str = "<dict>") -> Manifest:
    if not isinstance(data, dict):
        raise ContractError("$", f"the manifest must be a JSON object, got {type(data).__name__}")
    m = structure(data, Manifest)
    m = attrs.evolve(m, source=source, profile_families={p: contract.family(p) for p in contract.profiles})
    validate(m, contract, data["fixtures"])
    return m


def load_manifest(path: str | Path | None = None, contract: Contract | None = None) -> Manifest:
    """Read, structure and validate the manifest against the contract."""
    p = Path(path) if path is not None else locate.manifest_path()
    return manifest_from_dict(read_json(p), contract or load_contract(), source=str(p))


def rehash(path: str | Path | None = None) -> tuple[str, str]:
    """Recompute ``fixture_identity_sha256`` after an intended fixture edit; returns (old, new)."""
    import json

    p = Path(path) if path is not None else locate.manifest_path()
    data = read_json(p)
    old = data.get("fixture_identity_sha256", "")
    data["fixture_identity_sha256"] = fixture_hash(data["fixtures"])
    p.write_text(json.dumps(data, indent=1) + "\n")
    return old, data["fixture_identity_sha256"]

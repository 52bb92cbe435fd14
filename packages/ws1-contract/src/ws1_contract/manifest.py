"""The workload manifest (C2): model identity, required chain nodes with one declared kernel per
profile, fixtures with their identity hash, and the representative cases per profile and tier."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Optional, Union

import attrs

from . import locate
from ._strict import canonical_json, read_json, structure
from .contract import Contract, load_contract
from .errors import ContractError

# A kernel id must name an entry point of the profile's own family: a cpu profile declaring a
# CUDA kernel is a cross-profile fallback written into the manifest, and is rejected here.
KERNEL_ID_PATTERNS = {
    "cpu": re.compile(r"^ws1_cpu::[a-z_][a-z0-9_]*$"),
    "cuda": re.compile(r"^ws1_cuda::[a-z_][a-z0-9_]*$"),
    "ascend": re.compile(r"^ws1_ascend::[a-z_][a-z0-9_]*$"),
    "triton": re.compile(r"^ws1_ops\.triton\.[a-z_][a-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"),
}
ShapeValue = Union[int, str]


@attrs.frozen
class Declaration:
    kernel_id: str
    source: str


@attrs.frozen
class ProfileDecl:
    backend_family: str
    nodes: dict[str, Declaration]


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
    required_nodes: list[str]
    helper_nodes: dict[str, HelperNode]
    ops: list[str]
    tiers: list[str]
    extra_tiers: dict[str, list[str]]
    profiles: dict[str, ProfileDecl]
    fixtures: Fixtures
    fixture_identity_sha256: str
    representative_cases: list[Case]
    source: str = attrs.field(default="", kw_only=True)

    def kernel_id(self, profile: str, node: str) -> str:
        if profile not in self.profiles:
            raise ContractError("profiles", f"unknown profile {profile!r}; expected one of {sorted(self.profiles)}")
        decl = self.profiles[profile].nodes.get(node)
        if decl is None:
            raise ContractError(f"profiles.{profile}.nodes", f"node {node!r} has no declared kernel (missing_required)")
        return decl.kernel_id

    def cases(self, profile: str | None = None, op: str | None = None, tier: str | None = None) -> list[Case]:
        return [
            c for c in self.representative_cases
            if (profile is None or c.profile == profile) and (op is None or c.op == op) and (tier is None or c.tier == tier)
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


def _case_id(c: Case) -> re.Pattern:
    return re.compile(rf"^{re.escape(c.op)}-{re.escape(c.tier)}-[A-Za-z0-9]+-{re.escape(c.profile)}$")


def validate(m: Manifest, contract: Contract, fixtures_json: dict) -> None:
    _check(m.schema == "ws1-manifest", "schema", f"expected 'ws1-manifest', got {m.schema!r}")
    for f in ("version", "workload_id"):
        _check(getattr(m, f) != "", f, "must not be empty")
    ops = contract.ops
    _check(sorted(m.ops) == sorted(ops), "ops", f"must be the contract's ops {ops}, got {m.ops}")
    for i, node in enumerate(m.required_nodes):
        _check(node in ops, f"required_nodes[{i}]", f"unknown op {node!r}")
    for node in m.helper_nodes:
        _check(node in ops and node not in m.required_nodes, f"helper_nodes.{node}", "must be a known op that is not a required node")
    _check(set(m.required_nodes) | set(m.helper_nodes) == set(ops), "required_nodes", "every op must be a required node or a helper node")
    for t in m.tiers + list(m.extra_tiers):
        _check(t in ("short", "primary", "long"), "tiers", f"unknown tier {t!r}")
    # profiles and declared kernels
    for name in contract.profiles:
        _check(name in m.profiles, "profiles", f"profile {name!r} of the contract is not declared")
    for name, p in m.profiles.items():
        path = f"profiles.{name}"
        _check(name in contract.profiles, path, f"unknown profile {name!r} (not in the contract)")
        fam = contract.family(name)
        _check(p.backend_family == fam, f"{path}.backend_family", f"the contract says {fam!r}, got {p.backend_family!r}")
        seen: dict[str, str] = {}
        for node, decl in p.nodes.items():
            npath = f"{path}.nodes.{node}"
            _check(node in m.required_nodes, npath, f"unknown node {node!r}")
            _check(decl.kernel_id.strip() != "", f"{npath}.kernel_id", "empty kernel id")
            _check(bool(KERNEL_ID_PATTERNS[fam].match(decl.kernel_id)), f"{npath}.kernel_id",
                   f"{decl.kernel_id!r} is not a {fam} kernel id (pattern {KERNEL_ID_PATTERNS[fam].pattern})")
            _check(decl.kernel_id not in seen, f"{npath}.kernel_id", f"duplicate kernel id {decl.kernel_id!r} (also {seen.get(decl.kernel_id)})")
            seen[decl.kernel_id] = node
    # fixtures
    fx = m.fixtures
    declared = m.fixture_identity_sha256
    computed = fixture_hash(fixtures_json)
    _check(declared == computed, "fixture_identity_sha256", f"fixture hash mismatch: declared {declared}, computed {computed}")
    for i, s in enumerate(fx.primary + [fx.short, fx.long]):
        where = f"fixtures.primary[{i}]" if i < len(fx.primary) else f"fixtures.{s.sample_id}"
        _check(len(s.prompt) > 0 and len(s.completion) > 0, where, "a sample needs prompt and completion tokens")
        _check(all(t >= 0 for t in s.tokens), where, "token ids must be >= 0")
    ids = [s.sample_id for s in fx.primary]
    _check(len(set(ids)) == len(ids), "fixtures.primary", f"duplicate sample ids {ids}")
    _check(fx.padded_length >= max(s.length for s in fx.primary), "fixtures.padded_length", "shorter than the longest sample")
    # cases
    seen_ids: set[str] = set()
    for i, c in enumerate(m.representative_cases):
        path = f"representative_cases[{i}]"
        _check(c.profile in m.profiles, f"{path}.profile", f"unknown profile {c.profile!r}")
        _check(c.op in ops, f"{path}.op", f"unknown op {c.op!r}")
        allowed_tiers = m.tiers + [t for t, tops in m.extra_tiers.items() if c.op in tops]
        _check(c.tier in allowed_tiers, f"{path}.tier", f"tier {c.tier!r} is not defined for op {c.op!r}")
        _check(bool(_case_id(c).match(c.case_id)), f"{path}.case_id", f"{c.case_id!r} is not '<op>-<tier>-<shape>-<profile>'")
        _check(c.case_id not in seen_ids, f"{path}.case_id", f"duplicate case id {c.case_id!r}")
        seen_ids.add(c.case_id)
        for k, v in c.shape.items():
            if isinstance(v, int):
                _check(v > 0, f"{path}.shape.{k}", f"must be > 0, got {v}")


def manifest_from_dict(data, contract: Contract, source: str = "<dict>") -> Manifest:
    if not isinstance(data, dict):
        raise ContractError("$", f"the manifest must be a JSON object, got {type(data).__name__}")
    m = structure(data, Manifest)
    validate(m, contract, data["fixtures"])
    return attrs.evolve(m, source=source)


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

"""Provenance: what ran, where, under which contract — and the check that it is what was asked."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import attrs
import torch

from .contract import Contract


@functools.lru_cache(maxsize=None)
def git_state(cwd: str | None = None) -> tuple[str, bool | None]:
    """(sha, dirty) of the checkout, or ('unknown', None) outside git."""
    where = cwd or str(Path.cwd())
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return "unknown", None
        st = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return sha.stdout.strip(), bool(st.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return "unknown", None


@attrs.frozen
class Provenance:
    backend_profile: str
    requested_backend: str
    actual_backend: str
    execution_dtype: str
    accumulation_dtype: str
    output_dtype: str
    reference_dtype: str
    candidate_tf32_enabled: bool
    reference_tf32_enabled: bool
    device_name: str
    arch_key: str
    torch_version: str
    git_sha: str
    git_dirty: bool | None
    contract_fingerprint: str
    manifest_fixture_hash: str

    def to_dict(self) -> dict:
        return attrs.asdict(self)


def collect(
    profile: str,
    actual_backend: str,
    contract: Contract,
    fixture_hash: str,
    *,
    requested_backend: str | None = None,
    device: str | torch.device | None = None,
    candidate_tf32: bool | None = None,
    reference_tf32: bool | None = None,
    arch_key: str | None = None,
) -> Provenance:
    """Provenance for a report. ``actual_backend`` is what the kernel registry recorded at run time;
    ``arch_key``, where given, what the kernel package reported it ran (on CPU: the ISA path,
    ``ws1_ops.registry.arch_key_of``), else the device's architecture."""
    import ws1_accel

    dev = ws1_accel.resolve_device(profile, device)
    tf32 = ws1_accel.tf32_enabled(dev)
    sha, dirty = git_state()
    pol = contract.dtype_policy
    return Provenance(
        backend_profile=profile,
        requested_backend=requested_backend or contract.family(profile),
        actual_backend=actual_backend,
        execution_dtype=contract.profiles[profile].execution_dtype,
        accumulation_dtype=pol.accumulation_dtype,
        output_dtype=contract.profiles[profile].execution_dtype
        if pol.output_dtype == "execution"
        else pol.output_dtype,
        reference_dtype=pol.reference_dtype,
        candidate_tf32_enabled=tf32 if candidate_tf32 is None else candidate_tf32,
        reference_tf32_enabled=tf32 if reference_tf32 is None else reference_tf32,
        device_name=ws1_accel.device_name(dev),
        arch_key=arch_key or ws1_accel.arch_key(dev),
        torch_version=torch.__version__,
        git_sha=sha,
        git_dirty=dirty,
        contract_fingerprint=contract.fingerprint,
        manifest_fixture_hash=fixture_hash,
    )


def validate_provenance(p: Provenance, contract: Contract, fixture_hash: str | None = None) -> list[str]:
    """Problems with a report's provenance (empty list: valid). A wrong family is always a problem."""
    problems = []
    if p.backend_profile not in contract.profiles:
        return [f"unknown profile {p.backend_profile!r}"]
    fam = contract.family(p.backend_profile)
    if p.actual_backend != fam:
        problems.append(
            f"actual backend {p.actual_backend!r} is not {p.backend_profile}'s family {fam!r} (undeclared fallback)"
        )
    if p.requested_backend != fam:
        problems.append(f"requested backend {p.requested_backend!r} is not {p.backend_profile}'s family {fam!r}")
    if p.candidate_tf32_enabled or p.reference_tf32_enabled:
        problems.append("TF32 must be disabled for candidate and reference")
    pol = contract.dtype_policy
    want_exec = contract.profiles[p.backend_profile].execution_dtype
    for field, want in (
        ("execution_dtype", want_exec),
        ("accumulation_dtype", pol.accumulation_dtype),
        ("reference_dtype", pol.reference_dtype),
        ("output_dtype", want_exec),
    ):
        if getattr(p, field) != want:
            problems.append(f"{field} {getattr(p, field)!r} is not the policy's {want!r}")
    if p.contract_fingerprint != contract.fingerprint:
        problems.append("contract fingerprint differs from the contract in force")
    if fixture_hash is not None and p.manifest_fixture_hash != fixture_hash:
        problems.append("manifest fixture hash differs from the manifest in force")
    return problems

"""Gates C1 (contract) and C2 (manifest, static part). Both are static: they run on any host.

Each check is a cell; the checks that prove a validator *can* fail feed it a broken copy and
expect a rejection (a validator that accepts everything would turn those cells red).
"""

from __future__ import annotations

import copy
from pathlib import Path

import attrs

from . import locate
from ._strict import read_json
from .contract import JUDGMENTS, contract_from_dict
from .errors import ContractError
from .evidence import judged
from .gate import GateRun
from .manifest import fixture_hash, manifest_from_dict
from .provenance import Provenance, validate_provenance


def _cell(run: GateRun, id: str, judgment: str, ok: bool, detail: str, **extra) -> None:
    run.add(judged(id, judgment, ok, detail, extra=extra))


def _rejects(mutate, data: dict, build) -> tuple[bool, str]:
    bad = copy.deepcopy(data)
    mutate(bad)
    try:
        build(bad)
    except ContractError as exc:
        return True, f"rejected: {exc}"
    return False, "a broken copy was ACCEPTED"


def c1_contract(run: GateRun, args) -> None:
    c, profile = run.contract, run.profile
    raw = read_json(c.source)
    fam = c.family(profile)
    _cell(
        run,
        "contract-loads",
        "contract",
        True,
        f"{Path(c.source).name} {c.version} validated; fingerprint {c.fingerprint[:16]}…",
    )
    _cell(
        run,
        f"profile-{profile}",
        "contract",
        True,
        f"{profile} -> family {fam}, device {c.profiles[profile].device_type}",
    )
    # resolver: every judgment x op x dtype resolves; invariance rows are exactly 0
    for j in JUDGMENTS:
        n, bad = 0, []
        for op in c.ops:
            for dt in c.dtype_policy.supported_dtypes:
                th = c.resolve(j, op, dt)
                n += 1
                if c.is_bitwise(j) and (th.atol, th.rtol) != (0.0, 0.0):
                    bad.append(f"{op}/{dt}")
        _cell(
            run,
            f"resolve-{j}",
            "contract",
            not bad,
            f"{n} (op, dtype) rows resolve" + (f"; non-zero: {bad}" if bad else ""),
        )
    # the FP64-reference rows: every op of a class that has one resolves it at the dtype its values are in,
    # no looser than the execution dtype's row beside it (validate() refuses that too)
    rows64, bad, judged64 = [], [], set()
    for j in JUDGMENTS:
        for op in c.ops:
            dt = c.judged_dtype(op, c.dtype_policy.execution_dtype)
            if "float64" in c.references(j, op, dt):
                th, beside = c.resolve(j, op, dt, reference="float64"), c.resolve(j, op, c.dtype_policy.execution_dtype)
                rows64.append(f"{j} {op} {dt} atol {th.atol:g} rtol {th.rtol:g}")
                judged64.add((j, op))
                if th.atol > beside.atol or th.rtol > beside.rtol:
                    bad.append(op)
    need = [op for op in c.op_classes["logprob"] if ("forward_accuracy", op) not in judged64]
    _cell(
        run,
        "resolve-fp64-reference",
        "contract",
        bool(rows64) and not bad and not need,
        f"{len(rows64)} FP64-reference row(s): {'; '.join(rows64)}"
        + (f"; looser than their BF16 row: {bad}" if bad else "")
        + (f"; logprob-class op(s) without one: {need}" if need else ""),
    )
    bf = c.resolve("forward_accuracy", "det_gemm", "bfloat16")
    _cell(
        run,
        "resolve-example",
        "contract",
        (bf.atol, bf.rtol) == (5e-2, 2e-2),
        f"forward_accuracy det_gemm bfloat16 -> atol {bf.atol:g} rtol {bf.rtol:g}",
    )
    try:
        c.resolve("forward_accuracy", "det_gemm", "float8_e4m3fn")
        _cell(run, "fp8-out-of-scope", "contract", False, "an FP8 request was accepted")
    except ContractError as exc:
        _cell(run, "fp8-out-of-scope", "contract", True, f"rejected: {exc}")
    # fingerprint: stable, and it moves when any threshold moves
    again = contract_from_dict(raw).fingerprint
    bumped = copy.deepcopy(raw)
    bumped["judgments"]["forward_accuracy"]["by_op_class"]["reduction"]["bfloat16"]["atol"] = 0.051
    moved = contract_from_dict(bumped).fingerprint != c.fingerprint
    _cell(
        run,
        "fingerprint",
        "contract",
        again == c.fingerprint and moved,
        f"sha256 of sorted-key compact JSON {c.fingerprint[:16]}…; "
        f"stable {again == c.fingerprint}, moves on an edit {moved}",
    )
    # provenance: its own family accepted, any other family rejected
    prov = Provenance(
        backend_profile=profile,
        requested_backend=fam,
        actual_backend=fam,
        execution_dtype=c.profiles[profile].execution_dtype,
        accumulation_dtype="float32",
        output_dtype=c.profiles[profile].execution_dtype,
        reference_dtype="float32",
        candidate_tf32_enabled=False,
        reference_tf32_enabled=False,
        device_name="(static check)",
        arch_key="-",
        torch_version="-",
        git_sha="-",
        git_dirty=False,
        contract_fingerprint=c.fingerprint,
        manifest_fixture_hash=run.manifest.fixture_identity_sha256,
    )
    own = validate_provenance(prov, c, run.manifest.fixture_identity_sha256)
    _cell(run, "provenance-own-family", "contract", not own, "accepted" if not own else "; ".join(own))
    for other in sorted({p.backend_family for p in c.profiles.values()} - {fam}):
        probs = validate_provenance(attrs.evolve(prov, actual_backend=other), c)
        _cell(
            run,
            f"provenance-rejects-{other}",
            "contract",
            bool(probs),
            probs[0] if probs else f"actual backend {other} was ACCEPTED for {profile}",
        )
    tf = validate_provenance(attrs.evolve(prov, candidate_tf32_enabled=True), c)
    _cell(run, "provenance-rejects-tf32", "contract", bool(tf), tf[0] if tf else "TF32 on was ACCEPTED")
    # roles
    for kind, pair in c.comparison_roles.pairs.items():
        c.validate_role_pair(kind, pair.lhs, pair.rhs)
        bad = []
        for lhs, rhs in ((pair.rhs, pair.lhs), ("baseline", pair.rhs), (pair.lhs, "singleton_aggregate")):
            try:
                c.validate_role_pair(kind, lhs, rhs)
                bad.append(f"({lhs}, {rhs}) accepted")
            except ContractError:
                pass
        _cell(
            run,
            f"roles-{kind}",
            "contract",
            not bad,
            f"{pair.lhs} vs {pair.rhs}; reversed and forbidden pairs rejected" if not bad else "; ".join(bad),
        )
    # the validator can fail: each broken copy must be rejected
    mutations = {
        "nonzero-invariance": lambda d: d["judgments"]["forward_invariance"]["by_op_class"]["reduction"][
            "bfloat16"
        ].update(atol=1e-6),
        "private-relaxation": lambda d: d.update(backend_private_tolerance_relaxation=True),
        "wrong-family": lambda d: d["profiles"][profile].update(backend_family="cuda" if fam != "cuda" else "cpu"),
        "reversed-pair": lambda d: d["comparison_roles"]["pairs"].update(
            accuracy={"lhs": "fp32_reference", "rhs": "bf16_candidate"}
        ),
        "string-threshold": lambda d: d["judgments"]["forward_accuracy"]["by_op_class"]["logprob"]["bfloat16"].update(
            atol="0.06"
        ),
        "missing-key": lambda d: d.pop("aggregates"),
        "fp64-row-missing": lambda d: d["judgments"]["forward_accuracy"].pop("fp64_reference"),
        "fp64-row-looser": lambda d: d["judgments"]["forward_accuracy"]["fp64_reference"]["by_op_class"]["logprob"][
            "float32"
        ].update(atol=0.1),
    }
    for name, mutate in mutations.items():
        ok, detail = _rejects(mutate, raw, contract_from_dict)
        _cell(run, f"validator-rejects-{name}", "contract", ok, detail)


def _repo_root() -> Path | None:
    d = locate.contracts_dir().resolve()
    root = d.parent
    return root if (root / "noxfile.py").is_file() else None


def _entry_point(kernel_id: str) -> tuple[str, str]:
    """What a kernel source must define for ``kernel_id``: ("c", op) for ``ns::op`` (a C/C++/CUDA/Ascend C
    function named ``op``), ("py", kernel) for ``module:kernel`` (a Python ``def kernel``)."""
    if "::" in kernel_id:
        return "c", kernel_id.rsplit("::", 1)[1]
    return "py", kernel_id.rsplit(":", 1)[1]


def _source_defines(path: Path, shown: str, kernel_id: str) -> tuple[bool, str]:
    """A declared source is green only if the file exists AND defines the kernel's entry point: for
    ``ws1_<family>::<op>`` a function definition ``<type> <op>(...) {`` (comments stripped), for
    ``<module>:<kernel>`` a ``def <kernel>(``. A file that merely exists is not the kernel."""
    import re

    if not path.is_file():
        return False, f"{shown}: declared kernel source not found"
    kind, name = _entry_point(kernel_id)
    text = path.read_text(encoding="utf-8", errors="replace")
    if kind == "c":
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        found = re.search(r"[\w>&*]\s+" + re.escape(name) + r"\s*\([^;{}]*\)\s*(?:const\s*)?\{", text)
        what = f"function {name}(...)"
    else:
        text = re.sub(r"#[^\n]*", " ", text)
        found = re.search(r"^\s*def\s+" + re.escape(name) + r"\s*\(", text, flags=re.M)
        what = f"def {name}(...)"
    if not found:
        return False, f"{shown} exists but does not define {what}, the entry point of {kernel_id}"
    return True, f"{shown} defines {what} ({kernel_id})"


def c2_manifest(run: GateRun, args) -> None:
    m, c, profile = run.manifest, run.contract, run.profile
    decl = m.profiles[profile]
    root = _repo_root()
    for node in m.required_nodes:
        d = decl.nodes.get(node)
        if d is None:
            _cell(run, f"node-{node}", "manifest", False, "missing_required: no kernel declared", node=node)
            continue
        _cell(run, f"node-{node}", "manifest", True, f"declared {d.kernel_id}", node=node, kernel_id=d.kernel_id)
        if root is None:
            _cell(run, f"source-{node}", "manifest", False, "cannot check: no WS1 source tree here", node=node)
        else:
            ok, detail = _source_defines(root / d.source, d.source, d.kernel_id)
            _cell(run, f"source-{node}", "manifest", ok, detail, node=node, kernel_id=d.kernel_id, source=d.source)
    tiers = {op: list(m.tiers) + [t for t, ops in m.extra_tiers.items() if op in ops] for op in m.ops}
    for op, ts in tiers.items():
        for t in ts:
            cases = m.cases(profile=profile, op=op, tier=t)
            _cell(
                run,
                f"cases-{op}-{t}",
                "manifest",
                bool(cases),
                ", ".join(x.case_id for x in cases) if cases else f"no representative case for {op} × {t}",
                op=op,
                tier=t,
            )
    raw = read_json(m.source)
    computed = fixture_hash(raw["fixtures"])
    _cell(
        run,
        "fixture-hash",
        "manifest",
        computed == m.fixture_identity_sha256,
        f"fixture_identity_sha256 {computed[:16]}… matches",
    )
    fx = m.fixtures
    lengths = [s.length for s in fx.primary]
    sm = m.fixture_summary  # checked against the fixtures on load; here the cell shows it
    ok = (m.active_tokens, m.total_tokens, fx.padded_length, lengths) == (
        sm.active_tokens,
        sm.total_tokens,
        sm.padded_length,
        sm.primary_lengths,
    )
    _cell(
        run,
        "fixtures-primary",
        "manifest",
        ok,
        f"{len(fx.primary)} samples, lengths {lengths}, "
        f"{m.active_tokens} active / {m.total_tokens} tokens, padded to {fx.padded_length}",
    )
    _cell(
        run,
        "fixtures-short-long",
        "manifest",
        (fx.short.length, fx.long.length) == (sm.short_length, sm.long_length),
        f"short length {fx.short.length}, long length {fx.long.length}",
    )
    mutations = {
        "fixture-edit": lambda d: d["fixtures"]["primary"][0]["completion"].append(203),
        "empty-kernel-id": lambda d: d["nodes"]["rope"]["kernels"][profile].update(kernel_id=""),
        "cross-family-kernel": lambda d: d["nodes"]["det_gemm"]["kernels"][profile].update(
            kernel_id="ws1_cuda::det_gemm" if decl.backend_family != "cuda" else "ws1_cpu::det_gemm"
        ),
        "duplicate-kernel-id": lambda d: d["nodes"]["silu"]["kernels"][profile].update(
            kernel_id=d["nodes"]["swiglu"]["kernels"][profile]["kernel_id"]
        ),
        "unknown-op": lambda d: d["nodes"].update(softmax=d["nodes"]["silu"]),
    }
    for name, mutate in mutations.items():
        ok, detail = _rejects(mutate, raw, lambda bad: manifest_from_dict(bad, c))
        _cell(run, f"validator-rejects-{name}", "manifest", ok, detail)

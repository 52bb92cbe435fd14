"""The numerical contract (C1): one JSON file, read only through :func:`load_contract`.

Every gate asks :meth:`Contract.resolve` for its thresholds; none carries a private atol/rtol.
Validation is strict and every error names the JSON path and the rule it broke, e.g.
``judgments.forward_invariance.by_op_class.reduction.bfloat16.atol: an invariance threshold must be 0``.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import attrs

import ws1_accel

from . import locate
from ._strict import canonical_json, read_json, structure
from .errors import ContractError

# Families, their device types and the built-in profiles are ws1_accel's facts, declared there only.
FAMILIES = tuple(ws1_accel.FAMILY_DEVICE_TYPE)
FAMILY_DEVICE_TYPE = ws1_accel.FAMILY_DEVICE_TYPE
REQUIRED_PROFILES = ws1_accel.BUILTIN_PROFILES
OP_CLASSES = ("elementwise", "reduction", "attention", "logprob")
JUDGMENTS = {
    "forward_accuracy": "tolerance",
    "gradient_accuracy": "tolerance",
    "forward_invariance": "bitwise",
    "gradient_invariance": "bitwise",
}
REPORT_KINDS = {
    "accuracy": ("bf16_candidate", "fp32_reference"),
    "invariance": ("transformed_config", "canonical_config"),
    "train_infer_parity": ("training_style_teacher_forcing", "inference_style_rollout_decode"),
}
METRICS = ("max_abs_dlogp", "approx_kl0", "clipfrac0")
NORM_REQUIRED = ("gradient_accuracy",)  # judgments that must carry a tensor-norm rule
# judgment -> op classes that must carry an FP64-reference row (at the class's judged dtype)
FP64_REQUIRED = {"forward_accuracy": ("logprob",)}
REFERENCES = ("float32", "float64")  # what Contract.resolve(..., reference=) accepts
DTYPE_ALIASES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "half": "float16", "float": "float32"}


@attrs.frozen
class ProfileSpec:
    backend_family: str
    device_type: str
    execution_dtype: str


@attrs.frozen
class DtypePolicy:
    execution_dtype: str
    accumulation_dtype: str
    reference_dtype: str
    output_dtype: str
    logits_dtype: str
    logprob_dtype: str
    residual_stream_dtype: str
    tf32: str
    supported_dtypes: list[str]
    optional_dtypes: list[str]
    out_of_scope_dtypes: list[str]


@attrs.frozen
class Threshold:
    atol: float
    rtol: float
    # the judgment's tensor-norm rule for this row, filled in by Contract.resolve (never written in
    # a by_op_class row: it lives in judgments.<judgment>.tensor_norm)
    max_rel_l2: float | None = None
    min_cosine: float | None = None


@attrs.frozen
class NormLimit:
    max_rel_l2: float
    min_cosine: float


@attrs.frozen
class TensorNorm:
    """A per-tensor rule beside the elementwise atol/rtol: ``||cand - ref|| / ||ref||`` and the cosine
    of candidate and FP32 reference. Scale-aware: an atol larger than most elements cannot see a
    zeroed, halved or sign-flipped tensor; this rule always can (rel L2 1, 0.5, 2; cosine 0, 1, -1)."""

    note: str
    by_op_class: dict[str, dict[str, NormLimit]]


@attrs.frozen
class Fp64Reference:
    """A second elementwise row beside a judgment's own, against an FP64 reference computed from the
    candidate's same inputs (never in place of the FP32 reference's row: both must hold). For values
    kept in FP32 (the logprob class is FP32 in and out) the execution dtype's row is BF16-scale and
    cannot see an FP32-level error, and an FP32 reference is itself off by about as much as an FP32
    kernel; against FP64 an FP32-scale atol judges the kernel, not the reference. Rows are keyed by
    op class and the dtype the class's values are in (``Contract.judged_dtype``)."""

    note: str
    by_op_class: dict[str, dict[str, Threshold]]


@attrs.frozen
class Judgment:
    kind: str
    by_op_class: dict[str, dict[str, Threshold]]
    tensor_norm: TensorNorm | None = None
    fp64_reference: Fp64Reference | None = None


@attrs.frozen
class RolePair:
    lhs: str
    rhs: str


@attrs.frozen
class Roles:
    allowed: list[str]
    forbidden: list[str]
    pairs: dict[str, RolePair]


@attrs.frozen
class Metric:
    formula: str
    thresholds: dict[str, float]


@attrs.frozen
class AggregateSpec:
    dlogp: str
    clip_interval: list[float]
    metrics: dict[str, Metric]
    bitwise_bar: list[str]


@attrs.frozen
class Contract:
    schema: str
    version: str
    backend_private_tolerance_relaxation: bool
    profiles: dict[str, ProfileSpec]
    dtype_policy: DtypePolicy
    op_classes: dict[str, list[str]]
    judgments: dict[str, Judgment]
    comparison_roles: Roles
    aggregates: AggregateSpec
    # not part of the JSON: where it was read from and its fingerprint
    source: str = attrs.field(default="", kw_only=True)
    fingerprint: str = attrs.field(default="", kw_only=True)

    # ---- queries ------------------------------------------------------------------------
    @property
    def ops(self) -> list[str]:
        return [op for cls in OP_CLASSES for op in self.op_classes[cls]]

    def op_class(self, op: str) -> str:
        for cls, ops in self.op_classes.items():
            if op in ops:
                return cls
        raise ContractError("op_classes", f"unknown op {op!r}; expected one of {self.ops}")

    def family(self, profile: str) -> str:
        try:
            return self.profiles[profile].backend_family
        except KeyError:
            raise ContractError(
                "profiles", f"unknown profile {profile!r}; expected one of {sorted(self.profiles)}"
            ) from None

    def dtype_name(self, dtype) -> str:
        """'bfloat16' from torch.bfloat16, 'bf16' or 'bfloat16'; out-of-scope dtypes are an error."""
        name = str(dtype).replace("torch.", "")
        name = DTYPE_ALIASES.get(name, name)
        if name in self.dtype_policy.out_of_scope_dtypes:
            raise ContractError("dtype_policy.out_of_scope_dtypes", f"dtype {name} is out of scope for WS1")
        if name not in self.dtype_policy.supported_dtypes:
            raise ContractError(
                "dtype_policy.supported_dtypes",
                f"unknown dtype {name!r}; expected one of {self.dtype_policy.supported_dtypes}",
            )
        return name

    def resolve(self, judgment: str, op: str, dtype, reference: str = "float32") -> Threshold:
        """What a judgment of ``op`` at ``dtype`` must meet: (atol, rtol), and the judgment's
        tensor-norm limits (max_rel_l2, min_cosine) where it has that rule (else None).

        ``reference="float64"``: the judgment's FP64-reference row instead (atol, rtol only), judged
        against an FP64 reference beside the FP32 one (:meth:`references` says where one exists)."""
        if judgment not in self.judgments:
            raise ContractError("judgments", f"unknown judgment {judgment!r}; expected one of {sorted(self.judgments)}")
        if reference not in REFERENCES:
            raise ContractError(
                "dtype_policy.reference_dtype", f"unknown reference {reference!r}; expected one of {list(REFERENCES)}"
            )
        cls, name = self.op_class(op), self.dtype_name(dtype)
        j = self.judgments[judgment]
        if reference == "float64":
            row = (j.fp64_reference.by_op_class.get(cls, {}) if j.fp64_reference is not None else {}).get(name)
            if row is None:
                raise ContractError(
                    f"judgments.{judgment}.fp64_reference.by_op_class.{cls}.{name}",
                    f"no FP64-reference row for {op} ({cls}) at {name}",
                )
            return row
        th = j.by_op_class[cls][name]
        if j.tensor_norm is None:
            return th
        lim = j.tensor_norm.by_op_class[cls][name]
        return attrs.evolve(th, max_rel_l2=lim.max_rel_l2, min_cosine=lim.min_cosine)

    def references(self, judgment: str, op: str, dtype) -> tuple[str, ...]:
        """The references a judgment of ``op`` whose values are in ``dtype`` is judged against:
        ``("float32",)``, or ``("float32", "float64")`` where the contract has an FP64-reference row
        for the op's class at that dtype (the logprob class at float32). Each has its own row."""
        if judgment not in self.judgments:
            raise ContractError("judgments", f"unknown judgment {judgment!r}; expected one of {sorted(self.judgments)}")
        rule = self.judgments[judgment].fp64_reference
        has = rule is not None and self.dtype_name(dtype) in rule.by_op_class.get(self.op_class(op), {})
        return ("float32", "float64") if has else ("float32",)

    def judged_dtype(self, op: str, execution_dtype) -> str:
        """The dtype an op's values are in, whose tensor-norm row judges its gradient: the logprob class
        is FP32 in and out (``dtype_policy.logprob_dtype``) on every profile; every other op runs at
        the execution dtype. (Elementwise atol/rtol against the FP32 reference stay the execution dtype's
        row; the FP64-reference row, where there is one, is this dtype's; see ws1_matrix.judge._rows.)"""
        if self.op_class(op) == "logprob":
            return self.dtype_name(self.dtype_policy.logprob_dtype)
        return self.dtype_name(execution_dtype)

    def is_bitwise(self, judgment: str) -> bool:
        if judgment not in self.judgments:
            raise ContractError("judgments", f"unknown judgment {judgment!r}; expected one of {sorted(self.judgments)}")
        return self.judgments[judgment].kind == "bitwise"

    def aggregate_thresholds(self, dtype) -> dict[str, float]:
        name = self.dtype_name(dtype)
        return {m: self.aggregates.metrics[m].thresholds[name] for m in METRICS}

    @property
    def clip_interval(self) -> tuple[float, float]:
        lo, hi = self.aggregates.clip_interval
        return lo, hi

    def validate_role_pair(self, kind: str, lhs: str, rhs: str) -> None:
        """Raise unless (lhs, rhs) is exactly the contract's pair for this report kind."""
        roles = self.comparison_roles
        for side, role in (("lhs", lhs), ("rhs", rhs)):
            if role in roles.forbidden:
                raise ContractError(
                    "comparison_roles.forbidden", f"role {role!r} may not be a comparison side ({side})"
                )
            if role not in roles.allowed:
                raise ContractError("comparison_roles.allowed", f"unknown role {role!r} ({side})")
        if kind not in roles.pairs:
            raise ContractError(
                "comparison_roles.pairs", f"unknown report kind {kind!r}; expected one of {sorted(roles.pairs)}"
            )
        want = roles.pairs[kind]
        if (lhs, rhs) == (want.rhs, want.lhs):
            raise ContractError(
                f"comparison_roles.pairs.{kind}", f"reversed role pair: lhs must be {want.lhs!r}, rhs {want.rhs!r}"
            )
        if (lhs, rhs) != (want.lhs, want.rhs):
            raise ContractError(
                f"comparison_roles.pairs.{kind}", f"role pair ({lhs!r}, {rhs!r}) is not ({want.lhs!r}, {want.rhs!r})"
            )


# --------------------------------------------------------------------------------------------
# validation: structure (cattrs, strict) then the semantic rules below
# --------------------------------------------------------------------------------------------


def _check(cond: bool, path: str, rule: str) -> None:
    if not cond:
        raise ContractError(path, rule)


def _same_keys(got, want, path: str, what: str) -> None:
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    _check(not missing, path, f"missing {what} {missing}")
    _check(not extra, path, f"unknown {what} {extra}")


def validate(c: Contract) -> None:
    _check(c.schema == "ws1-tolerance-contract", "schema", f"expected 'ws1-tolerance-contract', got {c.schema!r}")
    _check(c.version != "", "version", "must not be empty")
    _check(
        c.backend_private_tolerance_relaxation is False,
        "backend_private_tolerance_relaxation",
        "must be false: every profile is judged by the same thresholds",
    )
    # profiles
    for name in REQUIRED_PROFILES:
        _check(name in c.profiles, "profiles", f"required profile {name!r} is missing")
    for name, p in c.profiles.items():
        path = f"profiles.{name}"
        _check(
            p.backend_family in FAMILIES,
            f"{path}.backend_family",
            f"unknown family {p.backend_family!r}; expected one of {list(FAMILIES)}",
        )
        if name in REQUIRED_PROFILES:
            _check(
                p.backend_family == REQUIRED_PROFILES[name],
                f"{path}.backend_family",
                f"{name} must be family {REQUIRED_PROFILES[name]!r}, got {p.backend_family!r}",
            )
        _check(
            p.device_type == FAMILY_DEVICE_TYPE[p.backend_family],
            f"{path}.device_type",
            f"family {p.backend_family} runs on {FAMILY_DEVICE_TYPE[p.backend_family]!r}, got {p.device_type!r}",
        )
    # dtype policy
    d = c.dtype_policy
    for field, want in (
        ("execution_dtype", "bfloat16"),
        ("accumulation_dtype", "float32"),
        ("reference_dtype", "float32"),
        ("output_dtype", "execution"),
        ("logits_dtype", "float32"),
        ("logprob_dtype", "float32"),
        ("residual_stream_dtype", "float32"),
        ("tf32", "disabled"),
    ):
        _check(getattr(d, field) == want, f"dtype_policy.{field}", f"must be {want!r}, got {getattr(d, field)!r}")
    _check(
        {"float32", "bfloat16"} <= set(d.supported_dtypes),
        "dtype_policy.supported_dtypes",
        "must include float32 and bfloat16",
    )
    _check(
        not set(d.out_of_scope_dtypes) & set(d.supported_dtypes),
        "dtype_policy.out_of_scope_dtypes",
        "a dtype cannot be both supported and out of scope",
    )
    for name, p in c.profiles.items():
        _check(
            p.execution_dtype in d.supported_dtypes,
            f"profiles.{name}.execution_dtype",
            f"unsupported dtype {p.execution_dtype!r}",
        )
    # op classes
    _same_keys(c.op_classes, OP_CLASSES, "op_classes", "op class(es)")
    seen: dict[str, str] = {}
    for cls, ops in c.op_classes.items():
        _check(len(ops) > 0, f"op_classes.{cls}", "an op class must list at least one op")
        for i, op in enumerate(ops):
            _check(op not in seen, f"op_classes.{cls}[{i}]", f"op {op!r} is already in class {seen.get(op)!r}")
            seen[op] = cls
    # judgments
    _same_keys(c.judgments, JUDGMENTS, "judgments", "judgment(s)")
    for jname, j in c.judgments.items():
        path = f"judgments.{jname}"
        _check(j.kind == JUDGMENTS[jname], f"{path}.kind", f"must be {JUDGMENTS[jname]!r}, got {j.kind!r}")
        _same_keys(j.by_op_class, OP_CLASSES, f"{path}.by_op_class", "op class(es)")
        for cls, by_dtype in j.by_op_class.items():
            _same_keys(by_dtype, d.supported_dtypes, f"{path}.by_op_class.{cls}", "dtype(s)")
            for dt, th in by_dtype.items():
                for field in ("atol", "rtol"):
                    v = getattr(th, field)
                    fpath = f"{path}.by_op_class.{cls}.{dt}.{field}"
                    _check(math.isfinite(v) and v >= 0, fpath, f"must be a finite number >= 0, got {v}")
                    if j.kind == "bitwise":
                        _check(v == 0, fpath, "an invariance threshold must be 0")
                _check(
                    th.max_rel_l2 is None and th.min_cosine is None,
                    f"{path}.by_op_class.{cls}.{dt}",
                    f"max_rel_l2/min_cosine belong in {path}.tensor_norm, not in an atol/rtol row",
                )
        _check(
            j.tensor_norm is not None or jname not in NORM_REQUIRED,
            f"{path}.tensor_norm",
            "required: the elementwise atol alone cannot see a zeroed, halved or sign-flipped gradient",
        )
        if j.tensor_norm is not None:
            _check(j.kind == "tolerance", f"{path}.tensor_norm", "only a tolerance judgment has a tensor-norm rule")
            _check(j.tensor_norm.note != "", f"{path}.tensor_norm.note", "must say how the limits were chosen")
            _same_keys(j.tensor_norm.by_op_class, OP_CLASSES, f"{path}.tensor_norm.by_op_class", "op class(es)")
            for cls, by_dtype in j.tensor_norm.by_op_class.items():
                _same_keys(by_dtype, d.supported_dtypes, f"{path}.tensor_norm.by_op_class.{cls}", "dtype(s)")
                for dt, lim in by_dtype.items():
                    lpath = f"{path}.tensor_norm.by_op_class.{cls}.{dt}"
                    # rel L2 1 is a zeroed tensor, 0.5 a halved one: a limit must sit below both
                    _check(
                        math.isfinite(lim.max_rel_l2) and 0 <= lim.max_rel_l2 < 0.5,
                        f"{lpath}.max_rel_l2",
                        f"must be in [0, 0.5) (a halved tensor has rel L2 0.5), got {lim.max_rel_l2}",
                    )
                    _check(
                        math.isfinite(lim.min_cosine) and 0 < lim.min_cosine <= 1,
                        f"{lpath}.min_cosine",
                        f"must be in (0, 1] (a zeroed tensor has cosine 0), got {lim.min_cosine}",
                    )
        _validate_fp64_reference(c, jname, j)
    # roles
    r = c.comparison_roles
    both = set(r.allowed) & set(r.forbidden)
    _check(not both, "comparison_roles", f"roles both allowed and forbidden: {sorted(both)}")
    for must in ("baseline", "singleton_aggregate"):
        _check(must in r.forbidden, "comparison_roles.forbidden", f"{must!r} must be forbidden")
    _same_keys(r.pairs, REPORT_KINDS, "comparison_roles.pairs", "report kind(s)")
    for kind, pair in r.pairs.items():
        path = f"comparison_roles.pairs.{kind}"
        for side in ("lhs", "rhs"):
            role = getattr(pair, side)
            _check(role not in r.forbidden, f"{path}.{side}", f"forbidden role {role!r} used as a comparison side")
            _check(role in r.allowed, f"{path}.{side}", f"role {role!r} is not in comparison_roles.allowed")
        want = REPORT_KINDS[kind]
        _check(
            (pair.lhs, pair.rhs) != (want[1], want[0]),
            path,
            f"reversed role pair: lhs must be {want[0]!r}, rhs {want[1]!r}",
        )
        _check((pair.lhs, pair.rhs) == want, path, f"must be lhs {want[0]!r}, rhs {want[1]!r}")
    # aggregates
    a = c.aggregates
    _same_keys(a.metrics, METRICS, "aggregates.metrics", "metric(s)")
    _check(
        len(a.clip_interval) == 2 and a.clip_interval[0] < 1.0 < a.clip_interval[1],
        "aggregates.clip_interval",
        f"must be [lo, hi] with lo < 1 < hi, got {a.clip_interval}",
    )
    for m, spec in a.metrics.items():
        _same_keys(spec.thresholds, d.supported_dtypes, f"aggregates.metrics.{m}.thresholds", "dtype(s)")
        for dt, v in spec.thresholds.items():
            _check(
                math.isfinite(v) and v >= 0,
                f"aggregates.metrics.{m}.thresholds.{dt}",
                f"must be a finite number >= 0, got {v}",
            )


def _validate_fp64_reference(c: Contract, jname: str, j: Judgment) -> None:
    """judgments.<j>.fp64_reference: rows of known classes and dtypes, each a finite atol/rtol no looser
    than the execution dtype's row it is judged beside (it adds a check, never relaxes one); required
    where FP64_REQUIRED says (the logprob class at the logprob dtype)."""
    path = f"judgments.{jname}.fp64_reference"
    d = c.dtype_policy
    rule = j.fp64_reference
    for cls in FP64_REQUIRED.get(jname, ()):
        want = d.logprob_dtype if cls == "logprob" else d.execution_dtype
        _check(
            rule is not None,
            path,
            f"required: the {cls} class is judged in {want}, and its {d.execution_dtype} row "
            f"cannot see a {want}-level error against the FP32 reference",
        )
        _check(cls in rule.by_op_class, f"{path}.by_op_class", f"missing op class(es) [{cls!r}] (required)")
        _check(want in rule.by_op_class[cls], f"{path}.by_op_class.{cls}", f"missing dtype(s) [{want!r}] (required)")
    if rule is None:
        return
    _check(j.kind == "tolerance", path, "only a tolerance judgment has an FP64-reference row")
    _check(rule.note != "", f"{path}.note", "must say how the row was chosen")
    extra = [k for k in rule.by_op_class if k not in OP_CLASSES]
    _check(not extra, f"{path}.by_op_class", f"unknown op class(es) {extra}")
    _check(len(rule.by_op_class) > 0, f"{path}.by_op_class", "must have at least one op class row")
    for cls, by_dtype in rule.by_op_class.items():
        extra = [k for k in by_dtype if k not in d.supported_dtypes]
        _check(not extra, f"{path}.by_op_class.{cls}", f"unknown dtype(s) {extra}")
        _check(len(by_dtype) > 0, f"{path}.by_op_class.{cls}", "must have at least one dtype row")
        beside = j.by_op_class[cls][d.execution_dtype]
        for dt, th in by_dtype.items():
            for field in ("atol", "rtol"):
                v = getattr(th, field)
                fpath = f"{path}.by_op_class.{cls}.{dt}.{field}"
                _check(math.isfinite(v) and v >= 0, fpath, f"must be a finite number >= 0, got {v}")
                limit = getattr(beside, field)
                _check(
                    v <= limit,
                    fpath,
                    f"{v:g} is looser than judgments.{jname}.by_op_class.{cls}.{d.execution_dtype}.{field} "
                    f"({limit:g}): an FP64-reference row adds a check beside it, never relaxes one",
                )
            _check(
                th.max_rel_l2 is None and th.min_cosine is None,
                f"{path}.by_op_class.{cls}.{dt}",
                "an FP64-reference row is elementwise: atol and rtol only",
            )


def fingerprint_of(data) -> str:
    """sha256 of the JSON with sorted keys and compact separators."""
    return hashlib.sha256(canonical_json(data)).hexdigest()


def contract_from_dict(data, source: str = "<dict>") -> Contract:
    if not isinstance(data, dict):
        raise ContractError("$", f"the contract must be a JSON object, got {type(data).__name__}")
    c = structure(data, Contract)
    validate(c)
    return attrs.evolve(c, source=source, fingerprint=fingerprint_of(data))


def load_contract(path: str | Path | None = None) -> Contract:
    """Read, structure and validate the contract (default: the repository's contracts/)."""
    p = Path(path) if path is not None else locate.contract_path()
    return contract_from_dict(read_json(p), source=str(p))

"""One outcome vocabulary for every gate of the harness: a judged comparison (:class:`Outcome`)
becomes a cell through one of three shapes — a raw-bit comparison (:func:`comparison_cell`), dlogp
aggregates (:func:`parity_cell`), or an error (:func:`error_cell`) — all green/red through
``ws1_contract.judged``, the one green/red cell helper."""

from __future__ import annotations

from dataclasses import dataclass, field

from ws1_contract import AggregateResult, Cell, Comparison, judged


@dataclass
class Outcome:
    """A judged comparison before it is a cell: whether it passed, a one-line detail, the largest
    errors, the raw-bit comparison it came from (if one), and facts for the evidence."""

    name: str
    passed: bool
    detail: str
    max_abs: float | None = None
    max_rel: float | None = None
    facts: dict = field(default_factory=dict)
    comparison: Comparison | None = None

    @classmethod
    def of(cls, name: str, cmp: Comparison, facts: dict | None = None) -> Outcome:
        """The outcome of one raw-bit (or yes/no) comparison."""
        return cls(name, cmp.passed, cmp.detail, cmp.max_abs, None, dict(facts or {}), cmp)


def comparison_cell(
    id: str, judgment: str, cmp: Comparison | Outcome, *, lhs: str | None = None, rhs: str | None = None, **extra
) -> Cell:
    """A raw-bit comparison as a cell (thresholds 0/0: invariance is bitwise); an Outcome adds its facts."""
    if isinstance(cmp, Outcome):
        extra, cmp = {**cmp.facts, **extra}, cmp.comparison
    return judged(
        id,
        judgment,
        cmp.passed,
        cmp.detail,
        lhs_role=lhs,
        rhs_role=rhs,
        thresholds={"atol": 0.0, "rtol": 0.0, "bitwise": True} if lhs else None,
        max_abs_err=cmp.max_abs,
        extra={**extra, **({"n_diff": cmp.n_diff, "first_diff": cmp.first_diff} if not cmp.passed else {})},
    )


def parity_cell(id: str, agg: AggregateResult, lhs: str, rhs: str, *, require_bitwise: bool = True, **extra) -> Cell:
    """dlogp aggregates as a cell: the contract's thresholds must hold, and (our bar) bitwise equality."""
    ok = agg.passed and (agg.bitwise_equal or not require_bitwise)
    detail = agg.detail + (
        "" if agg.bitwise_equal or not require_bitwise else "; FAIL: not bitwise (our bar is max|dlogp| == 0)"
    )
    return judged(
        id,
        "train_infer_parity",
        ok,
        detail,
        lhs_role=lhs,
        rhs_role=rhs,
        thresholds=agg.thresholds,
        max_abs_err=agg.max_abs_dlogp,
        extra={
            **extra,
            "aggregates": {
                "max_abs_dlogp": agg.max_abs_dlogp,
                "approx_kl0": agg.approx_kl0,
                "clipfrac0": agg.clipfrac0,
            },
            "bitwise_equal": agg.bitwise_equal,
            "tokens_different": agg.tokens_different,
            "n_active": agg.n_active,
        },
    )


def error_cell(id: str, judgment: str, exc: BaseException, **extra) -> Cell:
    """A judgment that raised: red, with the reason."""
    return judged(id, judgment, False, f"raised {type(exc).__name__}: {exc}", extra=extra)

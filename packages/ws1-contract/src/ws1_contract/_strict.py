"""A cattrs converter that refuses what JSON schemas usually let slide, and paths in plain dots.

cattrs would turn 5 into "5" and "0.1" into 0.1; a contract with the wrong type is a broken
contract, so primitives are checked, extra keys are forbidden, and errors carry the JSON path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Union

import cattrs
from cattrs import transform_error
from cattrs.v import format_exception

from .errors import ContractError

converter = cattrs.Converter(forbid_extra_keys=True)


def _str(v: Any, _t) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__} {v!r}")
    return v


def _float(v: Any, _t) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"expected a number, got {type(v).__name__} {v!r}")
    return float(v)


def _int(v: Any, _t) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an integer, got {type(v).__name__} {v!r}")
    return v


def _bool(v: Any, _t) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected true/false, got {type(v).__name__} {v!r}")
    return v


def _int_or_str(v: Any, _t) -> int | str:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise TypeError(f"expected an integer or a string, got {type(v).__name__} {v!r}")
    return v


converter.register_structure_hook(Union[int, str], _int_or_str)
converter.register_structure_hook(str, _str)
converter.register_structure_hook(float, _float)
converter.register_structure_hook(int, _int)
converter.register_structure_hook(bool, _bool)


def _dotted(path: str) -> str:
    # "$.judgments['forward_accuracy'].by_op_class" -> "judgments.forward_accuracy.by_op_class"
    p = re.sub(r"\['([^']*)'\]", r".\1", path)
    p = re.sub(r"\[(\d+)\]", r"[\1]", p)
    return p.lstrip("$").lstrip(".") or "$"


def _format(exc: BaseException, type_) -> str:
    if isinstance(exc, TypeError) and str(exc).startswith("expected "):
        return str(exc)  # our primitive hooks' own words, with the offending value
    return format_exception(exc, type_)


def structure(data: Any, cls: type) -> Any:
    try:
        return converter.structure(data, cls)
    except Exception as exc:  # noqa: BLE001 — re-raised as one error naming the path
        first = transform_error(exc, format_exception=_format)[0]
        rule, _, path = first.rpartition(" @ ")
        raise ContractError(_dotted(path), rule) from None


def read_json(path: str | Path) -> Any:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ContractError("$", f"{p}: file not found") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ContractError("$", f"{p}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, compact separators: the form every fingerprint hashes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

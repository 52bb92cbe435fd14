"""Readable forms of a C8 record: a Markdown table per profile (ops × judgments, per tier), an SVG
heat map of the matrix (written by hand: no plotting dependency), and a compact console grid.

Everything here reads the evidence JSON back through ``ws1_contract.read_evidence`` (a corrupt or
inconsistent file is an EvidenceError naming the file), so the pictures can never disagree with it.

    python -m ws1_matrix report evidence/cpu_bf16/c8_matrix.json   # rewrites the .md and .svg beside it
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from xml.sax.saxutils import escape

from ws1_contract import read_evidence
from ws1_contract.errors import EvidenceError

from .judge import JUDGMENTS

SHORT = {
    "forward_accuracy": "fwd acc",
    "forward_invariance": "fwd inv",
    "gradient_accuracy": "grad acc",
    "gradient_invariance": "grad inv",
}
COLORS = {"green": "#2e7d32", "red": "#c62828", "N/A": "#9e9e9e", None: "#ffffff"}
GATE = "c8_matrix"


def read_matrix(path: str | Path) -> dict:
    """A C8 record, checked: whole (read_evidence), a c8_matrix record, every cell placed in the matrix."""
    data = read_evidence(path)
    if data["gate"] != GATE:
        raise EvidenceError(f"{path}: a {data['gate']!r} record, not {GATE!r}")
    for c in data["cells"]:
        missing = [k for k in ("profile", "op", "tier", "judgment", "detail") if k not in c]
        if missing:
            raise EvidenceError(f"{path}: corrupt evidence (cell {c.get('id')!r} lacks {missing})")
    return data


def _layout(record: dict) -> tuple[list[str], list[str], dict]:
    cells = {(c["op"], c["tier"], c["judgment"]): c for c in record["cells"]}
    ops = list(dict.fromkeys(c["op"] for c in record["cells"]))
    tiers = list(dict.fromkeys(c["tier"] for c in record["cells"]))
    return ops, tiers, cells


def _counts_line(record: dict) -> str:
    c = record["counts"]
    return f"{'PASS' if record['passed'] else 'FAIL'} — green {c['green']}, red {c['red']}, N/A {c['N/A']}"


def _grouped(cells: list[dict], status: str) -> list[tuple[str, list[str]]]:
    """(detail, ids) for the cells of ``status``, identical details grouped."""
    by: dict[str, list[str]] = {}
    for c in cells:
        if c["status"] == status:
            by.setdefault(c["detail"], []).append(c["id"])
    return list(by.items())


def markdown(record: dict) -> str:
    ops, tiers, cells = _layout(record)
    prof = record["profile"]
    lines = [
        f"# C8 matrix · `{prof}`",
        "",
        f"**{_counts_line(record)}**  ",
        f"git `{str(record.get('git_sha'))[:12]}`{' (dirty)' if record.get('dirty') else ''}, "
        f"contract `{record['contract_fingerprint'][:12]}`, fixtures `{record['fixture_hash'][:12]}`, "
        f"{record.get('created_at', '')}, run `{record.get('run_id')}`",
        "",
    ]
    for tier in tiers:
        lines += [f"## {tier}", "", "| op | " + " | ".join(JUDGMENTS) + " |", "|---|" + "---|" * len(JUDGMENTS)]
        for op in ops:
            row = []
            for j in JUDGMENTS:
                c = cells.get((op, tier, j))
                row.append("—" if c is None else {"green": "green", "red": "**red**", "N/A": "N/A"}[c["status"]])
            lines.append(f"| `{op}` | " + " | ".join(row) + " |")
        lines.append("")
    for status, title in (("red", "Red cells"), ("N/A", "N/A cells (allowed reason only)")):
        groups = _grouped(record["cells"], status)
        if groups:
            lines += [f"## {title}", ""]
            for detail, ids in groups:
                who = f"`{ids[0]}`" if len(ids) == 1 else f"{len(ids)} cells (`{ids[0]}` … `{ids[-1]}`)"
                lines.append(f"- {who}: {detail.replace('|', '/')}")
            lines.append("")
    return "\n".join(lines)


def svg(records: list[dict]) -> str:
    """One heat map block per profile: rows = ops, columns = tier × judgment; hover shows the detail."""
    cw, ch, left, top_pad = 62, 20, 190, 64
    ncols = max(len(_layout(r)[1]) for r in records) * len(JUDGMENTS) if records else 0
    width = left + ncols * cw + 20
    parts, y = [], 10
    for rec in records:
        ops, tiers, cells = _layout(rec)
        parts.append(
            f'<text x="10" y="{y + 16}" font-size="15" font-weight="bold">C8 · {escape(rec["profile"])}: '
            f"{escape(_counts_line(rec))}</text>"
        )
        y0 = y + top_pad
        for ti, tier in enumerate(tiers):
            x0 = left + ti * len(JUDGMENTS) * cw
            parts.append(
                f'<text x="{x0 + 2 * cw}" y="{y0 - 26}" font-size="12" text-anchor="middle" '
                f'font-weight="bold">{escape(tier)}</text>'
            )
            for ji, j in enumerate(JUDGMENTS):
                parts.append(
                    f'<text x="{x0 + ji * cw + cw / 2}" y="{y0 - 8}" font-size="10" '
                    f'text-anchor="middle">{SHORT[j]}</text>'
                )
        for oi, op in enumerate(ops):
            yy = y0 + oi * ch
            parts.append(
                f'<text x="{left - 8}" y="{yy + 14}" font-size="11" text-anchor="end" '
                f'font-family="monospace">{escape(op)}</text>'
            )
            for ti, tier in enumerate(tiers):
                for ji, j in enumerate(JUDGMENTS):
                    c = cells.get((op, tier, j))
                    st = None if c is None else c["status"]
                    x = left + (ti * len(JUDGMENTS) + ji) * cw
                    tip = "missing" if c is None else f"{c['id']}: {st}: {c['detail']}"
                    parts.append(
                        f'<rect x="{x + 1}" y="{yy + 1}" width="{cw - 2}" height="{ch - 2}" fill="{COLORS[st]}" '
                        f'stroke="#555" stroke-width="0.5"><title>{escape(tip[:600])}</title></rect>'
                    )
                    label = {"green": "✓", "red": "✗", "N/A": "N/A", None: "?"}[st]
                    parts.append(
                        f'<text x="{x + cw / 2}" y="{yy + 14}" font-size="11" text-anchor="middle" '
                        f'fill="{"#000" if st is None else "#fff"}">{label}</text>'
                    )
        y = y0 + len(ops) * ch + 24
    lx = 10
    for st, name in (
        ("green", "green: executed, passed"),
        ("red", "red: failed or not executed"),
        ("N/A", "N/A: allowed reason"),
    ):
        parts.append(
            f'<rect x="{lx}" y="{y}" width="14" height="14" fill="{COLORS[st]}"/>'
            f'<text x="{lx + 20}" y="{y + 12}" font-size="11">{name}</text>'
        )
        lx += 210
    height = y + 30
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="#fff"/>\n' + "\n".join(parts) + "\n</svg>\n"
    )


def write_reports(json_path: str | Path) -> tuple[Path, Path]:
    """Read a C8 record back and write ``c8_matrix.md`` and ``c8_matrix.svg`` beside it."""
    p = Path(json_path)
    rec = read_matrix(p)
    md, sv = p.with_suffix(".md"), p.with_suffix(".svg")
    md.write_text(markdown(rec) + "\n")
    sv.write_text(svg([rec]))
    return md, sv


def write_combined(paths: list[Path], root: Path) -> tuple[Path, Path]:
    """All profiles' matrices in one Markdown file and one figure at the evidence root — of one run only."""
    recs = [read_matrix(p) for p in paths]
    runs = sorted({str(r.get("run_id")) for r in recs})
    if len(runs) != 1:
        raise EvidenceError(
            f"{root}: the C8 records to combine come from {len(runs)} runs ({', '.join(runs)}): one run only"
        )
    md, sv = root / f"{GATE}.md", root / f"{GATE}.svg"
    md.write_text("\n\n".join(markdown(r) for r in recs) + "\n")
    sv.write_text(svg(recs))
    return md, sv


def grid(cells, profile: str) -> str:
    """A compact console grid: one line per op, G/R/- per judgment and tier."""
    recs = [c.to_dict() if hasattr(c, "to_dict") else c for c in cells]
    ops, tiers, by = _layout({"cells": recs})
    sym = {"green": "G", "red": "R", "N/A": "-"}
    head = "  " + " " * 22 + "   ".join(f"{t:<11}" for t in tiers)
    sub = "  " + " " * 22 + "   ".join(" ".join(("fa", "fi", "ga", "gi")) for _ in tiers)
    lines = [head, sub]
    for op in ops:
        row = "   ".join(
            " ".join(f"{sym.get((by.get((op, t, j)) or {}).get('status'), '?'):>2}" for j in JUDGMENTS) for t in tiers
        )
        lines.append(f"  {op:<22}{row}")
    return "\n".join(lines)


def print_summary(run, path: Path, out=sys.stdout) -> None:
    """gate_main's printer for C8: counts, the grid, red reasons grouped (not 96 lines per profile)."""
    c = Counter(cell.status for cell in run.cells)
    print(
        f"\n{run.gate} · {run.profile}: {'PASS' if run.passed else 'FAIL'}  "
        f"(green {c['green']}, red {c['red']}, N/A {c['N/A']}; G green, R red, - N/A)",
        file=out,
    )
    print(grid(run.cells, run.profile), file=out)
    for detail, ids in _grouped([x.to_dict() for x in run.cells], "red")[:12]:
        d = detail if len(detail) <= 140 else detail[:137] + "..."
        print(f"  red ×{len(ids):<3} {ids[0] if len(ids) == 1 else f'{ids[0]} …'}: {d}", file=out)
    print(f"  evidence: {path}", file=out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ws1_matrix report EVIDENCE/<profile>/c8_matrix.json", file=sys.stderr)
        return 2
    md, sv = write_reports(argv[0])
    print(f"wrote {md} and {sv}")
    return 0

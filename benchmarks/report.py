"""Issue 24's speed table and the benchmarks' targets from one GPU run's JSON, before -> now; with --docs, the
"Measured" sections of docs/cuda.md and docs/triton.md.

    python benchmarks/report.py RUN_DIR [--before DIR] [--docs] [--json]

RUN_DIR (and DIR) hold what benchmarks/bench_cuda.py, bench_triton.py and bench_rl.py wrote (file names containing
``bench_cuda``, ``bench_triton``, ``bench_rl``, ending in .json; e.g. a GPU run's evidence/devices/<date>-h200/).
--before defaults to the first H200 run, evidence/devices/2026-12-04-h200 (the numbers issue 24 was filed with).

Prints, for people:
  * the issue's table — speed = contender time / ws1 time per case and GPU profile, the graph-mode row where the
    case has one (else eager, marked ``e``), ``before -> now``; a case a run does not hold is ``-`` (a crashed or
    skipped benchmark group is named under the table from the run's ``errors``);
  * every target the benchmarks judged, MET / MISS / ABSENT, with the run's times and roofline;
  * the candidates (kernels measured beside what runs, not used): speed over what runs, bits equal or not.
--json: the same as one JSON object on stdout instead. --docs: rewrites the block between
``<!-- measured:begin -->`` and ``<!-- measured:end -->`` in docs/cuda.md (cuda_bf16) and docs/triton.md
(triton_cuda_bf16) with every row of the run that has a roofline (GEMMs, attention): ws1 and contender times,
speed, roofline, roofline / ws1 and the target's verdict, headed by the device, the software and the run folder.
Exit 2 with one line when RUN_DIR holds no benchmark JSON or a file is not a benchmark's JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_RUN = ROOT / "evidence" / "devices" / "2026-12-04-h200"
PROFILES = {"cuda_bf16": "bench_cuda", "triton_cuda_bf16": "bench_triton"}
DOCS = {"cuda_bf16": ROOT / "docs" / "cuda.md", "triton_cuda_bf16": ROOT / "docs" / "triton.md"}
BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"

# The issue's rows: (label, the benchmark cases joined by " / "). A case name matches a row's case exactly or with
# bench_cuda's " vs SDPA flash" suffix (the two scripts name attention rows differently).
GEMM = "det_gemm M{M} K4096 N{N}"
ISSUE_ROWS = [
    (
        "det_gemm vs cuBLAS, K 4096, N 4096, M = 1 / 59 / 256 / 4096",
        [GEMM.format(M=m, N=4096) for m in (1, 59, 256, 4096)],
    ),
    ("the same at N 12288", [GEMM.format(M=m, N=12288) for m in (1, 59, 256, 4096)]),
    ("attention prefill B1 S2048 vs SDPA", ["attention prefill B1 S2048"]),
    ("attention decode B32 Skv2048 vs SDPA", ["attention decode B32 Skv2048"]),
    ("logprob T2048 V151936 vs log_softmax + gather", ["logprob T2048 V151936"]),
    ("batch_invariant_logp T2048", ["batch_invariant_logp T2048 V151936"]),
    # rows the issue's targets add (not in its table: they were not measured, or did not exist, in the first run)
    ("lm_head M256 / M4096 vs cuBLAS BF16 -> FP32", ["lm_head M256 K4096 V151936", "lm_head M4096 K4096 V151936"]),
    (
        "lm_head backward dx / dW M2048 vs cuBLAS FP32",
        [
            "lm_head backward dx FP32 M2048 V151936 K4096 vs cuBLAS FP32",
            "lm_head backward dW FP32 M2048 V151936 K4096 vs cuBLAS FP32",
        ],
    ),
    ("attention decode B1 Skv32768 vs SDPA", ["attention decode B1 Skv32768"]),
    ("attention backward B1 S2048 vs SDPA", ["attention backward B1 S2048"]),
]


class ReportError(Exception):
    """A run folder or file that is not what the report reads (one line, exit 2)."""


def load_run(folder: Path) -> dict:
    """{profile or "rl": its benchmark's JSON} from every matching file of the folder, merged in name order (a
    later file's row for the same case and mode replaces an earlier one's: a rerun of one group, e.g. the chain)."""
    if not folder.is_dir():
        raise ReportError(f"{folder}: not a folder")
    run = {}
    for key, stem in {**PROFILES, "rl": "bench_rl"}.items():
        merged: dict = {}
        for path in sorted(p for p in folder.glob(f"*{stem}*.json") if p.is_file()):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise ReportError(f"{path}: not readable JSON ({exc})") from None
            if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
                raise ReportError(f"{path}: no 'cases' list: not a benchmark's JSON")
            if not merged:
                merged = {
                    "host": data.get("host", {}),
                    "cases": [],
                    "targets": [],
                    "errors": {},
                    "files": [],
                    "incomplete": [],
                }
            if data.get("complete") is False:  # cut short by its time limit (harness.Run); absent in older runs
                merged["incomplete"].append(path.name)
            seen = {(r.get("case"), r.get("mode")): i for i, r in enumerate(merged["cases"])}
            for r in data["cases"]:
                k = (r.get("case"), r.get("mode"))
                if k in seen:
                    merged["cases"][seen[k]] = r
                else:
                    seen[k] = len(merged["cases"])
                    merged["cases"].append(r)
            merged["targets"] += data.get("targets") or []
            merged["errors"].update(data.get("errors") or {})
            merged["files"].append(path.name)
        if merged:
            run[key] = merged
    if not run:
        raise ReportError(f"{folder}: no benchmark JSON (*bench_cuda*.json, *bench_triton*.json, *bench_rl*.json)")
    return run


def basis(host: dict) -> str:
    """The roofline's ceilings as the run recorded them (measured on its card), or the constants runs used before
    they measured their own (the first H200 run's)."""
    c = host.get("ceilings")
    if not c:
        return "max(FLOPs / 790 TFLOP/s, bytes / 4.3 TB/s) (the first H200 run's ceilings; this run recorded none)"
    return (
        f"max(FLOPs / {c['bf16_tflops']:.0f} TFLOP/s, bytes / {c['hbm_tbs']:.2f} TB/s) "
        f"({c.get('source', 'source not recorded')})"
    )


def devices(now: dict, before: dict) -> list[str]:
    """One line per profile whose two runs ran on different devices: their speeds are each a ratio on its own card
    (ws1 against cuBLAS / SDPA there), comparable as ratios; their times are not."""
    out = []
    for prof in PROFILES:
        a, b = before.get(prof, {}).get("host", {}).get("device"), now.get(prof, {}).get("host", {}).get("device")
        if a and b and a != b:
            out.append(
                f"  {prof}: before ran on {a}, now on {b}: each speed is a ratio on its own card; times differ by card"
            )
    return out


def find(rows: list[dict], case: str) -> dict | None:
    """The row of ``case`` (exact name, or with " vs SDPA flash"): graph mode if the case has one, else eager."""
    hits = [r for r in rows if r.get("case") in (case, f"{case} vs SDPA flash") and r.get("speed") is not None]
    for mode in ("graph", "eager"):
        for r in hits:
            if r.get("mode") == mode:
                return r
    return hits[0] if hits else None


def _fmt(r: dict | None) -> str:
    if r is None:
        return "-"
    v = r["speed"]
    return (f"{v:.3f}" if v < 0.1 else f"{v:.2f}") + ("e" if r.get("mode") == "eager" else "")


def issue_table(now: dict, before: dict) -> list[dict]:
    out = []
    for label, cases in ISSUE_ROWS:
        row = {"case": label}
        for prof in PROFILES:
            cells = {}
            for when, run in (("before", before), ("now", now)):
                rows = run.get(prof, {}).get("cases", [])
                found = [find(rows, c) for c in cases]
                cells[when] = {
                    "text": " / ".join(_fmt(r) for r in found),
                    "speeds": [None if r is None else r["speed"] for r in found],
                    "modes": [None if r is None else r["mode"] for r in found],
                }
            row[prof] = cells
        out.append(row)
    return out


def targets(run: dict) -> list[dict]:
    out = []
    for key, data in run.items():
        for t in data.get("targets", []):
            out.append({"benchmark": key, **t})
    return out


def candidates(run: dict) -> list[dict]:
    """The candidate rows (kernels measured beside the ones the ops run, not used by them: cuda's n32 GEMM tile,
    Triton's 64x32 tile and its FP32-dy split), graph mode where a case has one: the two facts that decide an
    adoption, the candidate's speed over what runs today and whether its bits equal it (None: another numerics,
    judged by its recorded error instead)."""
    out = []
    for prof, data in run.items():
        rows = [r for r in data.get("cases", []) if r.get("kind") == "candidate" and r.get("speed") is not None]
        for case in dict.fromkeys(r["case"] for r in rows):
            r = find(rows, case)
            bits = r.get("candidate_bits_equal_narrow", r.get("candidate_bits_equal_fixed"))
            out.append(
                {
                    "benchmark": prof,
                    "case": case,
                    "mode": r["mode"],
                    "speed": r["speed"],
                    "bits_equal": bits,
                    "speed_vs_cublas": r.get("speed_vs_cublas"),
                    "evidence": (
                        "not adoptable"
                        if bits is False
                        else "faster" + (", same bits" if bits else "")
                        if r["speed"] > 1
                        else "not faster"
                    ),
                }
            )
    return out


def _verdict(t: dict) -> str:
    return "ABSENT" if t.get("met") is None else "MET" if t["met"] else "MISS"


def measured_block(data: dict, folder: str, tg: list[dict]) -> str:
    """The generated Markdown of one profile's run: every row with a roofline, then the benchmark's errors."""
    host = data.get("host", {})
    soft = ", ".join(f"{k} {host[k]}" for k in ("torch", "triton", "flash_attn") if host.get(k))
    cut = (
        f" **Incomplete**: {', '.join(data['incomplete'])} stopped by the time limit." if data.get("incomplete") else ""
    )
    head = (
        f"Run: `{folder}` ({', '.join(data.get('files', []))}) — {host.get('device', '?')} (capability "
        f"{host.get('capability')}), {soft or 'versions not recorded'}; speed = contender time / ws1 time (medians), "
        f"roofline = {basis(host)}.{cut}"
    )
    lines = [
        head,
        "",
        "| case | mode | ws1 ms | contender | contender ms | speed | roofline ms | roofline / ws1 | target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = {}  # (case, mode) -> verdict: a target names its mode last, "(graph)" or "(eager)"
    for t in tg:
        m = re.match(r"(.*?): speed >=.*\((graph|eager)\)\s*$", t.get("target", ""))
        if m:
            verdicts[m.group(1), m.group(2)] = f"{_verdict(t)} (>= {t['target'].split('>=')[1].split()[0]})"
    for r in data.get("cases", []):
        if r.get("roofline_ms") is None or r.get("ws1_ms") is None:
            continue
        verdict = verdicts.get((r["case"], r.get("mode")), "")
        ratio = r.get("ws1_over_roofline") or r["roofline_ms"] / r["ws1_ms"]
        lines.append(
            f"| {r['case']} | {r['mode']} | {r['ws1_ms']:.4f} | {r.get('vs', 'torch')} | {r['torch_ms']:.4f} | "
            f"{r['speed']:.3f} | {r['roofline_ms']:.4f} | {ratio:.2f} | {verdict} |"
        )
    for group, err in (data.get("errors") or {}).items():
        lines.append(f"\nBenchmark group `{group}` failed in this run: {err}")
    return "\n".join(lines)


def replace_block(text: str, block: str, path: Path) -> str:
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ReportError(f"{path}: needs exactly one {BEGIN} ... {END} block")
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:a] + "\n" + block + "\n" + text[b:]


def render(
    table: list[dict],
    tg: list[dict],
    now_dir: str,
    before_dir: str,
    errors: dict,
    cands: list[dict] | None = None,
    notes: list[str] | None = None,
) -> str:
    lines = [
        "Issue 24's table: speed = contender time / ws1 time, graph mode (e: eager), "
        f"before ({before_dir}) -> now ({now_dir})",
        *(notes or []),
        "",
        "| case | cuda_bf16 | triton_cuda_bf16 |",
        "|---|---|---|",
    ]
    for row in table:
        cells = [f"{row[p]['before']['text']} -> {row[p]['now']['text']}" for p in PROFILES]
        lines.append(f"| {row['case']} | {cells[0]} | {cells[1]} |")
    for prof, err in errors.items():
        for group, why in err.items():
            lines.append(f"  {prof}: benchmark group '{group}' failed: {why}")
    lines += [
        "",
        f"Targets ({sum(1 for t in tg if t.get('met'))} MET, {sum(1 for t in tg if t.get('met') is False)} MISS, "
        f"{sum(1 for t in tg if t.get('met') is None)} ABSENT):",
    ]
    for t in tg:
        times = (
            f"  (ws1 {t['ws1_ms']:.4f} ms, contender {t['torch_ms']:.4f} ms, roofline {t['roofline_ms']:.4f} ms)"
            if "ws1_ms" in t
            else ""
        )
        value = "" if t.get("value") is None else f" = {t['value']:.3f}"
        lines.append(
            f"  {_verdict(t):<6} [{t['benchmark']}{'/' + t['profile'] if t.get('profile') else ''}] "
            f"{t['target']}{value}{times}"
        )
    if cands:
        lines += ["", "Candidates (not used by the kernels; speed = time of what runs today / the candidate's):"]
        for c in cands:
            extra = "" if c["speed_vs_cublas"] is None else f", {c['speed_vs_cublas']:.2f}x cuBLAS"
            bits = "n/a" if c["bits_equal"] is None else "equal" if c["bits_equal"] else "DIFFER"
            lines.append(
                f"  [{c['benchmark']}] {c['case']} ({c['mode']}): speed {c['speed']:.2f}{extra}, bits {bits}: "
                f"{c['evidence']}"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="the run's folder (the benchmarks' JSON files)")
    ap.add_argument("--before", type=Path, default=FIRST_RUN, help="the earlier run (default: the first H200 run)")
    ap.add_argument(
        "--docs", action="store_true", help="rewrite the Measured blocks of docs/cuda.md and docs/triton.md"
    )
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the text")
    args = ap.parse_args(argv)
    try:
        now = load_run(args.run)
        before = load_run(args.before) if args.before.is_dir() else {}
        table, tg, cands = issue_table(now, before), targets(now), candidates(now)
        errors = {p: now[p].get("errors") or {} for p in PROFILES if p in now and now[p].get("errors")}
        notes = devices(now, before) + [
            f"  {k}: incomplete run ({', '.join(v['incomplete'])}: stopped by its time limit; "
            "the groups it did not finish are in its errors)"
            for k, v in now.items()
            if v.get("incomplete")
        ]
        if args.docs:
            for prof, path in DOCS.items():
                if prof not in now:
                    print(
                        f"report: {prof}: no {PROFILES[prof]} JSON in {args.run}; {path.name} left as it is",
                        file=sys.stderr,
                    )
                    continue
                block = measured_block(now[prof], str(args.run), [t for t in tg if t["benchmark"] == prof])
                path.write_text(replace_block(path.read_text(), block, path))
                print(f"report: wrote the Measured block of {path.relative_to(ROOT)}", file=sys.stderr)
    except ReportError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(
            json.dumps(
                {
                    "run": str(args.run),
                    "before": str(args.before),
                    "issue_table": table,
                    "targets": tg,
                    "candidates": cands,
                    "errors": errors,
                    "notes": [n.strip() for n in notes],
                    "ceilings": {k: v.get("host", {}).get("ceilings") for k, v in now.items()},
                },
                indent=1,
            )
        )
    else:
        print(render(table, tg, str(args.run), str(args.before), errors, cands, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())

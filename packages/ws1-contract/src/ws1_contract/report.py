"""One report per profile from its evidence files: ``report.md`` and a self-contained ``report.html``.

    python -m ws1_contract report evidence/cpu_bf16          (C11 writes it at the end of its flow)

Every evidence record in the folder is read back through :func:`read_evidence` (a corrupt file is
an error, never skipped). The report shows each gate's verdict and counts, its red cells, the C8
matrix (its Markdown table and SVG heat map when present), the C10 summary, and — for any C10 record
whose chain drifted (a red run, or the negative control) — the per-layer first-drift view: for
each (layer, node), how many tokens' bits differ from the canonical run.

Only the records of one run are shown (``run_id``: by default the run of the folder's
``c11_ci.json``); records of other runs left in the folder are counted as left out, never shown.
"""

from __future__ import annotations

import html
from pathlib import Path

from .errors import EvidenceError
from .evidence import read_evidence

GATE_ORDER = (
    "c1_contract",
    "c2_manifest",
    "c2_runtime",
    "c3_forward",
    "c4_gradient",
    "c5_inventory",
    "c6_decode_prefill",
    "c7_stateful_kv",
    "c9_model",
    "c8_matrix",
    "c10_chain_gate",
    "c10_negative_control",
    "c11_ci",
)


def drift_columns(d: dict) -> list[str]:
    """The first-drift view's columns: the chain's trace points in the order computed, as the C10
    record names them (``nodes``, from ws1_qwen3.model.NODE_ORDER); else the order they first appear in the map."""
    if d.get("nodes"):
        return list(d["nodes"])
    seen: dict[str, None] = {}
    for row in d.get("map") or []:
        seen.setdefault(row["node"], None)
    return list(seen)


def load_records(folder: Path, run_id: str | None = None) -> list[tuple[Path, dict]]:
    """The folder's gate records (all of them, or only those of ``run_id``)."""
    recs = []
    for p in sorted(folder.glob("*.json")):
        try:
            recs.append((p, read_evidence(p)))
        except EvidenceError as exc:
            if "schema" in str(exc) and "is not" in str(exc):
                continue  # not a gate record (e.g. a benchmark's JSON)
            raise
    if run_id is not None:
        recs = [(p, r) for p, r in recs if r.get("run_id") == run_id]
    order = {g: i for i, g in enumerate(GATE_ORDER)}
    return sorted(recs, key=lambda pr: (order.get(pr[1]["gate"], 99), pr[1]["gate"]))


def default_run(folder: Path) -> str | None:
    """The run of the folder's C11 record, if there is one (the report then shows that run only)."""
    p = folder / "c11_ci.json"
    return read_evidence(p).get("run_id") if p.is_file() else None


def _verdict(rec: dict) -> str:
    if rec["gate"] == "c10_negative_control":
        return "red (expected)" if not rec["passed"] else "GREEN — the negative control must be red"
    return "PASS" if rec["passed"] else "FAIL"


def drift_table(m: list[dict]) -> tuple[list[int], dict[tuple[int, str], dict]]:
    layers = sorted({r["layer"] for r in m})
    return layers, {(r["layer"], r["node"]): r for r in m}


def _layer_name(layer: int, cells: dict) -> str:
    """input (embedding), head (final norm, lm_head) or the decoder layer's number."""
    if layer < 0:
        return "input"
    return "head" if any((layer, n) in cells for n in ("final_norm", "lm_head")) else f"layer {layer}"


def _mixed(recs: list[tuple[Path, dict]]) -> str | None:
    """A warning when the records were written at different commits or under different contracts."""
    shas = sorted({r["git_sha"][:12] for _, r in recs})
    contracts = {r["contract_fingerprint"] for _, r in recs}
    parts = []
    if len(shas) > 1:
        parts.append(f"records from {len(shas)} commits ({', '.join(shas)})")
    if len(contracts) > 1:
        parts.append(f"records under {len(contracts)} contracts")
    return "; ".join(parts) + ": they do not describe one state of the code" if parts else None


def render_markdown(folder: Path, recs: list[tuple[Path, dict]], note: str | None = None) -> str:
    profile = recs[0][1]["profile"] if recs else folder.name
    out = [f"# WS1 report — `{profile}`", ""] + ([note, ""] if note else [])
    if recs:
        r0 = recs[0][1]
        out += [
            f"git `{r0['git_sha'][:12]}`{' (dirty)' if r0['dirty'] else ''} · "
            f"contract `{r0['contract_fingerprint'][:16]}` · fixtures `{r0['fixture_hash'][:16]}`",
            "",
        ]
        mixed = _mixed(recs)
        if mixed:
            out += [f"**Warning:** {mixed}", ""]
    out += ["| gate | verdict | green | red | N/A | wall s | evidence |", "|---|---|---|---|---|---|---|"]
    for p, r in recs:
        c = r["counts"]
        out.append(
            f"| {r['gate']} | {_verdict(r)} | {c['green']} | {c['red']} | {c['N/A']} | "
            f"{r.get('wall_time_s', '')} | `{p.name}` |"
        )
    out.append("")
    for p, r in recs:
        if r["gate"] in ("c10_chain_gate", "c10_negative_control"):
            out += _c10_md(r)
        if r["gate"] == "c8_matrix":
            md, svg = p.with_suffix(".md"), p.with_suffix(".svg")
            out += ["## C8 matrix", ""]
            if svg.exists():
                out += [f"![C8 matrix]({svg.name})", ""]
            if md.exists():  # its headings one level down, under this section
                out += [
                    "#" + line if line.startswith("#") else line for line in md.read_text().strip().splitlines()
                ] + [""]
    for _p, r in recs:
        red = [c for c in r["cells"] if c["status"] == "red"]
        if red and r["gate"] != "c10_negative_control":
            out += [f"## {r['gate']}: {len(red)} red", ""]
            out += [f"- `{c['id']}` — {c['detail']}" for c in red[:40]]
            if len(red) > 40:
                out.append(f"- … {len(red) - 40} more in the evidence file")
            out.append("")
    return "\n".join(out) + "\n"


def _c10_items(r: dict, code, bold, text) -> list[str]:
    """The C10 summary lines, formatted by ``code``/``bold``/``text`` (Markdown or escaped HTML)."""
    ti, gi = r.get("train_infer") or {}, r.get("gradient_invariance") or {}
    out = [
        f"mode {bold(r.get('mode'))}, model {code(r.get('model'))}, gradients compared as {text(r.get('grad_compare'))}"
    ]
    if ti:
        out.append(
            f"train/infer max |Δlogp| {ti['max_abs_dlogp']:.3e} — {'bitwise' if ti['bitwise'] else 'NOT bitwise'}"
        )
    if gi:
        out.append(
            f"gradient invariance: {gi['min_bitwise']} of {gi['of']} parameters bitwise (worst of {gi['cells']} cells)"
        )
    fd = r.get("first_drift")
    out.append(
        "first_drift: "
        + (
            "null"
            if fd is None
            else f"{code(fd.get('cell', '?'))} layer {fd['layer']} {code(fd['node'])}, "
            f"{fd['tokens_differ']} of {fd['tokens']} tokens, first at {text(_key(fd['first_key']))}"
        )
    )
    return out


def _key(k) -> str:
    return f"sample {k['sample_rank']}, position {k['position']}" if isinstance(k, dict) else str(k)


def _c10_title(r: dict) -> str:
    """The section's heading names the control the record holds (``candidate``): the C11 flow runs one of
    our variant kernels, not plain PyTorch ops, and a heading that guessed said the wrong one."""
    if r["gate"] != "c10_negative_control":
        return "C10 chain gate"
    return f"C10 negative control ({r.get('candidate') or 'candidate not recorded'}: must be red)"


def _c10_md(r: dict) -> list[str]:
    out = [f"## {_c10_title(r)}", ""]
    out += [f"- {x}" for x in _c10_items(r, lambda s: f"`{s}`", lambda s: f"**{s}**", str)]
    out.append("")
    for d in (r.get("drift_maps") or [])[:1]:
        out += [
            f"First-drift view — `{d['cell']}` vs the canonical run (tokens whose bits differ / tokens compared):",
            "",
        ]
        layers, cells = drift_table(d["map"])
        columns = drift_columns(d)
        out.append("| | " + " | ".join(columns) + " |")
        out.append("|---" * (len(columns) + 1) + "|")
        for layer in layers:
            row = []
            for node in columns:
                c = cells.get((layer, node))
                row.append(
                    ""
                    if c is None
                    else (f"**{c['tokens_differ']}**/{c['tokens']}" if c["tokens_differ"] else f"0/{c['tokens']}")
                )
            out.append(f"| {_layer_name(layer, cells)} | " + " | ".join(row) + " |")
        out.append("")
    return out


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
.green{background:#d8f3dc}.red{background:#ffd6d6}.na{background:#eee}.hot{background:#ff8a8a;font-weight:bold}
code{background:#f4f4f4;padding:0 3px}details{margin:.5em 0}
.wide{overflow-x:auto}table.drift th,table.drift td{font-size:10px;padding:2px 3px;text-align:center}
table.drift th{max-width:5.5em;vertical-align:bottom}table.drift tr>th:first-child{white-space:nowrap}
td.none{background:#fafafa}td.first{outline:3px solid #000}"""


def render_html(folder: Path, recs: list[tuple[Path, dict]], note: str | None = None) -> str:
    e = html.escape
    profile = recs[0][1]["profile"] if recs else folder.name
    parts = [
        f"<!doctype html><meta charset=utf-8><title>WS1 report {e(profile)}</title><style>{_CSS}</style>",
        f"<h1>WS1 report — <code>{e(profile)}</code></h1>",
    ] + ([f"<p>{e(note.replace('`', ''))}</p>"] if note else [])
    if recs:
        r0 = recs[0][1]
        parts.append(
            f"<p>git <code>{e(r0['git_sha'][:12])}</code>{' (dirty)' if r0['dirty'] else ''} · contract "
            f"<code>{e(r0['contract_fingerprint'][:16])}</code> · "
            f"fixtures <code>{e(r0['fixture_hash'][:16])}</code></p>"
        )
        mixed = _mixed(recs)
        if mixed:
            parts.append(f"<p class=red><b>Warning:</b> {e(mixed)}</p>")
    parts.append("<table><tr><th>gate<th>verdict<th>green<th>red<th>N/A<th>wall s<th>evidence</tr>")
    for p, r in recs:
        c = r["counts"]
        ok = r["passed"] != (r["gate"] == "c10_negative_control")
        parts.append(
            f"<tr class={'green' if ok else 'red'}><td>{e(r['gate'])}<td>{e(_verdict(r))}<td>{c['green']}<td>{c['red']}"
            f"<td>{c['N/A']}<td>{r.get('wall_time_s', '')}<td><code>{e(p.name)}</code></tr>"
        )
    parts.append("</table>")
    for p, r in recs:
        if r["gate"] in ("c10_chain_gate", "c10_negative_control"):
            parts.append(_c10_html(r))
        if r["gate"] == "c8_matrix" and p.with_suffix(".svg").exists():
            parts.append("<h2>C8 matrix</h2>" + p.with_suffix(".svg").read_text())
    for _p, r in recs:
        rows = "".join(
            f"<tr class={'green' if c['status'] == 'green' else 'red' if c['status'] == 'red' else 'na'}>"
            f"<td>{e(c['status'])}<td><code>{e(c['id'])}</code><td>{e(str(c['detail']))}</tr>"
            for c in r["cells"]
        )
        red = r["counts"]["red"]
        parts.append(
            f"<details{' open' if red and r['gate'] != 'c10_negative_control' else ''}><summary>{e(r['gate'])}: "
            f"{len(r['cells'])} cells, {red} red</summary><table>{rows}</table></details>"
        )
    return "\n".join(parts) + "\n"


def _c10_html(r: dict) -> str:
    e = html.escape
    items = _c10_items(r, lambda s: f"<code>{e(str(s))}</code>", lambda s: f"<b>{e(str(s))}</b>", lambda s: e(str(s)))
    head = [f"<h2>{e(_c10_title(r))}</h2><ul>"] + [f"<li>{x}</li>" for x in items] + ["</ul>"]
    for d in (r.get("drift_maps") or [])[:1]:
        layers, cells = drift_table(d["map"])
        head.append(
            f"<p>First-drift view — <code>{e(d['cell'])}</code> vs the canonical run "
            "(tokens whose bits differ / tokens compared; the first drifting node outlined):</p>"
            "<div class=wide><table class=drift><tr><th>"
        )
        # node names break after "_" so 23 columns fit a page; the kind (the ws1 op) under each
        columns = drift_columns(d)
        head.append("".join(f"<th title='{e(n)}'>{e(n).replace('_', '_<wbr>')}</th>" for n in columns) + "</tr>")
        first = (d.get("layer"), d.get("node"))
        for layer in layers:
            row = f"<tr><th>{e(_layer_name(layer, cells))}</th>"
            for node in columns:
                c = cells.get((layer, node))
                if c is None:
                    row += "<td class=none></td>"
                else:
                    cls = ("hot first" if (layer, node) == first else "hot") if c["tokens_differ"] else "green"
                    row += f"<td class='{cls}'>{c['tokens_differ']}/{c['tokens']}</td>"
            head.append(row + "</tr>")
        head.append("</table></div>")
    return "\n".join(head)


def _run_note(f: Path, recs: list, run_id: str | None) -> str | None:
    if run_id is None:
        return None
    left = len(load_records(f)) - len(recs)
    return f"run `{run_id}`" + (f"; {left} record(s) of other runs in this folder left out" if left else "")


def write_report(folder: str | Path, run_id: str | None = None) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` in ``folder`` from the evidence records of one run
    (``run_id``, default :func:`default_run`; no C11 record and no ``run_id``: every record)."""
    f = Path(folder)
    if not f.is_dir():
        raise EvidenceError(f"{f}: no evidence folder")
    run_id = run_id if run_id is not None else default_run(f)
    recs = load_records(f, run_id)
    if not recs:
        raise EvidenceError(f"{f}: no evidence records to report" + (f" of run {run_id}" if run_id else ""))
    note = _run_note(f, recs, run_id)
    md, hp = f / "report.md", f / "report.html"
    md.write_text(render_markdown(f, recs, note))
    hp.write_text(render_html(f, recs, note))
    return md, hp

"""C11: the per-host CI flow, in order, stopping at the first red gate (unless ``--keep-going``).

    python ci/c11.py cpu_bf16 [more profiles] [--model tiny|qwen3-8b-L2] [--skip-tests] [--keep-going] [--json]
    (nox -s c11_ci -- cpu_bf16; ci/run_ws1_<family>_ci.sh with WS1_PROFILES)

Per profile: static gates (C1 contract, C2 manifest; both run, any red is reported) → the
profile's device (absent: one line, exit 2 — the flow cannot go on here; exit 1 if a static gate
was red: red wins over absent) → build (its kernel package imports) → linkage (every required node
registered with the manifest's kernel id) → tests (on a CPU host ``nox -s tests_cpu``, once per run: the suites
that bear on cpu_bf16, named in the record; on a GPU/NPU host ``nox -s tests_device -- PROFILE``: the tests that use
the device, skips counted as failures — the other profiles' CPU-side suites and the device-independent rest are CI's
full run, ``nox -s tests``, which closure requires at the same commit) → C2 runtime evidence → C3, C4, C5 →
C6, C7, C9 → C8 (assembled from the C3/C4 evidence just written) → C10 → the C10 negative control
(plain PyTorch ops; it must come out red). Each gate is its own process; its full output goes to
``evidence/<profile>/logs/<gate>.log`` while its progress and verdict lines are shown here. At the
end: ``evidence/<profile>/c11_ci.json``, ``report.md``, ``report.html`` and a one-screen summary.

Each run has an id (``WS1_RUN_ID``, passed down to every gate process and written into every
record with its commit, dirty state and ``created_at``); a step is judged only by the record it
wrote in this run, so a crashed step is red even when an old record lies in ``evidence/``, and the
report shows only this run's records.

Exit codes: 0 every gate green and the negative control red; 1 a red gate (the flow stops there);
2 a requested profile's device is absent (after its static gates, all green) or bad arguments.

``--keep-going`` (ci/gpu_check.sh on a GPU host, whose minutes are scarce): a red step does not stop the flow;
every later step runs and is recorded, and the record stays red (``stopped_at`` names the first red step), so one
red test on a lent GPU does not cost the verdicts of C2 runtime … C10.

SIGTERM (a caller's time limit, e.g. ``timeout`` in ci/gpu_check.sh) stops the flow without losing it: the step
in flight is recorded red ("stopped by SIGTERM"), the later steps and profiles are not run, and every profile's
``c11_ci.json`` and report are still written (red, exit 1), with the verdicts of the steps that finished.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
# C10's model in the flow: `tiny` keeps the whole flow near 10 minutes on 2 cores (measured 16 min
# with qwen3-8b-L2: its C10 ~3.5 min and negative control ~4 min); C6 runs the 8B shapes either way.
DEFAULT_MODEL = "tiny"
# The flow's negative control: one of our own variant kernels, so its failure is certain on every host
# (torch_default's depends on the CPU: on AMX hosts torch's BF16 GEMM is row-invariant). This one is
# the RL failure itself: the rollout's decode steps reduce attention's keys in another order than the
# trainer's prefill, so train/infer parity and the decode sweep must come out red with a first drift.
NEGATIVE_CONTROL = "variant_attn_decode_order"
C6_MODELS = "tiny,qwen3-8b-L2"


@dataclass
class Step:
    key: str  # the cell id in c11_ci.json, and the log's name
    title: str
    cmd: list[str] | None = None  # a gate process; None: an in-process check
    evidence: str | None = None  # the gate's evidence file name
    expect_red: bool = False  # the negative control
    suites_record: str | None = (
        None  # the test step on a CPU host: the record nox's test session writes (which suites ran)
    )


@dataclass
class Outcome:
    step: Step
    status: str  # green / red / skipped
    detail: str
    seconds: float
    extra: dict = field(default_factory=dict)


def steps_for(profile: str, args) -> tuple[list[Step], list[Step]]:
    """(static steps, device steps) for one profile."""
    m = [PY, "-m"]
    ev = ["--evidence-dir", str(args.evidence_root)]
    static = [
        Step("c1_contract", "C1 contract", m + ["ws1_contract", "c1", profile] + ev, "c1_contract.json"),
        Step("c2_manifest", "C2 manifest (static)", m + ["ws1_contract", "c2", profile] + ev, "c2_manifest.json"),
    ]
    import ws1_accel

    # the test step: on a CPU host the suites that bear on cpu_bf16 (nox -s tests_cpu: the packages, kernels-cpu, the
    # gates' own tests); on a GPU/NPU host the tests that use its device. The other profiles' CPU-side checks and the
    # device-independent rest are CI's full run (nox -s tests), which closure requires from the same commit.
    if ws1_accel.family_of(profile) == "cpu":
        tests = Step(
            "tests", "tests (nox -s tests_cpu)", m + ["nox", "-s", "tests_cpu"], suites_record="tests_cpu.json"
        )
    else:
        tests = Step(
            "tests",
            f"tests on the device (nox -s tests_device -- {profile})",
            m + ["nox", "-s", "tests_device", "--", profile],
        )
    device = [
        Step("build", "build: the kernel package imports"),
        Step("linkage", "linkage: every required node registered"),
        tests,
        Step("c2_runtime", "C2 runtime evidence", m + ["ws1_matrix", "c2-runtime", profile] + ev, "c2_runtime.json"),
        Step("c3_forward", "C3 forward", m + ["ws1_matrix", "c3", profile] + ev, "c3_forward.json"),
        Step("c4_gradient", "C4 gradient", m + ["ws1_matrix", "c4", profile] + ev, "c4_gradient.json"),
        Step("c5_inventory", "C5 inventory", m + ["ws1_matrix", "c5", profile] + ev, "c5_inventory.json"),
        Step(
            "c6_decode_prefill",
            "C6 decode vs prefill",
            m + ["ws1_matrix", "c6", profile, "--models", args.c6_models] + ev,
            "c6_decode_prefill.json",
        ),
        Step("c7_stateful_kv", "C7 stateful KV", m + ["ws1_matrix", "c7", profile] + ev, "c7_stateful_kv.json"),
        Step("c9_model", "C9 model on its device", m + ["ws1_matrix", "c9", profile] + ev, "c9_model.json"),
        Step("c8_matrix", "C8 four-judgment matrix", m + ["ws1_matrix", "c8", profile] + ev, "c8_matrix.json"),
        Step(
            "c10_chain_gate",
            f"C10 chain gate ({args.model})",
            m + ["ws1_matrix", "c10", profile, "--model", args.model] + ev,
            "c10_chain_gate.json",
        ),
        Step(
            "c10_negative_control",
            f"C10 negative control ({NEGATIVE_CONTROL})",
            m + ["ws1_matrix", "c10", profile, "--model", args.model, "--candidate", NEGATIVE_CONTROL] + ev,
            "c10_negative_control.json",
            expect_red=True,
        ),
    ]
    if args.skip_tests:
        device = [s for s in device if s.key != "tests"]
    return static, device


def _show(line: str, step: Step) -> bool:
    """Which lines of a gate's output reach the terminal (all of them go to its log)."""
    s = line.strip()
    if step.key == "tests":  # pytest's progress dots and its result lines
        return s[:1] in (".", "F", "E", "s", "x") or any(w in s for w in ("passed", "failed", "error"))
    return (
        s.startswith("·")
        or ": PASS" in s
        or ": FAIL" in s
        or s.startswith(("ws1 ", "exit 2", "Traceback"))
        or "Error" in s
    )


def new_run_id() -> str:
    return f"c11-{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


class Stopped(BaseException):
    """SIGTERM arrived (a caller's time limit: `timeout` in ci/gpu_check.sh). Not an Exception, so no handler of a
    step swallows it: the step in flight is recorded red, the rest are not run, and c11_ci.json is still written."""


def _on_sigterm(signum, frame):  # noqa: ARG001
    raise Stopped("stopped by SIGTERM (the caller's time limit)")


def run_process(step: Step, log: Path) -> tuple[int, float]:
    t = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if step.key == "tests":  # records the test suite writes are not this run's evidence
        env.pop("WS1_RUN_ID", None)
        if step.suites_record:  # the session's record of which suites ran, bound to this run by its id
            env["WS1_TESTS_RECORD"] = str(log.parent / step.suites_record)
            env["WS1_TESTS_RECORD_ID"] = os.environ.get("WS1_RUN_ID", "")
    with (
        open(log, "w") as f,
        subprocess.Popen(
            step.cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
        ) as p,
    ):
        try:
            for line in p.stdout:
                f.write(line)
                if _show(line, step):
                    print(f"      {line.rstrip()[:150]}", flush=True)
        except Stopped:
            p.terminate()  # `timeout` signals the whole group; a self-sent SIGTERM reaches only us
            raise
        rc = p.wait()
    return rc, time.perf_counter() - t


def _record(path: Path, run_id: str) -> dict | None:
    """The record at ``path`` if this run wrote it; a missing, corrupt or older record is None."""
    from ws1_contract import read_evidence

    try:
        rec = read_evidence(path)
    except Exception:  # noqa: BLE001 — a missing or corrupt record is reported by the caller as red
        return None
    return rec if rec.get("run_id") == run_id else None


def run_gate(step: Step, profile: str, args) -> Outcome:
    log = args.evidence_root / profile / "logs" / f"{step.key}.log"
    rc, secs = run_process(step, log)
    path = args.evidence_root / profile / step.evidence if step.evidence else None
    rec = _record(path, args.run_id) if path else None
    if rec is not None:
        counts = f"green {rec['counts']['green']}, red {rec['counts']['red']}, N/A {rec['counts']['N/A']}"
    elif path is not None and path.is_file():
        counts = f"no evidence record of this run ({path.name} is stale, corrupt or another run's)"
    else:
        counts = "no evidence record"
    bound = {"exit_code": rc, "log": str(log)}
    if rec is not None:  # the record this step is judged by, and what wrote it
        bound["record"] = {k: rec[k] for k in ("run_id", "created_at", "git_sha", "dirty")}
    if step.expect_red:
        ok = rc == 1 and rec is not None and not rec["passed"] and rec.get("first_drift") is not None
        why = (
            (
                f"red as required ({counts}); first drift {rec['first_drift']['cell']} "
                f"layer {rec['first_drift']['layer']} {rec['first_drift']['node']}"
            )
            if ok
            else f"the negative control did not come out red with a first_drift (exit {rc}; {counts})"
        )
        return Outcome(step, "green" if ok else "red", why, secs, bound)
    if rc == 2:
        return Outcome(step, "red", f"exit 2: device or arguments (see {log})", secs, bound)
    if step.suites_record:
        # beside the step's log, not among the gate records the report reads (evidence/<profile>/*.json)
        return _suites_outcome(step, rc, secs, bound, log.parent / step.suites_record, args.run_id)
    ok = rc == 0 and (step.evidence is None or rec is not None and rec["passed"])
    detail = counts if step.evidence else ("passed" if rc == 0 else f"exit {rc}")
    if not ok and rec is not None:
        red = [c for c in rec["cells"] if c["status"] == "red"]
        detail += "; first red: " + (f"{red[0]['id']}: {red[0]['detail']}" if red else f"exit {rc}")
    return Outcome(step, "green" if ok else "red", detail + ("" if ok else f" (log: {log})"), secs, bound)


def _suites_outcome(step: Step, rc: int, secs: float, bound: dict, path: Path, run_id: str) -> Outcome:
    """The CPU test step, judged by its exit code and the record of this run's suites (which suites ran, with their
    counts): a step that leaves no such record is red, whatever its exit code."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        rec = None
    if rec is None or rec.get("record_id") != run_id:
        return Outcome(
            step, "red", f"exit {rc}; no record of this run's suites at {path} (log: {bound['log']})", secs, bound
        )
    n = {k: sum(p["counts"].get(k, 0) for p in rec["processes"]) for k in ("tests", "failures", "errors", "skipped")}
    bound = {**bound, "suites": rec["suites"], "tests_record": str(path), "counts": n}
    detail = (
        f"{'passed' if rc == 0 and rec['passed'] else f'exit {rc}'}: "
        f"suites {', '.join(rec['suites'])} — {n['tests']} tests, "
        f"{n['failures'] + n['errors']} failed, {n['skipped']} skipped (the other profiles' suites: CI's nox -s tests)"
    )
    ok = rc == 0 and rec["passed"]
    return Outcome(step, "green" if ok else "red", detail + ("" if ok else f" (log: {bound['log']})"), secs, bound)


def build_check(profile: str) -> Outcome:
    """The profile's kernel package imports (its build exists) — never another family's."""
    import ws1_accel
    import ws1_ops

    t = time.perf_counter()
    family = ws1_accel.family_of(profile)
    why = ws1_ops.family_available(family)
    step = Step("build", "build")
    if why is not None:
        hint = {"cpu": "run `bash ci/setup_cpu.sh`"}.get(family, f"build the {family} kernel package on this host")
        return Outcome(step, "red", f"{why} — {hint}", time.perf_counter() - t)
    info = ""
    if family == "cpu":
        import ws1_kernels_cpu

        info = f"ws1_kernels_cpu built, ISA {ws1_kernels_cpu.isa()}"
    elif family == "triton":
        import triton

        info = f"triton {triton.__version__}"
    return Outcome(step, "green", info or f"{family} kernels import", time.perf_counter() - t)


def linkage_check(profile: str) -> Outcome:
    import ws1_accel
    import ws1_ops
    from ws1_contract import load_manifest

    t = time.perf_counter()
    m = load_manifest()
    family = ws1_accel.family_of(profile)
    have = ws1_ops.kernels_for(family)
    problems = []
    for node in m.required_nodes:
        want = m.kernel_id(profile, node)
        k = have.get(node)
        if k is None:
            problems.append(f"{node}: not registered (missing_required)")
        elif k.kernel_id != want:
            problems.append(f"{node}: registered {k.kernel_id}, manifest declares {want}")
    step = Step("linkage", "linkage")
    if problems:
        return Outcome(step, "red", "; ".join(problems), time.perf_counter() - t)
    return Outcome(
        step,
        "green",
        f"{len(m.required_nodes)} required nodes registered with their declared {family} kernel ids",
        time.perf_counter() - t,
    )


def summary_lines(profile: str, outcomes: list[Outcome], root: Path, run_id: str) -> list[str]:
    ran = {o.step.key for o in outcomes}
    c10 = _record(root / profile / "c10_chain_gate.json", run_id) if "c10_chain_gate" in ran else None
    neg = _record(root / profile / "c10_negative_control.json", run_id) if "c10_negative_control" in ran else None
    lines = []
    if c10:
        ti, gi = c10.get("train_infer") or {}, c10.get("gradient_invariance") or {}
        if ti:
            lines.append(
                f"  train/infer    max |Δlogp| {ti['max_abs_dlogp']:.3e} — "
                f"{'bitwise' if ti['bitwise'] else 'NOT bitwise'} "
                f"(teacher forcing vs prefill + decode, B=4 and B=1; model {c10.get('model')}, {c10.get('mode')})"
            )
        if gi:
            lines.append(
                f"  gradients      {gi['min_bitwise']} of {gi['of']} parameters bitwise "
                f"in every one of {gi['cells']} cells (compared as {c10.get('grad_compare')})"
            )
        lines.append(f"  first_drift    {c10.get('first_drift') or 'null'}")
    if neg:
        ti = neg.get("train_infer") or {}
        fd = neg.get("first_drift") or {}
        lines.append(
            f"  neg. control   {NEGATIVE_CONTROL}: "
            f"{'red as required' if not neg['passed'] else 'GREEN (the gate could not fail!)'}"
            f" — train/infer max |Δlogp| {ti.get('max_abs_dlogp', float('nan')):.3e}; first drift "
            f"{fd.get('cell')} layer {fd.get('layer')} {fd.get('node')} ({fd.get('tokens_differ')} tokens)"
        )
    return lines


def _guarded(step: Step, check, announce=None) -> Outcome:
    """The step's outcome, or red "stopped" when SIGTERM arrives while it runs (``extra["stopped"]``). ``announce``
    (the step's header line) runs inside the guard: a caller that stops the flow on seeing the header finds the step
    recorded as stopped, not the flow between two steps."""
    t = time.perf_counter()
    try:
        if announce is not None:
            announce()
        return check()
    except Stopped as exc:
        return Outcome(
            step,
            "red",
            f"{exc} during this step; the steps after it were not run",
            time.perf_counter() - t,
            {"stopped": True},
        )


def flow(profile: str, args, tests_done: dict, outcomes: list[Outcome] | None = None) -> tuple[int, list[Outcome]]:
    import ws1_accel

    static, device = steps_for(profile, args)
    outcomes = [] if outcomes is None else outcomes  # the caller's list: what finished survives a SIGTERM between steps
    total = len(static) + len(device)
    n = 0

    def head(title: str) -> None:
        nonlocal n
        n += 1
        print(f"\n[{profile} {n}/{total}] {title}", flush=True)

    def tail(o: Outcome) -> None:
        print(
            f"   → {o.status.upper() if o.status == 'red' else o.status}  {o.detail[:200]}  ({o.seconds:.1f}s)",
            flush=True,
        )

    for s in static:  # both static gates run: they need no device, and each red is reported
        o = _guarded(s, lambda s=s: run_gate(s, profile, args), lambda s=s: head(s.title))
        outcomes.append(o)
        tail(o)
        if o.extra.get("stopped"):
            return 1, outcomes
    static_red = [o.step.title for o in outcomes if o.status != "green"]
    why = ws1_accel.unavailable_reason(profile)
    if why is not None:
        reds = f"; static gates red: {', '.join(static_red)}" if static_red else "; static gates green"
        print(
            f"\nws1 c11_ci: {profile} needs a {ws1_accel.device_type_of(profile)} device: {why}{reds} — "
            "the rest of the flow must run on the profile's own host",
            file=sys.stderr,
            flush=True,
        )
        outcomes.append(Outcome(Step("device", "device"), "red", f"not executed on this host: {why}", 0.0))
        return (1 if static_red else 2), outcomes  # a red static gate wins over the absent device
    if static_red and not args.keep_going:
        print(
            f"\nws1 c11_ci: {profile}: stopped after the static gates: {', '.join(static_red)} red",
            file=sys.stderr,
            flush=True,
        )
        return 1, outcomes
    for s in device:

        def announce(s=s) -> None:
            head(s.title)

        if s.key == "build":
            o = _guarded(s, lambda: build_check(profile), announce)
        elif s.key == "linkage":
            o = _guarded(s, lambda: linkage_check(profile), announce)
        elif s.key == "tests" and tuple(s.cmd) in tests_done:  # one suite per run (the device suites per profile)
            announce()
            o = Outcome(
                s, tests_done[tuple(s.cmd)].status, "ran once for this run: " + tests_done[tuple(s.cmd)].detail, 0.0
            )
        else:
            o = _guarded(s, lambda s=s: run_gate(s, profile, args), announce)
            if s.key == "tests":
                tests_done[tuple(s.cmd)] = o
        o.step = s
        outcomes.append(o)
        tail(o)
        if o.status != "green" and (o.extra.get("stopped") or not args.keep_going):
            print(f"\nws1 c11_ci: {profile}: stopped at {s.title}: {o.detail}", file=sys.stderr, flush=True)
            return 1, outcomes
    red = [o.step.title for o in outcomes if o.status != "green"]
    if red:  # --keep-going: every step ran; the flow is red from its first red step on
        print(f"\nws1 c11_ci: {profile}: red (kept going): {', '.join(red)}", file=sys.stderr, flush=True)
    return (1 if red else 0), outcomes


def host_provenance(profile: str) -> dict | None:
    """Where the flow ran (closure checks the device and arch match the profile's family); None
    when the profile's device is absent."""
    import ws1_accel

    if ws1_accel.unavailable_reason(profile) is not None:
        return None
    return {**ws1_accel.facts(profile).to_dict(), "host": platform.node()}


def write_c11(profile: str, outcomes: list[Outcome], args, code: int, t0: float) -> Path:
    from ws1_contract import Cell, load_contract, load_manifest, write_evidence
    from ws1_contract.provenance import git_state

    c = load_contract()
    m = load_manifest(contract=c)
    cells = [
        Cell(
            id=o.step.key,
            judgment="ci_step",
            status="red" if o.status != "green" else "green",
            detail=o.detail,
            extra={"title": o.step.title, "seconds": round(o.seconds, 1), **o.extra},
        )
        for o in outcomes
    ]
    sha, dirty = git_state()
    return write_evidence(
        "c11_ci",
        profile,
        cells,
        host_provenance(profile),
        contract_fingerprint=c.fingerprint,
        fixture_hash=m.fixture_identity_sha256,
        git_sha=sha,
        dirty=dirty,
        root=args.evidence_root,
        extra={
            "exit_code": code,
            "wall_time_s": round(time.perf_counter() - t0, 1),
            "model": args.model,
            "stopped_at": next((o.step.key for o in outcomes if o.status != "green"), None),
        },
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="c11_ci", description="C11: the per-host flow, in order, stopping at the first red gate"
    )
    ap.add_argument("profiles", nargs="+", help="the profiles this host proves (explicit: no default)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"C10's model preset (default {DEFAULT_MODEL})")
    ap.add_argument("--c6-models", default=C6_MODELS, help=f"C6's model-level presets (default {C6_MODELS})")
    ap.add_argument(
        "--skip-tests", action="store_true", help="skip the test step (developer iterations; CI never skips)"
    )
    ap.add_argument(
        "--keep-going",
        action="store_true",
        help="run every step after a red one too (the verdict stays red from the first red step): a device "
        "host's scarce minutes then return the verdict of every gate (ci/gpu_check.sh)",
    )
    ap.add_argument("--evidence-dir", default=None, help="evidence root (default $WS1_EVIDENCE_DIR or ./evidence)")
    ap.add_argument("--json", action="store_true", help="print the C11 records as JSON at the end")
    args = ap.parse_args(argv)
    import ws1_accel
    from ws1_contract.evidence import evidence_root
    from ws1_contract.report import write_report

    args.evidence_root = Path(args.evidence_dir) if args.evidence_dir else evidence_root()
    unknown = [p for p in args.profiles if p not in ws1_accel.PROFILE_FAMILY]
    if unknown:
        print(
            f"ws1 c11_ci: unknown profile(s) {unknown}; expected some of {sorted(ws1_accel.PROFILE_FAMILY)}",
            file=sys.stderr,
        )
        return 2
    # always a fresh id: every gate process inherits it and writes it into its record
    args.run_id = os.environ["WS1_RUN_ID"] = new_run_id()
    code, tests_done, screens, records = 0, {}, [], []
    old_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    stopped = False
    for profile in args.profiles:
        t0 = time.perf_counter()
        if stopped:  # a profile the stopped run never reached: a red record that says so, not a missing one
            rc, outcomes = (
                1,
                [
                    Outcome(
                        Step("stopped", "stopped"),
                        "red",
                        "not run: the flow was stopped by SIGTERM (the caller's time limit) before it",
                        0.0,
                    )
                ],
            )
        else:
            outcomes = []
            try:
                rc, outcomes = flow(profile, args, tests_done, outcomes)
            except Stopped as exc:  # arrived between two steps (outside a step's guard): the steps done are kept
                rc = 1
                outcomes.append(
                    Outcome(
                        Step("stopped", "stopped"),
                        "red",
                        f"{exc} between steps; the steps after were not run",
                        0.0,
                        {"stopped": True},
                    )
                )
            stopped = any(o.extra.get("stopped") for o in outcomes)
        path = write_c11(profile, outcomes, args, rc, t0)
        md, hp = write_report(args.evidence_root / profile, run_id=args.run_id)
        records.append(json.loads(path.read_text()))
        verdict = {0: "PASS", 1: "FAIL", 2: "NOT EXECUTED (device absent)"}[rc]
        screen = [
            f"\n══ WS1 C11 · {profile} — {verdict} in {time.perf_counter() - t0:.0f}s ══",
            f"  {'step':<40} {'status':<7} {'time':>7}  detail",
        ]
        for o in outcomes:
            screen.append(f"  {o.step.title[:40]:<40} {o.status:<7} {o.seconds:>6.1f}s  {o.detail[:70]}")
        screen += summary_lines(profile, outcomes, args.evidence_root, args.run_id)
        screen += [
            f"  evidence       {args.evidence_root / profile}/ (run {args.run_id})",
            f"  report         {md}  ·  {hp}",
        ]
        screens.append("\n".join(screen))
        code = 1 if 1 in (code, rc) else max(code, rc)
    signal.signal(signal.SIGTERM, old_sigterm)
    for s in screens:
        print(s)
    if args.json:
        print(json.dumps({"gate": "c11_ci", "exit_code": code, "records": records}, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())

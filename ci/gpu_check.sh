#!/usr/bin/env bash
# One GPU host run that closes both GPU profiles: the C11 flow (ci/c11.py) for triton_cuda_bf16 and cuda_bf16 on
# one CUDA device, inside a time budget (default 9 minutes), writing the C11 records that `ws1-contract closure` reads.
#
#   bash ci/gpu_check.sh [OUT_DIR]          OUT_DIR default: $OUT (the device run's folder), else ./evidence-gpu
#
# Plan (measured on the first H200 run, 2026-12-04: install 21 s, triton-aot 14 s, kernels-cuda build ~55 s for
# sm_90a alone with 12 jobs; C2 runtime 26/13 s, C3 54/50, C4 145/63, C6 19, C7 ~10, C9 ~10, C10 ~12 — triton/cuda):
#   0. facts: the device (exit 2 at once without one), the commit and whether the tree is dirty (closure refuses a
#      dirty tree: commit first), the host's versions of the carried projects (host_packages.txt);
#   1. the carried wheels (.whl, from ci/gpu_wheels.sh): each installed into /tmp/ws1-site only when the host lacks its
#      project or has an older version; PYTHONPATH=/tmp/ws1-site; then ci/install_host.sh (the packages, editable);
#   2. two lanes in parallel on the one GPU:
#        triton lane: triton-aot (every Triton configuration compiled for this arch, into the run's cache), then
#                     python ci/c11.py triton_cuda_bf16;
#        cuda lane:   kernels-cuda built for THIS device's arch only (WS1_CUDA_ARCHS=<cc>, MAX_JOBS = cores; the
#                     default build stays sm_80 + sm_90a), then python ci/c11.py cuda_bf16;
#      C11 per profile: C1, C2 static → build → linkage → the device tests (nox -s tests_device) → C2 runtime → C3,
#      C4, C5 → C6, C7, C9 → C8 → C10 (tiny) and its negative control; its c11_ci.json is what closure reads. With
#      --keep-going: a red step (the first H200 run's unit-test segfault, say) does not cost the later gates' verdicts;
#      the record stays red from that step on. The
#      device-independent test suite is CPU CI's (closure takes every profile's record from one commit);
#   3. if the cuda lane's device tests failed: one native backtrace of the first bad-input call under cuda-gdb
#      (logs/cuda_entry_backtrace.txt) — the first H200 run lost its unit tests to a segfault there;
#   4. `ws1-contract closure` over this run's evidence (closure.txt: triton_cuda_bf16 and cuda_bf16 green, cpu_bf16 and
#      ascend_bf16 missing until their hosts' records are added);
#   5. WS1_BENCH=1: the benchmarks after the gates, on the then idle GPU, in what the budget has left (see bench below).
#
# WS1_GPU_TASK=bench: the benchmarks alone — the second call of a lease, on the machine the closure call left warm:
# the install is skipped when this checkout's packages already import, the kernels-cuda build when its extension
# already imports, and Triton's compiles come from the first call's cache (TRITON_CACHE_DIR is fixed per machine). Then
# bench_cuda.py, bench_triton.py and bench_rl.py one after another on the idle GPU, each with --deadline-s = its fair
# share of the time left (the rest divided by the benchmarks still to run) and a `timeout` 25 s past it: a benchmark
# rewrites its JSON after every group, so one cut short returns what it finished ("complete": false, its errors name
# the groups not run). WS1_BENCH_REPS overrides every benchmark's --reps. On a cold machine the same task installs and
# builds first.
#
# WS1_GPU_TASK=c10-8b (one profile per run: WS1_PROFILES=cuda_bf16, then triton_cuda_bf16): the same preparation, then
# instead of C11 the full-model chain gate, `python -m ws1_matrix c10 PROFILE --model qwen3-8b` (36 layers, all 399
# parameters, seeded synthetic weights created on the device, vocabulary 151936) and its negative control
# (--candidate variant_attn_decode_order, which must come out red); each cell prints its time and peak device memory.
# Two 8B gates at once would not fit one card beside each other, so the gates of several profiles run one at a time.
# OUT_DIR receives at most 8 files: summary.json, closure.txt, c11_evidence.tar.gz (every record, report and log of both
# profiles, the build logs), host_packages.txt, and bench_{cuda,triton,rl}.json when run (summary.json's "benchmarks":
# per benchmark its exit, seconds, whether it completed, the errors and the MET/MISS/ABSENT counts).
#
# Environment: WS1_PROFILES ("triton_cuda_bf16 cuda_bf16"), WS1_DEADLINE_S (540: no lane outlives it; a lane cut
# short by `timeout` still leaves a red C11 record with the verdicts of the steps it finished and the step it was
# stopped in: ci/c11.py on SIGTERM), WS1_SKIP_INSTALL=1 (packages already installed), WS1_BENCH, WS1_BENCH_REPS,
# WS1_GPU_TASK (closure, bench, c10-8b), PYTHON (python3), WS1_WHEELS (.whl), WS1_GPU_CHECK_DRY=1 (a CPU host tests this script's plumbing: the lanes run
# without the build and triton-aot, C11 stops at the absent device, every profile ends red; ci/tests/test_gpu_check.py).
# Exit: 0 every requested profile's C11 green (bench: every benchmark complete, without errors; a MISS is a measurement,
# not an error); 1 something red, missing or cut short; 2 no CUDA device, or an unknown WS1_GPU_TASK.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST=${1:-${OUT:-$ROOT/evidence-gpu}}
PY=${PYTHON:-python3}
PROFILES=${WS1_PROFILES:-"triton_cuda_bf16 cuda_bf16"}
TASK=${WS1_GPU_TASK:-closure}
DEADLINE=${WS1_DEADLINE_S:-540}
WHEELS=${WS1_WHEELS:-$ROOT/.whl}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ws1_gpu.XXXXXX")
EV="$WORK/evidence"
mkdir -p "$DEST" "$WORK/logs" "$EV"
export WS1_EVIDENCE_DIR="$EV" PYTHONUNBUFFERED=1
unset TRITON_INTERPRET    # the Triton kernels compile for the GPU here, never run in the interpreter
# one cache per machine, not per call: the bench task (a second call on the warm machine) loads the first call's compiles
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-${TMPDIR:-/tmp}/ws1_triton_cache}
STEPS="$WORK/steps.tsv"
: >"$STEPS"
DRY=${WS1_GPU_CHECK_DRY:-0}
T0=$SECONDS
case "$TASK" in
  closure | c10-8b | bench) ;;
  *) echo "gpu_check: WS1_GPU_TASK=$TASK: expected closure, c10-8b or bench" >&2; exit 2 ;;
esac
export WS1_GPU_TASK=$TASK

say() { printf '[gpu_check %4ds] %s\n' "$((SECONDS - T0))" "$*" | tee -a "$WORK/logs/gpu_check.log"; }
left() { echo $((DEADLINE - (SECONDS - T0))); }
# run NAME TIMEOUT CMD... -> rc; one line per step in steps.tsv (name, rc, seconds)
run() {
  local name=$1 tmo=$2 t=$SECONDS rc
  shift 2
  if [ "$tmo" -lt 20 ]; then
    printf '%s\t201\t0\n' "$name" >>"$STEPS"
    say "$name: not run (time budget spent)"
    return 201
  fi
  timeout --kill-after=15 "$tmo" "$@" >"$WORK/logs/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t))" >>"$STEPS"
  say "$name: exit $rc in $((SECONDS - t))s"
  return $rc
}

pack() {
  "$PY" - "$STEPS" "$EV" "$WORK" "$PROFILES" >"$WORK/summary.json" <<'EOF'
import json, os, sys
steps_f, ev, work, profiles = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
steps = [dict(zip(("step", "rc", "seconds"), line.rstrip("\n").split("\t"))) for line in open(steps_f) if line.strip()]
facts = json.load(open(os.path.join(work, "facts.json"))) if os.path.exists(os.path.join(work, "facts.json")) else {}
out = {"facts": facts, "steps": steps, "profiles": {}}
task = os.environ.get("WS1_GPU_TASK", "closure")
for p in profiles if task != "bench" else ():
    if task == "c10-8b":
        recs = {}
        for gate in ("c10_chain_gate", "c10_negative_control"):
            f = os.path.join(ev, p, f"{gate}.json")
            recs[gate] = json.load(open(f)) if os.path.exists(f) else None
        g, n = recs["c10_chain_gate"], recs["c10_negative_control"]
        ok = bool(g and g["passed"]) and bool(n and not n["passed"] and n.get("first_drift"))
        cells = {c["id"]: [c["status"], c.get("seconds"), c.get("peak_device_gib")] for c in (g or {}).get("cells", [])
                 if c["id"].startswith(("cell/", "parity/", "reference/"))}
        out["profiles"][p] = {"status": "green" if ok else "red", "model": (g or {}).get("model"),
                              "gradient_invariance": (g or {}).get("gradient_invariance"), "train_infer": (g or {}).get("train_infer"),
                              "grad_compare": (g or {}).get("grad_compare"), "wall_time_s": (g or {}).get("wall_time_s"),
                              "peak_device_gib": (g or {}).get("peak_device_gib"), "cells": cells,
                              "negative_control": None if n is None else {"passed": n["passed"], "first_drift": n.get("first_drift"),
                                                                          "wall_time_s": n.get("wall_time_s")},
                              "first_red": next((f"{c['id']}: {c['detail'][:300]}" for c in (g or {}).get("cells", [])
                                                 if c["status"] == "red"), None if g else "no c10_chain_gate record")}
        continue
    f = os.path.join(ev, p, "c11_ci.json")
    if not os.path.exists(f):
        why = ("not executed: no CUDA device on this host" if facts.get("cuda_available") is False else
               "no C11 record (the lane did not finish: see steps and logs)")
        out["profiles"][p] = {"status": "red", "why": why}
        continue
    r = json.load(open(f))
    red = [c for c in r["cells"] if c["status"] != "green"]
    out["profiles"][p] = {"status": "green" if r["passed"] and not red else "red", "exit_code": r.get("exit_code"),
                          "wall_time_s": r.get("wall_time_s"), "git_sha": r["git_sha"], "dirty": r["dirty"],
                          "steps": {c["id"]: [c["status"], c.get("seconds")] for c in r["cells"]},
                          "first_red": f"{red[0]['id']}: {red[0]['detail'][:300]}" if red else None}
benches = {}
for name in ("cuda", "triton", "rl"):
    step = next((st for st in steps if st["step"] == f"bench_{name}"), None)
    f = os.path.join(work, f"bench_{name}.json")
    if step is None and not os.path.exists(f):
        continue
    b = {"rc": None if step is None else int(step["rc"]), "seconds": None if step is None else int(step["seconds"])}
    try:
        d = json.load(open(f))
    except (OSError, ValueError) as e:
        log = os.path.join(work, "logs", f"bench_{name}.log")
        last = [ln.strip() for ln in open(log, errors="replace")] if os.path.exists(log) else []
        last = next((ln for ln in reversed(last) if ln), "no output")
        why = "not run (time budget spent)" if b["rc"] == 201 else f"exit {b['rc']}, its log ends: {last[:300]}"
        b.update(complete=False, errors={"json": f"no readable bench_{name}.json ({type(e).__name__}): {why}"})
    else:
        tg = d.get("targets") or []
        b.update(complete=d.get("complete") is not False and b["rc"] in (0, 1), errors=d.get("errors") or {},
                 device=(d.get("host") or {}).get("device"), ceilings=(d.get("host") or {}).get("ceilings"),
                 met=sum(1 for t in tg if t.get("met") is True), miss=sum(1 for t in tg if t.get("met") is False),
                 absent=sum(1 for t in tg if t.get("met") is None))
    benches[name] = b
if benches:
    out["benchmarks"] = benches
ok = [v["status"] == "green" for v in out["profiles"].values()] + [b["complete"] and not b["errors"] for b in benches.values()]
out["overall"] = "green" if ok and all(ok) else "red"
print(json.dumps(out, indent=1))
EOF
  cp "$WORK/summary.json" "$DEST/summary.json"
  [ -f "$WORK/closure.txt" ] && cp "$WORK/closure.txt" "$DEST/closure.txt"
  [ -f "$WORK/host_packages.txt" ] && cp "$WORK/host_packages.txt" "$DEST/host_packages.txt"
  for b in "$WORK"/bench_*.json; do [ -f "$b" ] && cp "$b" "$DEST/"; done
  tar -czf "$DEST/c11_evidence.tar.gz" -C "$WORK" evidence logs steps.tsv facts.json 2>/dev/null
  "$PY" - "$WORK/summary.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("overall:", d["overall"])
for p, v in d["profiles"].items():
    print(f"  {p:<18} {v['status']:<6} {v.get('first_red') or v.get('why') or ''}")
for n, b in d.get("benchmarks", {}).items():
    counts = f"{b.get('met', 0)} MET, {b.get('miss', 0)} MISS, {b.get('absent', 0)} ABSENT"
    print(f"  bench_{n:<12} {'complete' if b['complete'] else 'INCOMPLETE'} ({counts}; exit {b['rc']}, {b['seconds']} s)"
          + (f"; errors: {'; '.join(f'{k}: {e}' for k, e in b['errors'].items())[:400]}" if b["errors"] else ""))
EOF
  say "wrote $(cd "$DEST" && ls | tr '\n' ' ')into $DEST"
}

# ---- 0. facts -------------------------------------------------------------------------------------------------
"$PY" - "$WORK/facts.json" <<'EOF' 2>&1 | tee "$WORK/logs/facts.log"
import json, os, platform, subprocess, sys
f = {"python": platform.python_version(), "nproc": os.cpu_count()}
try:
    import torch
    f.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        f.update(device=p.name, capability=list(torch.cuda.get_device_capability(0)), sm_count=p.multi_processor_count,
                 memory_gib=round(p.total_memory / 2**30, 1))
except Exception as e:  # noqa: BLE001
    f["torch_error"] = repr(e)
try:
    import triton
    f["triton"] = triton.__version__
except Exception as e:  # noqa: BLE001
    f["triton_error"] = repr(e)
git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
f["git_sha"], f["git_dirty"] = git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
json.dump(f, open(sys.argv[1], "w"), indent=1)
print(json.dumps(f, indent=1))
sys.exit(0 if f.get("cuda_available") else 2)
EOF
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
  printf 'facts\t2\t0\n' >>"$STEPS"
  if [ "$DRY" != 1 ]; then
    say "no CUDA device here: the GPU profiles cannot be judged on this host (exit 2)"
    pack
    exit 2
  fi
  say "no CUDA device: a dry run of the plumbing (WS1_GPU_CHECK_DRY=1); nothing can be green"
fi
if "$PY" -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['git_dirty'] else 1)" "$WORK/facts.json"; then
  say "WARNING: the tree has uncommitted changes to tracked files: closure refuses these records (commit, then run)"
fi
CC=$("$PY" -c "import torch; a, b = torch.cuda.get_device_capability(0); print(f'{a}{b}')" 2>/dev/null || echo 90)
ARCH=$([ "$CC" = 90 ] && echo 90a || echo "$CC")

# ---- 1. wheels the host lacks, then the packages ---------------------------------------------------------------
if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  "$PY" - "$WHEELS" "$WORK/host_packages.txt" >"$WORK/wheels_to_install.txt" <<'EOF'
import importlib.metadata as md, re, sys
from pathlib import Path
rows, todo = [], []
for w in sorted(Path(sys.argv[1]).glob("*.whl")):
    name, ver = w.name.split("-")[:2]
    try:
        have = md.version(name.replace("_", "-"))
    except md.PackageNotFoundError:
        have = None
    newer = have is None or tuple(int(x) for x in re.findall(r"\d+", ver)[:4]) > tuple(int(x) for x in re.findall(r"\d+", have)[:4])
    rows.append(f"{name}\thost {have or 'absent'}\tcarried {ver}\t{'install' if newer else 'host serves'}")
    if newer:
        todo.append(str(w))
Path(sys.argv[2]).write_text("\n".join(rows) + "\n")
print("\n".join(todo))
EOF
  if [ -s "$WORK/wheels_to_install.txt" ]; then
    # shellcheck disable=SC2046
    run wheels 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ws1-site \
      $(cat "$WORK/wheels_to_install.txt")
  fi
  export PYTHONPATH=/tmp/ws1-site${PYTHONPATH:+:$PYTHONPATH}
fi
installed() {   # this checkout's packages import (editable: a warm machine's second call needs no install)
  "$PY" -c "import sys, ws1_contract, ws1_matrix, ws1_ops, ws1_qwen3; sys.exit(0 if ws1_ops.__file__.startswith(sys.argv[1]) else 1)" \
    "$ROOT/" >/dev/null 2>&1
}
if [ "${WS1_SKIP_INSTALL:-0}" != 1 ] && [ "$DRY" != 1 ]; then
  if [ "$TASK" = bench ] && installed; then
    say "install: skipped (this checkout's packages already import: a warm machine)"
  else
    run install 300 env PYTHON="$PY" bash ci/install_host.sh || { say "install failed"; pack; exit 1; }
  fi
fi
SHA=$(git rev-parse HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)
BUILT=${TMPDIR:-/tmp}/ws1_kernels_cuda.built   # the commit kernels-cuda was last built from on this machine

# ---- 2. the two lanes --------------------------------------------------------------------------------------------
lane_triton() {
  [ "$DRY" = 1 ] || run triton_aot "$(( $(left) < 300 ? $(left) : 300 ))" "$PY" -m ws1_matrix triton-aot --arch "$CC" --no-execute \
    --jobs "$(nproc)" --cache-dir "$TRITON_CACHE_DIR" --evidence-dir "$EV"
  judge triton_cuda_bf16
}
cuda_build() {  # kernels-cuda for this device's arch only; the commit it was built from is remembered
  run cuda_build "$(( $(left) < 400 ? $(left) : 400 ))" env WS1_CUDA_ARCHS="$ARCH" MAX_JOBS="$(nproc)" \
    "$PY" -m pip install --no-deps --no-build-isolation --no-cache-dir -e kernels-cuda && echo "$SHA" >"$BUILT"
}
lane_cuda() {
  [ "$DRY" = 1 ] || cuda_build || return 1
  judge cuda_bf16
}
judge() {   # the lane's judgment: C11 (closure) or the full-model chain gate and its control, one 8B gate at a time
  if [ "$TASK" = c10-8b ]; then
    local lock=(flock "$WORK/gpu.lock")
    command -v flock >/dev/null || lock=()
    run "c10_8b_$1" "$(left)" "${lock[@]}" "$PY" -m ws1_matrix c10 "$1" --model qwen3-8b --evidence-dir "$EV"
    run "c10_8b_control_$1" "$(left)" "${lock[@]}" "$PY" -m ws1_matrix c10 "$1" --model qwen3-8b \
      --candidate variant_attn_decode_order --evidence-dir "$EV"
  else
    run "c11_$1" "$(left)" "$PY" ci/c11.py "$1" --keep-going --evidence-dir "$EV"
  fi
}
if [ "$TASK" = bench ]; then
  # the cuda benchmark needs this commit's extension: built here unless this machine built it from this commit already
  if [[ " $PROFILES " == *" cuda_bf16 "* ]] && [ "$DRY" != 1 ]; then
    if [ "$(cat "$BUILT" 2>/dev/null)" = "$SHA" ] && "$PY" -c "import ws1_kernels_cuda" >/dev/null 2>&1; then
      say "cuda_build: skipped (this machine built kernels-cuda from $SHA already)"
    else
      cuda_build || say "cuda_build failed: bench_cuda will say why"
    fi
  fi
  PROFILES_RUN=""
else
  PROFILES_RUN=$PROFILES
fi
pids=()
for p in $PROFILES_RUN; do
  case "$p" in
    triton_cuda_bf16) lane_triton & pids+=($!) ;;
    cuda_bf16) lane_cuda & pids+=($!) ;;
    *) say "unknown GPU profile $p (expected triton_cuda_bf16, cuda_bf16)"; pack; exit 1 ;;
  esac
done
[ -n "$PROFILES_RUN" ] && say "lanes started for: $PROFILES_RUN (sm_$ARCH, $(nproc) cores, budget ${DEADLINE}s)"
for pid in "${pids[@]}"; do wait "$pid"; done

# ---- 3. a native backtrace if the entry-point tests crashed ----------------------------------------------------
if grep -q "exit -11\|Segmentation fault" "$EV"/cuda_bf16/logs/tests.log 2>/dev/null && command -v cuda-gdb >/dev/null; then
  run cuda_entry_backtrace 90 cuda-gdb -batch -ex run -ex bt --args "$PY" -c \
    "import torch, ws1_kernels_cuda; torch.ops.ws1_cuda.det_gemm(torch.zeros(2, 8, dtype=torch.bfloat16, device='cuda'), torch.zeros(4, 9, dtype=torch.bfloat16, device='cuda'))"
fi

# ---- 4. closure over this run's records ----------------------------------------------------------------------------
if [ "$TASK" = closure ]; then
  "$PY" -m ws1_contract closure "$EV" >"$WORK/closure.txt" 2>&1
  say "closure over this host's evidence: $(head -1 "$WORK/closure.txt")"
fi

# ---- 5. benchmarks (WS1_BENCH=1 after the gates; the bench task alone) ----------------------------------------------
bench() {   # one after another on the idle GPU, each given a fair share of the time left (see the header)
  local names=() n i=0 share reps=() extra
  [[ " $PROFILES " == *" cuda_bf16 "* ]] && names+=(cuda)
  [[ " $PROFILES " == *" triton_cuda_bf16 "* ]] && names+=(triton)
  names+=(rl)
  [ -n "${WS1_BENCH_REPS:-}" ] && reps=(--reps "$WS1_BENCH_REPS")
  for n in "${names[@]}"; do
    share=$(( ($(left) - 15) / (${#names[@]} - i) ))
    i=$((i + 1))
    extra=()
    [ "$n" = rl ] && extra=(--profiles "$(echo $PROFILES | tr ' ' ',')")
    if [ "$share" -lt 30 ]; then
      run "bench_$n" 0 true    # recorded "not run (time budget spent)"
      continue
    fi
    run "bench_$n" $((share + 25)) "$PY" "benchmarks/bench_$n.py" --deadline-s "$share" --json "$WORK/bench_$n.json" \
      "${reps[@]}" "${extra[@]}"
  done
}
if [ "$TASK" = bench ] || { [ "${WS1_BENCH:-0}" = 1 ] && [ "$TASK" = closure ]; }; then
  bench
fi

pack
"$PY" -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['overall'] == 'green' else 1)" "$WORK/summary.json"

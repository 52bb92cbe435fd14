"""WS1 gates as nox sessions, one-to-one with C1–C11, profiles as positional arguments:

    nox -s c1_contract                      # all profiles
    nox -s c2_manifest -- cpu_bf16
    nox -s tests                            # every suite (not the slow marker): what CI runs
    nox -s tests_cpu                        # the suites that bear on cpu_bf16: C11's test step on a CPU host
    nox -s vllm_gate -- cpu_bf16            # vLLM + the ws1-vllm plugin vs teacher forcing (in .venv-vllm)

Sessions run in the interpreter that runs nox (``venv_backend="none"``): torch is several GB and
on GPU/NPU hosts it comes from the vendor stack (CUDA torch, torch_npu + CANN) that must not be
reinstalled per session. On CPU hosts ``bash ci/setup_cpu.sh`` prepares ``.venv`` (pinned CPU
torch + every package editable) and ``.venv/bin/nox`` runs these sessions in it.

Exit codes: 0 every judged cell green; 1 a red cell or a broken contract; 2 the host lacks a
requested profile's device (one line, no traceback). Red wins: a red cell exits 1 even when another
requested profile's device is absent (ws1_contract.gate.exit_code; _gate passes the code on).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["c1_contract", "c2_manifest", "tests"]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PY = sys.executable
# vLLM's CPU build with the ws1 packages (ci/setup_vllm.sh): a venv of its own, beside .venv
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
# The test suites, each the CI check of the profile(s) it bears on. `nox -s tests` (CI, .ci/run) runs every suite;
# C11's test step on a CPU host runs `nox -s tests_cpu`: only the suites of the profile it judges (cpu_bf16). The
# other profiles' CPU-side checks (the CUDA compile check, the Ascend emulator, the Triton compile and interpreter
# suites) run in CI, and closure needs CI's full run from the commit of the C11 records (evidence/ci/tests.json).
SUITES: dict[str, dict] = {
    # the packages (device-independent: the contract, the ops' dispatch and references, the model, the harness),
    # kernels-cpu, the gates' own tests
    "cpu": {
        "profiles": ["cpu_bf16"],
        # the costliest folders first: xdist hands out files in this order, so the long ones do not start last
        "paths": [
            "packages/ws1-matrix/tests",
            "packages/ws1-qwen3/tests",
            "ci/tests",
            "packages/ws1-dist/tests",
            "kernels-cpu/tests",
            "packages/ws1-ops/tests",
            "packages/ws1-contract/tests",
            "packages/ws1-kv/tests",
            "packages/ws1-accel/tests",
        ],
        # other profiles' checks that live beside the package they exercise
        "ignore": [
            "packages/ws1-matrix/tests/test_triton_aot.py",
            "ci/tests/test_asc_compile_check.py",
            "ci/tests/test_gpu_check.py",
            "ci/tests/test_gpu_wheels.py",
            "packages/ws1-ops/tests/test_device_suite_on_cpu.py",
            "ci/tests/vllm",
        ],
    },
    # vLLM + the ws1-vllm plugin on cpu_bf16, in .venv-vllm (`python`: the interpreter the suite runs in, one
    # process, no xdist: vLLM's engine and the plugin are process-wide): the plugin's tests and the vLLM gate run
    # whole (ci/tests/vllm). Not C11's test step: a CPU host proves cpu_bf16 without vLLM installed.
    "vllm": {
        "profiles": ["cpu_bf16"],
        "python": ".venv-vllm/bin/python",
        "paths": ["packages/ws1-vllm/tests", "ci/tests/vllm"],
    },
    # the device hosts' own flow checked on CPU before a lent GPU or an NPU host depends on it: ci/gpu_check.sh's dry
    # runs, the wheel folder a GPU host installs from, the device test suites' logic run on cpu_bf16
    "device_hosts": {
        "profiles": ["cuda_bf16", "triton_cuda_bf16", "ascend_bf16"],
        "paths": [
            "ci/tests/test_gpu_check.py",
            "ci/tests/test_gpu_wheels.py",
            "packages/ws1-ops/tests/test_device_suite_on_cpu.py",
        ],
    },
    # kernels-cuda compiled here without a GPU (nvcc, ptxas, SASS; the CUTLASS units), its attention emulator
    "cuda_build": {"profiles": ["cuda_bf16"], "paths": ["kernels-cuda/tests"]},
    # the Ascend C kernels on the host emulator of the Ascend C API (ws1_kernels_ascend_emu), the compile-check tool
    "ascend_emu": {
        "profiles": ["ascend_bf16"],
        "paths": ["kernels-ascend/tests", "ci/tests/test_asc_compile_check.py"],
    },
    # the Triton kernels through Triton's real GPU compiler (no GPU)
    "triton_aot": {"profiles": ["triton_cuda_bf16"], "paths": ["packages/ws1-matrix/tests/test_triton_aot.py"]},
    # the Triton kernels' logic and invariance under the interpreter, in a pytest process of its own: Triton fixes
    # interpreter vs GPU when a kernel is defined, once per process
    "triton_interp": {
        "profiles": ["triton_cuda_bf16"],
        "paths": ["packages/ws1-ops/tests_triton"],
        "env": {"TRITON_INTERPRET": "1"},
    },
}
# What a device host adds to CPU CI (nox -s tests_device -- PROFILE, C11's test step on a GPU/NPU host): the tests
# that need the profile's device. Everything else is device-independent and already ran in CPU CI at the same commit
# (closure requires every profile's C11 record from one commit).
DEVICE_TESTS = {
    "cuda": [
        "packages/ws1-ops/tests_device",
        "packages/ws1-qwen3/tests_device",
        "kernels-cuda/tests/test_gpu_kernels.py",
        "kernels-cuda/tests/test_gpu_*.py",
    ],
    # the Triton unit tests in device mode (tests_triton/conftest.py: WS1_DEVICE_PROFILE=triton_cuda_bf16 turns the
    # interpreter off; the real kernels on the device, interpreter-only tests deselected)
    "triton": ["packages/ws1-ops/tests_device", "packages/ws1-qwen3/tests_device", "packages/ws1-ops/tests_triton"],
    "ascend": ["packages/ws1-ops/tests_device", "packages/ws1-qwen3/tests_device"],
}


def _require(session: nox.Session, *modules: str) -> None:
    missing = []
    for m in modules:
        if subprocess.call([PY, "-c", f"import {m}"], stderr=subprocess.DEVNULL) != 0:
            missing.append(m)
    if missing:
        session.error(
            f"not installed in {PY}: {', '.join(missing)} — run `bash ci/setup_cpu.sh` and use .venv/bin/nox "
            "(GPU/NPU hosts: ci/run_ws1_<family>_ci.sh)"
        )


def _gate(
    session: nox.Session, module: str, *args: str, posargs: list[str] | None = None, python: str | Path = PY
) -> None:
    """Run a gate module; its exit code 2 (device absent) becomes nox's exit code 2."""
    cmd = [str(python), "-m", module, *args, *(session.posargs if posargs is None else posargs)]
    session.log(" ".join(cmd[2:]))
    rc = subprocess.call(cmd, cwd=ROOT)
    if rc == 2:
        session.log("exit 2: a requested profile's device is absent on this host (or bad arguments)")
        sys.exit(2)
    if rc != 0:
        session.error(f"{module} {' '.join(args)}: red (exit {rc}); see the table above and evidence/")


@nox.session
def c1_contract(session: nox.Session) -> None:
    """C1: the contract loads, validates, resolves; provenance validation rejects a wrong family."""
    _require(session, "ws1_contract")
    _gate(session, "ws1_contract", "c1", posargs=[a for a in session.posargs if a != "--runtime"])


@nox.session
def c2_manifest(session: nox.Session) -> None:
    """C2: every required node declared per profile, cases cover op × tier, fixture hash matches.

    ``-- PROFILE --runtime`` also runs every node on the profile's device and checks the registry
    recorded the declared kernel (exit 2 when the device is absent)."""
    _require(session, "ws1_contract")
    args = [a for a in session.posargs if a != "--runtime"]
    _gate(session, "ws1_contract", "c2", posargs=args)
    if "--runtime" in session.posargs:
        _require(session, "ws1_matrix")
        _gate(session, "ws1_matrix", "c2-runtime", posargs=args)


def _matrix_gate(session: nox.Session, gate: str) -> None:
    """Every gate body C2-runtime and C3–C10 is ``python -m ws1_matrix <gate>`` (the harness package)."""
    _require(session, "ws1_matrix")
    _gate(session, "ws1_matrix", gate)


@nox.session
def c3_forward(session: nox.Session) -> None:
    """C3: forward accuracy vs FP32 and bitwise forward invariance per op, on the profile's device
    (``-- PROFILE [--op OP]``; exit 2 when the device is absent)."""
    _matrix_gate(session, "c3")


@nox.session
def c4_gradient(session: nox.Session) -> None:
    """C4: gradient accuracy and bitwise gradient invariance (canonical backward) per op."""
    _matrix_gate(session, "c4")


@nox.session
def c5_inventory(session: nox.Session) -> None:
    """C5: the elementwise inventory, a verdict per item and profile (pass / tracked_red / blocker)."""
    _matrix_gate(session, "c5")


@nox.session
def c8_matrix(session: nox.Session) -> None:
    """C8: profile × every node of the manifest's node table × {short, primary} × 4 judgments. ``--execute``
    runs every cell through C3/C4; without it the matrix is assembled from their evidence. An absent profile
    is red, not exit 2."""
    _matrix_gate(session, "c8")


@nox.session
def c6_decode_prefill(session: nox.Session) -> None:
    """C6: decode vs prefill, bitwise — the six operator cases of docs/design.md §6 and model-level decode
    vs teacher forcing (``--models tiny,qwen3-8b-L2`` by default)."""
    _matrix_gate(session, "c6")


@nox.session
def c7_stateful_kv(session: nox.Session) -> None:
    """C7: B1 contiguous and B2 paged KV caches (paged == contiguous, warm prefix == cold), bitwise."""
    _matrix_gate(session, "c7")


@nox.session
def c9_model(session: nox.Session) -> None:
    """C9: the model runs on the profile's device; every required node observed with its declared kernel."""
    _matrix_gate(session, "c9")


@nox.session
def c10_chain_gate(session: nox.Session) -> None:
    """C10: the chain gate on the whole model (``--model tiny|qwen3-8b-L2|qwen3-8b``, ``--weights DIR``,
    ``--formal``); ``--candidate variant_attn_decode_order`` (or any control of ws1_ops.backends.controls) runs a
    negative control, which must come out red."""
    _matrix_gate(session, "c10")


@nox.session
def c11_ci(session: nox.Session) -> None:
    """C11: the per-host flow — static gates → build → linkage → tests → C2 runtime → C3/C4/C5 →
    C6/C7/C9 → C8 → C10 and its negative control — stopping at the first red gate; then the report.

    ``-- cpu_bf16 [--model qwen3-8b-L2|tiny] [--skip-tests]``; the profile list is explicit."""
    _require(session, "ws1_qwen3", "ws1_matrix")
    if not session.posargs:
        session.error("c11_ci needs the profiles this host proves, e.g. `nox -s c11_ci -- cpu_bf16`")
    rc = subprocess.call([PY, str(ROOT / "ci" / "c11.py"), *session.posargs], cwd=ROOT)
    if rc == 2:
        session.log("exit 2: a requested profile's device is absent on this host (or bad arguments)")
        sys.exit(2)
    if rc != 0:
        session.error(f"c11_ci: red (exit {rc}); see the summary above and evidence/<profile>/report.md")


@nox.session
def fsdp_check(session: nox.Session) -> None:
    """Not one of C1–C11: FSDP2 on gloo (world sizes 1, 2, 4; WS1's model and transformers' after apply_ws1): each
    rank's log-probs == one device's, gradients bitwise run to run, at world 1 == one device; max |Δ| of the
    gradients across world sizes measured; our variant control red (``-- cpu_bf16 [--world 1,2,4] [--json]``)."""
    _matrix_gate(session, "fsdp")


@nox.session
def tp_check(session: nox.Session) -> None:
    """Not one of C1–C11: tensor parallel on gloo in the parallel-invariant order (ws1_dist.tp_model): the same
    log-probs at TP 1, 2, 4 and 8 on a 151,936-vocabulary tiny model and one Qwen3-8B-shaped layer; the row-parallel
    sum's controls red (``-- cpu_bf16 [--world 1,2,4,8] [--json]``; docs/parallel.md)."""
    _matrix_gate(session, "tp")


@nox.session
def cp_check(session: nox.Session) -> None:
    """Not one of C1–C11: context parallel on gloo in the parallel-invariant order (ws1_dist.ContextParallel): the same
    attention output, dq, dk, dv and log-probs at CP 1, 2 and 4 on one 2,048-token sequence with Qwen3-8B's heads; the
    ring merge (torch's order), the default order under the split and the rank fold red
    (``-- cpu_bf16 [--world 1,2,4] [--seq N] [--json]``; docs/parallel.md)."""
    _matrix_gate(session, "cp")


@nox.session
def parallel_gate(session: nox.Session) -> None:
    """Not one of C1–C11: the parallel-invariant order's gate — fsdp_check, tp_check and cp_check at their default
    degrees, one verdict (``-- PROFILE [--json]``; docs/parallel.md). CI runs its command
    (packages/ws1-matrix/tests/test_parallel_gate.py)."""
    _matrix_gate(session, "parallel")


@nox.session
def rl_onpolicy(session: nox.Session) -> None:
    """Not a gate: a GRPO run on the tiny model, the profile beside torch_default and our negative
    control, with reward and rollout-vs-trainer mismatch per step (JSON + PNG under evidence/).
    ``-- cpu_bf16 --engine vllm``: rollouts from vLLM + the ws1-vllm plugin, the trainer transformers + apply_ws1
    under FSDP2 (2 ranks), beside stock vLLM + stock transformers (in .venv-vllm; docs/trainer.md)."""
    if "--engine vllm" in " ".join(session.posargs).replace("=", " "):
        if not VLLM_PY.exists():
            session.log("exit 2: rl_onpolicy --engine vllm needs .venv-vllm: bash ci/setup_vllm.sh")
            sys.exit(2)
        _gate(session, "ws1_matrix", "rl-onpolicy", python=VLLM_PY)
        return
    _matrix_gate(session, "rl-onpolicy")


@nox.session
def triton_aot(session: nox.Session) -> None:
    """Not a gate: the Triton kernels compiled for sm_90a and sm_80 without a GPU (every launch of the
    chain's nodes at the test and Qwen3-8B shapes; Triton's ptxas) -> evidence/build/triton_aot.{json,md};
    red on a compile error, a spill in det_gemm/lm_head/attention or an FMA the docs do not promise
    (~1 min on 2 cores; docs/ci.md). Options after ``--``: python -m ws1_matrix triton-aot --help."""
    _require(session, "triton")
    _matrix_gate(session, "triton-aot")


@nox.session
def vllm_gate(session: nox.Session) -> None:
    """Not one of C1–C11: vLLM serving the model through the ws1-vllm plugin returns, in every serving regime
    (alone vs 64 concurrent, chunked prefill on/off, prefix cache on/off, n > 1, preemption, a weight update), the
    log-probs of WS1's teacher forcing, bitwise; the stock-vLLM and variant-kernel controls red (docs/vllm.md).
    ``-- cpu_bf16 [--regimes R,...] [--json]``. Runs in .venv-vllm (``bash ci/setup_vllm.sh``); where it is absent
    the gate runs here and writes every cell red, not executed (vLLM missing); exit 2 when the device is absent."""
    if VLLM_PY.exists():
        _gate(session, "ws1_matrix", "vllm", python=VLLM_PY)
        return
    session.log(f"{VLLM_PY.relative_to(ROOT)} is absent (bash ci/setup_vllm.sh): the gate records vLLM as missing")
    _matrix_gate(session, "vllm")


def _workers() -> tuple[list[str], dict]:
    """pytest-xdist across the host's cores, whole files per worker (a module's fixtures are built once), where
    pytest-xdist is installed (requirements/cpu.txt); one process otherwise. WS1_TEST_WORKERS=N overrides (1: serial).

    Each worker gets its share of the cores as torch's thread count (OMP_NUM_THREADS, unless set): N workers of
    `cores` threads each would oversubscribe the host, and OpenMP's waiting threads then cost more than the second
    worker gains (measured: the RL tests 4x slower). The suites hold no claim on a particular default count: the
    thread-count transforms run 1 and the default + 1 threads (ws1_ops.invariance.thread_counts)."""
    cores = len(os.sched_getaffinity(0))
    n = int(os.environ.get("WS1_TEST_WORKERS") or cores)
    if n <= 1 or subprocess.call([PY, "-c", "import xdist"], stderr=subprocess.DEVNULL) != 0:
        return [], {}
    return ["-n", str(n), "--dist", "loadfile"], {
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or str(max(1, cores // n))
    }


def _junit_counts(path: Path) -> dict:
    import xml.etree.ElementTree as ET

    if not path.is_file():
        return {}
    keys = ("tests", "failures", "errors", "skipped")
    return {k: sum(int(s.get(k, 0)) for s in ET.parse(path).getroot().iter("testsuite")) for k in keys}


def _run_suites(session: nox.Session, names: list[str], marker: str = "not slow", posargs: bool = True) -> None:
    """Run the named SUITES: those sharing an environment in one pytest process, xdist across the cores. Writes the
    record of what ran (evidence/ci/<session>.json, or $WS1_TESTS_RECORD: C11 binds its test step to it) and fails on
    a red process or one that collected nothing (pytest exit 5: a run that tested nothing must never look green)."""
    import json
    import time

    _require(session, "pytest", "ws1_accel", "ws1_contract")
    groups: dict[tuple, list[str]] = {}
    for n in names:
        key = (SUITES[n].get("python", ""), tuple(sorted(SUITES[n].get("env", {}).items())))
        groups.setdefault(key, []).append(n)
    absent = sorted({python for python, _ in groups if python and not (ROOT / python).exists()})
    if absent:
        session.error(f"{', '.join(absent)} absent: the vllm suite needs `bash ci/setup_vllm.sh` (setup_cpu.sh --ci)")
    record_path = Path(os.environ.get("WS1_TESTS_RECORD") or ROOT / "evidence" / "ci" / f"{session.name}.json")
    record_path.parent.mkdir(parents=True, exist_ok=True)
    processes, failed = [], []
    for (python, env_items), group in groups.items():
        paths = [p for n in group for p in SUITES[n]["paths"] if (ROOT / p).exists()]
        # a suite's ignored files are another suite's: run here only when that suite is in this process too
        ignores = [f"--ignore={p}" for n in group for p in SUITES[n].get("ignore", []) if p not in paths]
        junit = record_path.with_name(f"{record_path.stem}.{'+'.join(group)}.xml")
        junit.unlink(missing_ok=True)
        # a suite with an interpreter of its own runs in one process (vLLM's engine and the plugin are process-wide)
        workers, worker_env = _workers() if not python else ([], {})
        cmd = [
            str(ROOT / python) if python else PY,
            "-m",
            "pytest",
            "-q",
            "-m",
            marker,
            *workers,
            f"--junit-xml={junit}",
            *ignores,
            *paths,
            *(session.posargs if posargs else []),
        ]
        session.log(
            f"suites {', '.join(group)}: " + " ".join(cmd[2:]) + "".join(f" ({k}={v})" for k, v in worker_env.items())
        )
        t = time.perf_counter()
        rc = subprocess.call(
            cmd, cwd=ROOT, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **worker_env, **dict(env_items)}
        )
        processes.append(
            {
                "suites": group,
                "exit_code": rc,
                "seconds": round(time.perf_counter() - t, 1),
                "workers": int(workers[1]) if workers else 1,
                **worker_env,
                "counts": _junit_counts(junit),
            }
        )
        if rc != 0:
            failed.append((group, rc))
    from ws1_contract.provenance import git_state

    sha, dirty = git_state()
    record_path.write_text(
        json.dumps(
            {
                "kind": "ws1-tests-v1",
                "session": session.name,
                "suites": names,
                "of": sorted(SUITES),
                "marker": marker,
                "posargs": session.posargs if posargs else [],
                "passed": not failed,
                "processes": processes,
                "git_sha": sha,
                "dirty": dirty,
                "record_id": os.environ.get("WS1_TESTS_RECORD_ID"),
                "host": os.uname().nodename,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            },
            indent=1,
        )
        + "\n"
    )
    session.log(f"record: {record_path}")
    for group, rc in failed:
        if rc == 5:
            session.error(f"suites {', '.join(group)}: pytest collected no tests (exit 5): treated as a failure")
        session.error(f"suites {', '.join(group)}: pytest failed (exit {rc})")


@nox.session
def tests(session: nox.Session) -> None:
    """Every suite except the `slow` marker: cpu_bf16's and the other profiles' CPU-side checks (CI runs this; needs
    `bash ci/setup_cpu.sh --ci`, which adds the Ascend emulator build and the CUTLASS headers). Writes
    evidence/ci/tests.json, the full run closure asks for."""
    missing = [
        m
        for m in ("ws1_kernels_ascend_emu", "triton")
        if subprocess.call([PY, "-c", f"import {m}"], stderr=subprocess.DEVNULL)
    ]
    if missing:
        session.error(f"not installed in {PY}: {', '.join(missing)} — CI's suites need `bash ci/setup_cpu.sh --ci`")
    _run_suites(session, list(SUITES))


@nox.session
def tests_cpu(session: nox.Session) -> None:
    """The suites that bear on cpu_bf16 (the packages, kernels-cpu, the gates' own tests): C11's test step on a CPU
    host. The other profiles' CPU-side checks are CI's (`nox -s tests`)."""
    _run_suites(session, step_suites("cpu_bf16"))


def step_suites(profile: str) -> list[str]:
    """C11's test step for ``profile`` on a host: the suites that bear on it and run in the host's own environment
    (not those with an interpreter of their own, the vLLM suite: C11 proves a profile without vLLM)."""
    return [n for n, s in SUITES.items() if profile in s["profiles"] and "python" not in s]


@nox.session
def tests_triton(session: nox.Session) -> None:
    """The Triton kernels under the interpreter (TRITON_INTERPRET=1, CPU tensors): logic and invariance.

    Unit tests only: the triton_cuda_bf16 profile is judged on a GPU (ci/gpu_check.sh)."""
    _require(session, "triton")
    _run_suites(session, ["triton_interp"])


@nox.session
def tests_device(session: nox.Session) -> None:
    """The tests a device host adds for ``PROFILE`` (``-- cuda_bf16``): its kernel package's device tests and the
    ops on the device (DEVICE_TESTS). Exit 2 without the device; a skipped test is a failure here (a GPU host must
    not pass this step by skipping), as is collecting nothing."""
    import glob

    _require(session, "pytest", "ws1_accel", "ws1_ops")
    if len(session.posargs) != 1:
        session.error("tests_device needs one profile: nox -s tests_device -- cuda_bf16")
    profile = session.posargs[0]
    probe = subprocess.run(
        [
            PY,
            "-c",
            "import sys, ws1_accel; f = ws1_accel.family_of(sys.argv[1]); "
            "w = ws1_accel.unavailable_reason(sys.argv[1]); print(f); print(w or '')",
            profile,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        session.error(f"tests_device: unknown profile {profile!r}: {probe.stderr.strip().splitlines()[-1:]}")
    family, why = probe.stdout.splitlines()[0], "\n".join(probe.stdout.splitlines()[1:]).strip()
    if family not in DEVICE_TESTS:
        session.error(f"tests_device: {profile} runs on the CPU: its tests are `nox -s tests`")
    if why:
        session.log(f"exit 2: {profile} needs its device here: {why}")
        sys.exit(2)
    paths = sorted({p for pat in DEVICE_TESTS[family] for p in glob.glob(str(ROOT / pat))})
    report = ROOT / "evidence" / "build" / f"tests_device_{profile}.xml"
    report.parent.mkdir(parents=True, exist_ok=True)
    # pytest-xdist where the host has it (the GPU image does): the Triton tests' JIT compiles run side by side
    workers = ["-n", "4"] if subprocess.call([PY, "-c", "import xdist"], stderr=subprocess.DEVNULL) == 0 else []
    cmd = [PY, "-m", "pytest", "-q", "-ra", "-m", "not slow", *workers, f"--junit-xml={report}", *paths]
    session.log(" ".join(cmd[2:]))
    rc = subprocess.call(
        cmd, cwd=ROOT, env={**os.environ, "WS1_DEVICE_PROFILE": profile, "PYTHONDONTWRITEBYTECODE": "1"}
    )
    skipped = _junit_counts(report).get("skipped", 0)
    if rc == 5:
        session.error("pytest collected no tests (exit 5): treated as a failure")
    if rc != 0:
        session.error(f"pytest failed (exit {rc})")
    if skipped:
        session.error(f"{skipped} device test(s) skipped on the device host: a skip is a failure here (see -ra above)")


@nox.session
def tests_slow(session: nox.Session) -> None:
    """The slow cases (8B shapes, long sweeps): not in CI's budget."""
    _run_suites(session, [n for n in SUITES if "env" not in SUITES[n]], marker="slow")


@nox.session
def build_cuda(session: nox.Session) -> None:
    """kernels-cuda, compiled here without a GPU: every kernel .cu (not the host-only entry-point TUs,
    compile_check's HOST_ONLY) for sm_80 and sm_90a with nvcc alone (warnings as errors; the CUTLASS GEMM TUs
    for sm_90a), ptxas's resource report per kernel per arch and the SASS
    expectations (wgmma/TMA in the sm_90a GEMM, no local memory) to evidence/build/cuda_resources.{json,md};
    red on a compile error, any spill, a SASS expectation missed or a declared entry point missing (~35 s
    for the light files, minutes for the four CUTLASS TUs; cached by content). ``-- --link``: then the
    full torch-linked build in .venv-cuda (ci/setup_cuda_build.sh: torch 2.14.1 CUDA 13, first run ~25 min
    on 2 cores) and a load check there (schemas, Meta shapes, no kernel executed). No nvcc: exit 2."""
    rc = subprocess.call([PY, "kernels-cuda/tools/compile_check.py", "--out", "evidence/build"], cwd=ROOT)
    if rc == 2:
        sys.exit(2)
    if rc != 0:
        session.error("kernels-cuda compile check: red (see evidence/build/cuda_resources.md)")
    if "--link" in session.posargs:
        rc = subprocess.call(["bash", "ci/setup_cuda_build.sh"], cwd=ROOT)
        if rc == 2:
            sys.exit(2)
        if rc != 0:
            session.error(f"kernels-cuda link build or load check failed (exit {rc})")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over every Python source: the lint rules and the formatter's check (ruff.toml; ci/tests/test_lint.py
    runs the same in every CI run)."""
    session.run(PY, "-m", "ruff", "check", ".", external=True)
    session.run(PY, "-m", "ruff", "format", "--check", ".", external=True)

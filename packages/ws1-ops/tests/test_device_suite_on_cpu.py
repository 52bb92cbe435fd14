"""The device suites (packages/ws1-ops/tests_device and packages/ws1-qwen3/tests_device: part of a GPU/NPU host's
C11 test step) run on cpu_bf16 here, so their logic is checked in every CI run before a device host depends on them
(a broken test there would cost a GPU session)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_device_suite_passes_on_cpu_bf16():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            str(ROOT / "packages/ws1-ops/tests_device"),
            str(ROOT / "packages/ws1-qwen3/tests_device"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "WS1_DEVICE_PROFILE": "cpu_bf16"},
    )
    assert r.returncode == 0 and "skipped" not in r.stdout.splitlines()[-1], r.stdout[-3000:] + r.stderr[-2000:]

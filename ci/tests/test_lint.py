"""ruff (ruff.toml's rules and its formatter) over every Python source of the repository, in every CI run — as
``nox -s lint``."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_is_clean():
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_catches_a_planted_unused_import(tmp_path):
    """The check above can fail: the repository's own rules on a file with an unused import."""
    (tmp_path / "planted.py").write_text("import math\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--config",
            str(ROOT / "ruff.toml"),
            str(tmp_path / "planted.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1 and "F401" in r.stdout, r.stdout + r.stderr


def test_ruff_format_is_clean():
    """Every source is as ``ruff format`` (ruff.toml: 120 columns) would write it."""
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_format_catches_a_planted_badly_formatted_file(tmp_path):
    """The check above can fail: the repository's own format settings on a file ruff format would rewrite."""
    planted = tmp_path / "planted.py"
    planted.write_text("x = {  'a':1,'b' :2 }\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--check",
            "--no-cache",
            "--config",
            str(ROOT / "ruff.toml"),
            str(planted),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1 and "planted.py" in r.stdout, r.stdout + r.stderr

"""ci/gpu_wheels.py's choice of what a GPU host lacks (no network: the resolution is given)."""

import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpu_wheels  # noqa: E402


def R(*reqs):
    return [Requirement(r) for r in reqs]


def test_carried_are_the_absent_the_too_old_and_the_unprovable():
    resolved = {
        "nox": (
            Version("2026.10.20"),
            R("attrs>=24.1", "packaging>=22", "colorlog<7,>=6.6", "tomli>=1; python_version < '3.11'"),
        ),
        "attrs": (Version("26.1.0"), []),
        "packaging": (Version("26.4"), []),
        "colorlog": (Version("6.12"), []),
        "numpy": (Version("2.5.2"), []),
        "tomli": (Version("2.0"), []),
    }
    inventory = {"attrs": None, "packaging": Version("21.0"), "numpy": Version("2.5.2"), "colorlog": None}
    keep = gpu_wheels.select(resolved, inventory, ["nox==2026.10.20", "numpy"], "3.12")
    assert keep["nox"] == "absent from the host"
    assert keep["attrs"].startswith("host version unknown; required >=24.1")
    assert keep["packaging"].startswith("host has 21.0")
    assert keep["colorlog"].startswith("host version unknown")  # <7,>=6.6 has a lower bound
    assert "numpy" not in keep  # the host's 2.5.2 serves
    assert "tomli" in keep  # resolved and absent from the host: carried


def test_inventory_and_pins(tmp_path):
    inv = tmp_path / "inv.txt"
    inv.write_text("# comment\ntorch==2.11.0\nattrs\nTyping_Extensions\n")
    assert gpu_wheels.read_inventory(inv) == {"torch": Version("2.11.0"), "attrs": None, "typing-extensions": None}
    needs, pins = tmp_path / "needs.txt", tmp_path / "pins.txt"
    needs.write_text("nox\ncattrs  # the contract models\nnvidia-cutlass\n")
    pins.write_text("nox==2026.10.20\ncattrs==26.2.1\n")
    assert gpu_wheels.top_level(needs, pins) == ["nox==2026.10.20", "cattrs==26.2.1", "nvidia-cutlass"]


def test_bad_arguments_exit_2(tmp_path):
    assert gpu_wheels.main([str(tmp_path / "w"), "--host", str(tmp_path / "nope.txt")]) == 2

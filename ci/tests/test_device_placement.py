"""Every tensor factory call in the packages' sources and the benchmarks names its device.

The runtime probe (packages/ws1-matrix/tests/test_stray_device.py, torch's default device set to ``meta``)
catches a stray tensor on the paths a CPU host runs; this static check covers the rest (GPU-only branches,
error paths): a ``torch.arange/zeros/ones/full/empty/tensor/rand*/...`` call without ``device=`` is listed
with its file and line. ``device="cpu"`` for host metadata that is moved on purpose, ``device=x.device``
for data that meets the inputs. A call whose keywords come from ``**kwargs`` cannot be read and passes."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FACTORIES = {
    "tensor",
    "as_tensor",
    "arange",
    "linspace",
    "zeros",
    "ones",
    "full",
    "empty",
    "empty_strided",
    "eye",
    "rand",
    "randn",
    "randint",
    "randperm",
}
WHERE = [
    "packages/ws1-accel/src",
    "packages/ws1-contract/src",
    "packages/ws1-ops/src",
    "packages/ws1-kv/src",
    "packages/ws1-qwen3/src",
    "packages/ws1-dist/src",
    "packages/ws1-matrix/src",
    "benchmarks",
]


def unplaced(root: Path) -> list[str]:
    out = []
    for f in sorted(root.rglob("*.py")):
        src = f.read_text()
        for n in ast.walk(ast.parse(src)):
            if not (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in FACTORIES
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id == "torch"
            ):
                continue
            if any(k.arg in ("device", None) for k in n.keywords):  # None: **kwargs
                continue
            out.append(f"{f.relative_to(root)}:{n.lineno}: {ast.get_source_segment(src, n)[:100]}")
    return out


def test_every_factory_call_names_its_device():
    bad = [x for w in WHERE for x in unplaced(ROOT / w)]
    assert not bad, "tensor factory calls without device= (they land on the default device):\n" + "\n".join(bad)


def test_the_check_sees_an_unplaced_call(tmp_path):
    (tmp_path / "m.py").write_text(
        "import torch\na = torch.arange(3)\nb = torch.ones(2, device='cpu')\nc = torch.empty(1, **kw)\n"
    )
    assert [x.split(": ", 1)[1] for x in unplaced(tmp_path)] == ["torch.arange(3)"]

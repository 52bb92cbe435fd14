"""Progress of long gate steps: a bar on a terminal, concise timed lines elsewhere, never on stdout."""

import io

from ws1_contract import progress
from ws1_contract.progress import Progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


def _run(stream, every_s):
    with Progress(4, "c4_gradient cpu_bf16", stream=stream, every_s=every_s) as p:
        for op in ("det_gemm short", "attention short"):
            p.doing(op)
            progress.log(f"  · {op} done")
            p.update(2)
    return stream.getvalue()


def test_lines_when_not_a_tty():
    out = _run(io.StringIO(), every_s=0.0)
    assert "c4_gradient cpu_bf16: 0/4 cells — det_gemm short" in out and "c4_gradient cpu_bf16: 4/4 cells" in out
    assert "\r" not in out and "  · det_gemm short done" in out  # plain lines, no bar redraws


def test_silent_when_not_a_tty_and_the_step_is_short():
    out = _run(io.StringIO(), every_s=10.0)
    assert "cells" not in out and out.count("\n") == 2  # only the log lines themselves


def test_bar_on_a_tty():
    out = _run(_Tty(), every_s=10.0)
    assert "c4_gradient cpu_bf16:" in out and "/4 [" in out and "attention short" in out and "\r" in out  # a tqdm bar
    assert not progress._active  # closed on exit

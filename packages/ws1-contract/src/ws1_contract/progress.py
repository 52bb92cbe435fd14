"""Progress of a gate's long steps, on stderr (stdout stays the table or the ``--json`` output).

On a terminal: a tqdm bar (units done / total, the current op). Elsewhere (CI logs, pipes): no bar,
only a concise line every ``WS1_PROGRESS_EVERY_S`` seconds (default 10) while the step runs, so a
step shorter than that prints nothing and a long one shows it is alive and how far it got.

    with Progress(48, "c4_gradient cpu_bf16", unit="cell") as p:
        for op in ops:
            p.doing(op)
            ...
            p.update(4)
"""

from __future__ import annotations

import os
import sys
import time

_active: list[Progress] = []  # the open bars, innermost last: log() writes above them


def log(msg: str, stream=None) -> None:
    """One progress line on stderr that does not tear an open bar."""
    if _active:
        _active[-1].write(msg)
    else:
        print(msg, file=stream if stream is not None else sys.stderr, flush=True)


def _every_s() -> float:
    try:
        return float(os.environ.get("WS1_PROGRESS_EVERY_S", "10"))
    except ValueError:
        return 10.0


class Progress:
    def __init__(self, total: int, desc: str, *, unit: str = "cell", stream=None, every_s: float | None = None):
        self.total, self.desc, self.unit, self.n, self.what = total, desc, unit, 0, ""
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = _every_s() if every_s is None else every_s
        self.t0 = self._last = time.perf_counter()
        self.bar = None
        if getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, leave=False, dynamic_ncols=True)
        _active.append(self)

    def doing(self, what: str) -> None:
        """Name the op (or cell) now running."""
        self.what = what
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=True)
        else:
            self._line()

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        else:
            self._line()

    def write(self, msg: str) -> None:
        """A log line that does not tear the bar."""
        if self.bar is not None:
            self.bar.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def _line(self) -> None:
        now = time.perf_counter()
        if now - self._last >= self.every_s:
            self._last = now
            now_doing = f" — {self.what}" if self.what else ""
            print(
                f"  · {self.desc}: {self.n}/{self.total} {self.unit}s{now_doing} ({now - self.t0:.0f}s)",
                file=self.stream,
                flush=True,
            )

    def close(self) -> None:
        if self in _active:
            _active.remove(self)
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

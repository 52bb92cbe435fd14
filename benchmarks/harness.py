"""What the GPU benchmarks share beside their timing: the device's own ceilings, and a run that keeps what it measured.

**Ceilings.** A roofline is max(FLOPs / the BF16 matrix rate, bytes / the HBM bandwidth). Both ceilings are
*measured on the card the benchmark runs on*, in the same process, just before the cases: cuBLAS's BF16 product of
8192 x 8192 x 8192 random matrices (TFLOP/s) and a device-to-device copy of 1 GiB (bytes read + written per second),
medians of 10 after 3 warm-ups; the L2 size (the weight rotation's floor) comes from the device's properties. The
device kinds this project is lent differ by ~1.4x in bandwidth (H200 4.3 TB/s, H100 ~3.0 TB/s measured here) at
the same matrix rate, so a constant would misplace every memory-bound row on one of them. Without a GPU (the
interpreter's logic check) the nominal ceilings are the first H200 run's, marked as not measured.

**Run.** Benchmark groups run in order. After each group the JSON file is rewritten with every row measured so far
(``"complete": false`` until the last, and false for good when a group was cut short or not started), so a run
stopped by its caller's time limit loses only the group in flight.
With a deadline, a group that cannot start in time is not started and is named in ``errors`` ("not run: ..."),
never dropped. SIGTERM (``timeout``'s first signal) stops the group in flight: it is named in ``errors``, the file
is written, and the run returns; ``Stopped`` derives from BaseException so that the per-row ``except Exception`` of
the cases cannot swallow it.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Ceilings:
    """A device's BF16 matrix rate (TFLOP/s), HBM bandwidth (TB/s, read + write) and L2 size (bytes)."""

    bf16_tflops: float
    hbm_tbs: float
    l2_bytes: int
    source: str

    def roofline_ms(self, flops: float, nbytes: float, gemms: int = 1) -> float:
        """max(FLOPs x gemms / rate, bytes / bandwidth) in ms: the floor no kernel beats (each operand read once,
        the output written once). ``gemms``: BF16 GEMMs per useful product (3 for the exact FP32 split)."""
        return max(flops * gemms / (self.bf16_tflops * 1e9), nbytes / (self.hbm_tbs * 1e9))

    def basis(self, gemms: int = 1) -> str:
        rate = f"{self.bf16_tflops:.0f} TFLOP/s" + (f" / {gemms} ({gemms} BF16 GEMMs)" if gemms > 1 else "")
        return f"{rate}, {self.hbm_tbs:.2f} TB/s"

    def to_json(self) -> dict:
        return asdict(self)


# The first H200 run's measurements (2026-12-04: cuBLAS 8192^3 BF16, a device copy): used where nothing can be measured.
NOMINAL = Ceilings(790.0, 4.3, 60 * 2**20, "nominal (the first H200 run's measurements, 2026-12-04); not measured here")
_current = NOMINAL


def current() -> Ceilings:
    """The ceilings of this run (NOMINAL until :func:`use` sets measured ones)."""
    return _current


def use(c: Ceilings) -> Ceilings:
    global _current
    _current = c
    return c


def _median_ms(fn: Callable[[], object], reps: int = 10, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def _matmul_ms(dev: torch.device, n: int) -> float:
    """cuBLAS BF16 [n, n] x [n, n], random operands (zeros would run faster: the tensor cores draw less power)."""
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=g)
    return _median_ms(lambda: torch.matmul(a, b))


def _copy_ms(dev: torch.device, nbytes: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    return _median_ms(lambda: dst.copy_(src))


def measure(dev: torch.device) -> Ceilings:
    """The ceilings of ``dev`` measured now (a second or two on a Hopper card); NOMINAL for a non-CUDA device."""
    if dev.type != "cuda":
        return NOMINAL
    props = torch.cuda.get_device_properties(dev)
    l2 = int(getattr(props, "L2_cache_size", 0) or NOMINAL.l2_bytes)
    n = 8192
    tflops = 2 * n**3 / (_matmul_ms(dev, n) * 1e9)
    tbs = 2 * 2**30 / (_copy_ms(dev, 2**30) * 1e9)
    torch.cuda.empty_cache()
    return Ceilings(
        round(tflops, 1),
        round(tbs, 3),
        l2,
        f"measured on {props.name} in this run: cuBLAS BF16 {n}^3 random, a 1 GiB device copy (medians of 10)",
    )


def add_deadline(ap, what: str = "group") -> None:
    """The benchmarks' ``--deadline-s`` option (see :class:`Run`)."""
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help=f"start no {what} once this many seconds have passed since the first began (the JSON keeps what finished)",
    )


def refuse_unknown(prog: str, only: str, known, what: str = "group") -> bool:
    """True, after one line on stderr, when ``--only`` names something the benchmark does not have
    (the caller exits 2)."""
    unknown = [g for g in only.split(",") if g not in known]
    if unknown:
        print(
            f"{prog}: unknown {what}(s) {', '.join(unknown)} in --only (expected {', '.join(known)})", file=sys.stderr
        )
    return bool(unknown)


class Stopped(BaseException):
    """SIGTERM arrived: the caller's time limit. Not an Exception, so per-row handlers let it through."""


def _on_sigterm(signum, frame):  # noqa: ARG001
    raise Stopped("stopped by SIGTERM (the caller's time limit)")


class Run:
    """Benchmark groups under an optional deadline, the JSON rewritten after each (see the module docstring).

    ``payload(rows, errors)`` builds the file's object (host, cases, targets, ...); Run adds ``complete``."""

    def __init__(self, path: str, payload: Callable[[list, dict], dict], deadline_s: float | None = None):
        self.path, self.payload = path, payload
        self.t_end = None if deadline_s is None else time.monotonic() + deadline_s
        self.rows: list[dict] = []
        self.errors: dict[str, str] = {}
        self.stopped = False
        self.skipped: list[str] = []
        self._old_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def left_s(self) -> float | None:
        return None if self.t_end is None else self.t_end - time.monotonic()

    def group(self, name: str, fn: Callable[[], list[dict]]) -> None:
        """Run one group (unless the run was stopped or its deadline passed), keep its rows, write the file."""
        if self.stopped:
            self.skipped.append(name)
            self.errors[name] = "not run: the run was stopped by SIGTERM (the caller's time limit) before it"
        elif self.t_end is not None and self.left_s() <= 0:
            self.skipped.append(name)
            self.errors[name] = "not run: the time budget (--deadline-s) was spent before it"
        else:
            try:
                self.rows += fn()
            except Stopped as exc:
                self.stopped = True
                self.errors[name] = f"cut short: {exc}; its finished rows are lost, the earlier groups' are kept"
            except Exception as exc:  # noqa: BLE001  a failed group is reported, never silently dropped
                self.errors[name] = f"{type(exc).__name__}: {exc}"
        if name in self.errors:
            print(
                f"  {name}: {'FAILED ' if not self.errors[name].startswith('not run') else ''}{self.errors[name]}",
                flush=True,
            )
        self.write(complete=False)

    def finish(self) -> bool:
        """Write the file a last time; ``complete`` is true when every group ran to its end (failed or not)."""
        done = not self.stopped and not self.skipped
        self.write(complete=done)
        signal.signal(signal.SIGTERM, self._old_sigterm)
        return done

    def write(self, complete: bool) -> None:
        data = {**self.payload(self.rows, self.errors), "complete": complete}
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, self.path)


def available_bytes() -> int:
    """The host memory available now (/proc/meminfo MemAvailable, bytes; 0 where unreadable): whether the
    contenders of a CPU benchmark fit side by side."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0

"""What the plugin ran, per node: one ``ws1_ops.Recorder`` for the process, fed only by the plugin's own calls.

Every ws1 call the plugin makes (the model's forward, its logits, vLLM's log-probs) runs inside
:func:`calls`: a ``ws1_ops.record()`` block whose events are merged into the process's log when it ends. So
:func:`summary` is the ``ws1_ops.record()`` summary (op -> kernel ids, families, devices, call counts, the kernel
package's own count) of everything the plugin ran in this process since the model was built — and nothing a
caller ran beside it (its own teacher forcing, say). A node that fell back to other kernels would show there under
another kernel id, and a node vLLM computed itself would be absent.

vLLM builds the model in its Worker process: read the summary in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``),
or from the worker through ``LLM.collective_rpc``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import ws1_ops

_lock = threading.Lock()
_log: ws1_ops.Recorder | None = None  # None: no model built in this process


def start() -> None:
    """A fresh log (the model calls this when it is built)."""
    global _log
    with _lock:
        _log = ws1_ops.Recorder()


@contextlib.contextmanager
def calls() -> Iterator[None]:
    """Record the ws1 calls of this block into the process's log (not nested: one block per plugin entry point)."""
    global _log
    part = None
    try:
        with ws1_ops.record() as part:
            yield
    finally:
        # record() has settled the kernel package's count for the block's last call when it exits; a block that
        # raised is merged too (what ran before the error did run)
        if part is not None:
            with _lock:
                if _log is None:
                    _log = ws1_ops.Recorder()
                _log.merge(part)


def summary() -> dict[str, dict]:
    """``ws1_ops.Recorder.summary()`` of everything the plugin ran in this process since the model was built
    (``{}``: nothing yet). Per op: ``kernel_ids`` (``ws1_cpu::...`` on cpu_bf16), ``families``, ``devices``,
    ``forward``/``backward`` call counts, ``variant`` (a negative control's), ``package`` / ``package_problems``
    (the kernel package's own count of what ran, and where it disagrees)."""
    with _lock:
        log = _log
        if log is None:
            return {}
        return log.summary()

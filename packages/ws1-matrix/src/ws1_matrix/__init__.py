"""WS1 gates C3 (forward), C4 (gradient), C5 (elementwise inventory) and C8 (the four-judgment matrix).

    python -m ws1_matrix c3 cpu_bf16            # nox -s c3_forward -- cpu_bf16
    python -m ws1_matrix c8 cpu_bf16 --execute  # nox -s c8_matrix -- cpu_bf16 --execute

Each judgment of a representative case of the manifest becomes one evidence cell, executed on the
profile's own device, thresholds from the contract's resolver, the kernel that ran from the
ws1_ops registry. See docs/matrix.md.
"""

import os

# OpenMP's idle threads sleep instead of spinning. Set here, not in __main__: ``python -m ws1_matrix``
# imports this package, and torch with it, before __main__ runs, and libgomp reads this once when torch
# loads it (set later it does nothing; already set, it is left as it is). With as many threads as cores
# (torch's default: 2 on a 2-core host) GNU OpenMP spins ~300k rounds at each barrier, so on a host
# that runs anything else an op waits for a worker whose core a spinner or another process holds.
# Measured on a 2-core host at load ~4: a 16 MB index_select 3-45x slower with 2 threads than with 1
# (with this: equal); C3 63 s -> 47 s; C4's lm_head and embedding cells 200 s -> 160 s of CPU time.
# It changes how idle threads wait, never how many threads split an op or which rows each takes: the
# canonical runs keep torch.get_num_threads() and the thread transforms 1 and that + 1, same bits.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .judge import JUDGMENTS, Ctx, cell_id, judge  # noqa: E402

__all__ = ["JUDGMENTS", "Ctx", "cell_id", "judge"]

"""WS1 gates C3 (forward), C4 (gradient), C5 (elementwise inventory) and C8 (the four-judgment matrix).

    python -m ws1_matrix c3 cpu_bf16            # nox -s c3_forward -- cpu_bf16
    python -m ws1_matrix c8 cpu_bf16 --execute  # nox -s c8_matrix -- cpu_bf16 --execute

Each judgment of a representative case of the manifest becomes one evidence cell, executed on the
profile's own device, thresholds from the contract's resolver, the kernel that ran from the
ws1_ops registry. See docs/matrix.md.
"""

from .judge import JUDGMENTS, Ctx, cell_id, judge

__all__ = ["JUDGMENTS", "Ctx", "cell_id", "judge"]

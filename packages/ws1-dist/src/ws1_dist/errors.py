"""The one exception of ws1_dist."""

from __future__ import annotations


class DistError(ValueError):
    """A model, process group or call ws1_dist will not run: one line, starting ``ws1_dist: ``, naming it."""

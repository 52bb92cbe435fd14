"""One module per backend family; importing it registers that family's kernels (same names everywhere)."""

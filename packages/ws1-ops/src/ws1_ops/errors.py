"""Input errors: one line that names the op, the argument and the problem."""


class OpInputError(ValueError):
    pass


def check(cond: bool, op: str, msg: str) -> None:
    if not cond:
        raise OpInputError(f"{op}: {msg}")


def check_float(t, op: str, name: str, allowed=("bfloat16", "float32")) -> None:
    import torch

    check(isinstance(t, torch.Tensor), op, f"{name} must be a tensor, got {type(t).__name__}")
    dt = str(t.dtype).replace("torch.", "")
    check(dt in allowed, op, f"{name} must be {' or '.join(allowed)}, got {dt}")


def check_rank(t, rank: int, op: str, name: str, shape_doc: str) -> None:
    check(t.dim() == rank, op, f"{name} must be {shape_doc}, got shape {tuple(t.shape)}")

"""Exact ranking of top-k candidates, shared by the teacher-forced and the fused MUI collectors.

>>> import torch
>>> v, i = ordered(torch.tensor([[1.0, 3.0, 3.0]]), torch.tensor([[7, 9, 4]]))
>>> v.tolist(), i.tolist()
([[3.0, 3.0, 1.0]], [[4, 9, 7]])
"""
from __future__ import annotations

import torch


def exact_dtype(device: torch.device) -> torch.dtype:
    """The dtype candidates are re-scored in: float64 (float32 on MPS, which has no float64)."""
    return torch.float32 if device.type == "mps" else torch.float64


def ordered(exact: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort candidates [B, n] by exact value (desc), ties by flat index (asc). Returns (values, idx)."""
    idx_s, perm = idx.sort(dim=1)
    ex = exact.gather(1, perm)
    ex_s, order = ex.sort(dim=1, descending=True, stable=True)
    return ex_s, idx_s.gather(1, order)

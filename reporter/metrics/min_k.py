"""Min-K% Prob (Shi et al. 2023) on per-token log-probabilities.

>>> min_k_percent_prob([-1.0, -5.0, -0.5, -3.0, -0.1], k=0.4)   # mean of the 2 lowest
-4.0
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def min_k_percent_prob(token_logprobs: Sequence[float] | np.ndarray, k: float = 0.2) -> float:
    """The mean of the lowest ``k`` share of the token log-probs.

    The count is ``max(1, floor(k * n))``; an empty input gives NaN. Higher (closer to 0)
    means even the model's least-expected tokens were well predicted, a sign of seen text.

    >>> min_k_percent_prob([-2.0, -1.0, -0.5, -0.1, -4.0, -3.0, -0.2, -0.3, -0.4, -0.6], k=0.2)
    -3.5
    >>> math.isnan(min_k_percent_prob([]))
    True
    """
    x = np.asarray(token_logprobs, dtype=np.float64).ravel()
    if x.size == 0:
        return float("nan")
    m = max(1, int(math.floor(k * x.size + 1e-9)))
    return float(np.mean(np.partition(x, m - 1)[:m]))


def question_logprobs(prompt_lp: np.ndarray, span: tuple[int, int] | None) -> np.ndarray:
    """The log-probs of the question tokens (prompt token j has log-prob ``prompt_lp[j - 1]``).

    >>> question_logprobs(np.array([-1., -2., -3., -4.]), (2, 4)).tolist()
    [-2.0, -3.0]
    >>> question_logprobs(np.array([-1., -2.]), None).tolist()
    [-1.0, -2.0]
    """
    if span is None or span[0] < 0:
        return prompt_lp
    s, e = max(int(span[0]), 1) - 1, max(int(span[1]), 1) - 1
    return prompt_lp[s:e]

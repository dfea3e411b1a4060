"""Batched greedy decoding with left padding, length-sorted batches and OOM halving.

The ``transformers`` backend is here; ``generation_backend: vllm`` models generate in vLLM
(:mod:`reporter.models.vllm_backend`) and keep the hooked pass in transformers.

>>> outs = generate(lm, [lm.tokenizer("The sky is")["input_ids"]], max_new_tokens=4)
>>> outs[0].stopped_by in ("eos", "stop", "length"), len(outs[0].response_ids) <= 4
(True, True)
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from ..instrument.batch import left_pad
from .outputs import Generation, trim
from .vllm_backend import generate_vllm


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


@torch.inference_mode()
def _generate_batch(lm: Any, batch: list[list[int]], max_new_tokens: int, stop: Sequence[str]) -> list[Generation]:
    tok = lm.tokenizer
    ids, mask = left_pad(batch, tok.pad_token_id, lm.device)
    eos = lm.model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
    if tok.eos_token_id is not None:
        eos_ids.add(tok.eos_token_id)
    kw = dict(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=tok.pad_token_id,
              eos_token_id=sorted(eos_ids) or None, temperature=None, top_p=None, top_k=None)
    if stop:
        kw.update(stop_strings=list(stop), tokenizer=tok)
    out = lm.model.generate(input_ids=ids, attention_mask=mask, **kw)
    gens = []
    for i, prompt in enumerate(batch):
        new = out[i, ids.shape[1]:].tolist()
        kept, text, reason = trim(tok, new, stop, eos_ids)
        gens.append(Generation(prompt_ids=list(prompt), response_ids=kept, text=text, stopped_by=reason))
    return gens


def generate(lm: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop: Sequence[str] = (),
             batch_size: int = 8) -> list[Generation]:
    """Greedy continuations of tokenised ``prompts`` (results in input order).

    Prompts are processed longest first in batches of ``batch_size``; a batch that runs out
    of memory is split in half and retried.
    """
    if getattr(lm, "meta", {}).get("generation_backend") == "vllm":
        return generate_vllm(lm, prompts, max_new_tokens, stop)
    order = sorted(range(len(prompts)), key=lambda i: (-len(prompts[i]), i))
    results: list[Generation | None] = [None] * len(prompts)
    queue = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    while queue:
        idx = queue.pop(0)
        try:
            gens = _generate_batch(lm, [list(prompts[i]) for i in idx], max_new_tokens, stop)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            if not _is_oom(e) or len(idx) == 1:
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            half = len(idx) // 2
            queue[:0] = [idx[:half], idx[half:]]
            continue
        for i, g in zip(idx, gens):
            results[i] = g
    return results  # type: ignore[return-value]

"""Batched greedy decoding with left padding, length-sorted batches and OOM halving.

The ``transformers`` backend is here: reporter's own greedy loop over the KV cache
(:func:`reporter.instrument.decode.greedy_decode`, which collectors can ride and which drops
finished rows from the batch), or ``generate`` for a model whose generation config sets a logits
processor the loop does not apply (:func:`fusable_generation`); ``generation_backend: vllm`` models generate in vLLM
(:mod:`reporter.models.vllm_backend`) and keep the hooked pass in transformers.

>>> outs = generate(lm, [lm.tokenizer("The sky is")["input_ids"]], max_new_tokens=4)
>>> outs[0].stopped_by in ("eos", "stop", "length"), len(outs[0].response_ids) <= 4
(True, True)
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import torch

from ..instrument.batch import left_pad
from ..instrument.decode import StepCollector, greedy_decode
from .outputs import Generation, trim
from .vllm_backend import generate_vllm


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def _generate_batch(lm: Any, batch: list[list[int]], max_new_tokens: int, stop: Sequence[str]) -> list[Generation]:
    if fusable_generation(lm) is None:  # reporter's own loop: finished rows leave the batch
        return _decode_batch(lm, batch, max_new_tokens, stop, ())
    return hf_generate_batch(lm, batch, max_new_tokens, stop)


def _in_halves(batches: list[list[int]], run: Callable[[list[int]], list[Generation]]
               ) -> Iterator[tuple[list[int], list[Generation]]]:
    """``(indices, generations)`` of each batch in order; a batch that runs out of memory is split
    in half and retried (the halves in order).
    """
    queue = list(batches)
    while queue:
        idx = queue.pop(0)
        try:
            gens = run(idx)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            if not _is_oom(e) or len(idx) == 1:
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            queue[:0] = [idx[:len(idx) // 2], idx[len(idx) // 2:]]
            continue
        yield idx, gens


@torch.inference_mode()
def hf_generate_batch(lm: Any, batch: list[list[int]], max_new_tokens: int, stop: Sequence[str]) -> list[Generation]:
    """One batch through ``transformers``' ``generate`` (greedy, stop strings, EOS), cut by :func:`trim`."""
    tok = lm.tokenizer
    ids, mask = left_pad(batch, tok.pad_token_id, lm.device)
    eos_ids = _eos_ids(lm)
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


#: generation_config fields that change what greedy decoding picks: with one of them set (to a
#: non-neutral value) the model keeps ``generate`` and the teacher-forced pass
_PROCESSORS = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
               "bad_words_ids": None, "suppress_tokens": None, "begin_suppress_tokens": None,
               "forced_bos_token_id": None, "forced_eos_token_id": None, "min_length": 0, "min_new_tokens": None,
               "sequence_bias": None, "exponential_decay_length_penalty": None, "renormalize_logits": False}


def fusable_generation(lm: Any) -> str | None:
    """Why collectors cannot ride this model's generation (None: they can).

    The fused path is reporter's own greedy loop (:func:`reporter.instrument.decode.greedy_decode`):
    it needs the ``transformers`` backend and no logits processor in the model's generation config.

    >>> fusable_generation(lm) is None
    True
    """
    if getattr(lm, "meta", {}).get("generation_backend") == "vllm":
        return "the vLLM backend generates outside the hooked model"
    cfg = getattr(lm.model, "generation_config", None)
    for key, neutral in _PROCESSORS.items():
        v = getattr(cfg, key, neutral)
        if v is not None and v != neutral:
            return f"its generation config sets {key}={v!r}, which reporter's greedy loop does not apply"
    return None


def _eos_ids(lm: Any) -> set[int]:
    eos = lm.model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
    if lm.tokenizer.eos_token_id is not None:
        ids.add(lm.tokenizer.eos_token_id)
    return ids


def _stop_check(tok: Any, stop: Sequence[str]) -> Any:
    """``tokens -> bool``: whether the decoded tail of ``tokens`` contains a stop string."""
    stop = [s for s in stop if s]
    if not stop:
        return None
    # a stop string of n characters spans at most 4n tokens (byte-level tokens of a 4-byte character)
    window = 4 * max(len(s) for s in stop) + 8

    def stopped(tokens: list[int]) -> bool:
        text = tok.decode(tokens[-window:], skip_special_tokens=True)
        return any(s in text for s in stop)
    return stopped


def _decode_batch(lm: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: Sequence[str],
                  collectors: Sequence[StepCollector]) -> list[Generation]:
    """One batch through :func:`greedy_decode`, cut by :func:`trim`; the collectors get the kept lengths."""
    tok, eos_ids = lm.tokenizer, _eos_ids(lm)
    raw = greedy_decode(lm.model, lm.adapter, [list(p) for p in prompts], pad_id=tok.pad_token_id, eos_ids=eos_ids,
                        max_new_tokens=max_new_tokens, stopped=_stop_check(tok, stop), collectors=collectors)
    gens = []
    for prompt, new in zip(prompts, raw):
        kept, text, reason = trim(tok, new, stop, eos_ids)
        gens.append(Generation(prompt_ids=list(prompt), response_ids=kept, text=text, stopped_by=reason))
    for c in collectors:
        c.finish([len(g.response_ids) for g in gens])
    return gens


def generate_collecting(lm: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop: Sequence[str] = (),
                        collectors: Sequence[StepCollector] = ()) -> list[Generation]:
    """Greedy continuations of one batch of ``prompts`` (input order) with ``collectors`` fed by the
    generation's own forward passes (no second pass). A batch that runs out of memory is split in
    half and retried; the collectors then see the halves in order. Raises
    :class:`FloatingPointError` when the model's logits are not finite.

    >>> g = generate_collecting(lm, [lm.tokenizer("The sky is")["input_ids"]], max_new_tokens=3)
    >>> len(g[0].response_ids) <= 3
    True
    """
    why = fusable_generation(lm)
    if why is not None:
        raise ValueError(f"model '{lm.spec.name}': collectors cannot ride its generation: {why}")
    run = lambda idx: _decode_batch(lm, [prompts[i] for i in idx], max_new_tokens, stop, collectors)  # noqa: E731
    return [g for _, gens in _in_halves([list(range(len(prompts)))], run) for g in gens]


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
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    run = lambda idx: _generate_batch(lm, [list(prompts[i]) for i in idx], max_new_tokens, stop)  # noqa: E731
    for idx, gens in _in_halves(batches, run):
        for i, g in zip(idx, gens):
            results[i] = g
    return results  # type: ignore[return-value]

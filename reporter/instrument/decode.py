"""Greedy decoding over the KV cache with collectors riding the generation's own forward passes.

``transformers``' ``generate`` runs the model once per new token; reporter used to run every
batch a second time, teacher-forced over prompt + response, to feed its collectors (MUI, token
log-probs, option probabilities). :func:`greedy_decode` is a greedy loop of its own over
``past_key_values`` that lets those collectors read what they need from the passes generation
makes anyway:

* the **prefill** (step 0) covers the prompt: its logits give the prompt's token log-probs and
  the option probabilities at the answer position, and its last position predicts response
  token 0;
* **decode step j** feeds response token j-1 and predicts response token j.

At step j the hooks see the activations of the one position whose output predicts response
token j, and :meth:`StepCollector.after_step` then gets that step's logits and the greedy
token ``y_j`` — exactly what MUI's score at that position needs. Which steps count is only
known when the response has been cut at EOS or a stop string, so collectors keep their
per-step candidates on the device and decide in :meth:`StepCollector.finish`, given each
sample's kept response length. The loop syncs with the host once per step (the new tokens,
for EOS and stop strings), as ``generate`` does.

The loop reproduces ``generate(do_sample=False)`` (left padding, position ids from the
attention mask) token for token; the tests compare the two. Unlike ``generate`` it drops a row
from the batch and the KV cache as soon as it finishes, so a batch does not keep paying for
rows that are done while its longest answer is still being written.

**A prefix shared by every prompt runs once** (:func:`shared_prefix_length`): a chat template's
system prompt and instruction, or a few-shot task's examples. The prefix runs at batch size 1
with the collectors' hooks paused, its KV cache is repeated for every row, and the rest of each
prompt runs on top of it, left-padded after the prefix (``[prefix][pads][rest]``, the pads masked,
positions counting real tokens only), so every real token sees the same tokens at the same
positions as in the prompt alone. It is skipped where that would change what a collector reads
(a collector reading every prompt position, or positions inside the prefix) and where the model's
attention depends on the distance in the cache rather than on positions (a sliding window or
attention chunk shorter than the batch's prompts and answers).

>>> import torch
>>> from transformers import LlamaConfig, LlamaForCausalLM
>>> _ = torch.manual_seed(0)
>>> m = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
...                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100)).eval()
>>> out = greedy_decode(m, None, [[5, 6, 7], [8, 9]], pad_id=0, eos_ids={1}, max_new_tokens=4)
>>> [len(o) <= 4 for o in out]
[True, True]
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol, Sequence, runtime_checkable

import torch

from .batch import PassBatch, left_pad, position_ids_from_mask
from .head import small_batch_head
from .hooked_pass import eval_mode, input_device
from .hooks import HookSet

__all__ = ["StepCollector", "greedy_decode", "shared_prefix_length"]


@runtime_checkable
class StepCollector(Protocol):
    """Something that rides the forward passes of :func:`greedy_decode`.

    ``attach`` is called once per batch with the left-padded prompts (``response_mask`` all
    False) before the prefill; hooks it registers fire on every forward of the generation (the
    prefill sees [B, P, ...], each decode step [B, 1, ...]: the last position is always the one
    predicting this step's token). ``after_step(step, logits, next_tokens)`` follows each forward:
    ``logits`` [b, S, V] (at the prefill S = the most ``prompt_positions`` any collector asks for,
    all P positions if one asks for 0; at decode steps S = 1), the
    greedy tokens [b] of this step and ``rows`` [b], the batch rows still decoding (finished rows
    leave the batch; hooks see the same b rows). ``finish(lengths)`` gives each sample's kept response
    length: steps ``j < lengths[b]`` predicted a kept response token; later ones are discarded.
    """

    #: how many of the prefill's last positions it needs logits for (0 = every prompt position);
    #: read after ``attach``, so it may depend on the batch
    prompt_positions: int

    #: Optional (absent = False): True when its hooks and logits at the prefill read only the
    #: ``prompt_positions`` last positions of each row (or, with an optional ``prompt_reads_from``
    #: set in ``attach``, per row, the prompt positions from that index on), without aligning a hook's
    #: tensor with the prompt batch's full width. Only when every collector says so does a prefix all
    #: prompts share run once (:func:`shared_prefix_length`): the prefill's hooks then see the rest of
    #: the prompts, [B, P - shared, ...], whose last positions are the prompts' last positions.
    # shares_prefix: bool

    def attach(self, hooks: HookSet, adapter: Any, prompt: PassBatch) -> None:
        """Register hooks for the whole generation of this batch."""

    def after_step(self, step: int, logits: torch.Tensor, next_tokens: torch.Tensor, rows: torch.Tensor) -> None:
        """Read this step's logits and greedy tokens of the rows still decoding (``rows``: their
        indices in the batch; the prefill has them all). Keep results on the device.
        """

    def finish(self, lengths: Sequence[int]) -> None:
        """Keep the steps that predicted kept response tokens; move results to the host."""


def _prefill_positions(collectors: Sequence[StepCollector], width: int) -> int:
    """``logits_to_keep`` of the prefill: the most positions any collector needs (0 = all of them).

    >>> class C:
    ...     def __init__(self, n): self.prompt_positions = n
    >>> _prefill_positions([], 9), _prefill_positions([C(1), C(4)], 9), _prefill_positions([C(4), C(0)], 9)
    (1, 4, 0)
    """
    need = [int(getattr(c, "prompt_positions", 1)) for c in collectors]
    if any(n <= 0 for n in need) or max(need, default=1) >= width:
        return 0
    return max(need, default=1)


#: a prefix shared by a batch's prompts runs once only when it is at least this long ...
SHARED_PREFIX_MIN = 8
#: ... and saves at least this many token positions, ``(B - 1) * length`` (the extra forward at batch
#: size 1 reads every weight once more: on a CPU about as long as 40 tokens of SmolLM2's prefill)
SHARED_PREFIX_MIN_SAVED = 64


#: RoPE variants whose frequencies depend on the largest position of each forward call (transformers'
#: ``dynamic_rope_update``): a prefix run alone would be rotated as a short text
_CALL_DEPENDENT_ROPE = ("dynamic", "longrope")


def _sharing_limit(model: torch.nn.Module) -> int | None:
    """The longest prompt plus answer for which a prefix run alone gives what the whole prompt gives (None: any).

    Attention that cuts at a distance in the cache (a sliding window, an attention chunk) sees the pads
    after the prefix as distance; RoPE scaled by the call's longest position (``dynamic``, ``longrope``)
    rotates a prefix run alone as a short text. Either holds only while everything fits inside the
    window or the original context.
    """
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "get_text_config"):
        cfg = cfg.get_text_config()
    limits = [int(v) for k in ("sliding_window", "attention_chunk_size", "local_attention", "window_size")
              if isinstance(v := getattr(cfg, k, None), int) and not isinstance(v, bool) and v > 0]
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None)
    params = list(rope.values()) if isinstance(rope, dict) and all(isinstance(v, dict) for v in rope.values()) \
        else [rope]
    for r in params:
        if isinstance(r, dict) and (r.get("rope_type") or r.get("type")) in _CALL_DEPENDENT_ROPE:
            original = (r.get("original_max_position_embeddings") or getattr(cfg, "original_max_position_embeddings", None)
                        or getattr(cfg, "max_position_embeddings", None))
            limits.append(int(original) if isinstance(original, int) else 0)
    return min(limits) if limits else None


def shared_prefix_length(prompts: Sequence[Sequence[int]], reads_from: Sequence[int] | None = None, *,
                         model: torch.nn.Module | None = None, max_new_tokens: int = 0) -> int:
    """How many leading tokens, the same in every prompt, :func:`greedy_decode` runs once for the batch (0: none).

    The prefix is the prompts' longest common prefix, cut so that every prompt keeps at least
    its last token and every position in ``reads_from`` (per row, the first prompt position a
    collector reads) for the batch's own pass. It is used only when it is at least
    :data:`SHARED_PREFIX_MIN` tokens long and saves :data:`SHARED_PREFIX_MIN_SAVED` positions
    or more, and, for a model whose attention cuts at a cache distance (a sliding window) or
    whose RoPE is scaled by each call's longest position (``dynamic``, ``longrope``), when the
    prompts and answers fit inside that window or the original context.

    >>> shared_prefix_length([[1] * 20 + [5, 6], [1] * 20 + [7]] * 4)
    20
    >>> shared_prefix_length([[1] * 20 + [5, 6], [1] * 20 + [7]] * 4, reads_from=[12] * 8)
    12
    >>> shared_prefix_length([[1] * 20 + [5, 6], [2] * 20 + [7]] * 4)
    0
    """
    B = len(prompts)
    if B < 2:
        return 0
    first, n_min = prompts[0], min(len(p) for p in prompts)
    length = 0
    while length < n_min and all(p[length] == first[length] for p in prompts):
        length += 1
    length = min(length, n_min - 1, *(int(r) for r in (reads_from or [])))
    if length < SHARED_PREFIX_MIN or (B - 1) * length < SHARED_PREFIX_MIN_SAVED:
        return 0
    limit = _sharing_limit(model) if model is not None else None
    if limit is not None and max(len(p) for p in prompts) + max_new_tokens > limit:
        return 0
    return length


def _reads_from(collectors: Sequence[StepCollector], lengths: Sequence[int], width: int) -> list[int]:
    """Per row, the first prompt position any collector reads at the prefill (0 when one reads them all,
    or does not say that it reads the last positions only: ``shares_prefix``).
    """
    first = [max(0, n - 1) for n in lengths]
    for c in collectors:
        if not getattr(c, "shares_prefix", False):
            return [0] * len(lengths)
        own = getattr(c, "prompt_reads_from", None)
        if own is not None:
            first = [min(a, int(b)) for a, b in zip(first, own)]
            continue
        k = int(getattr(c, "prompt_positions", 1))
        if k <= 0 or k >= width:
            return [0] * len(lengths)
        first = [min(a, max(0, n - k)) for a, n in zip(first, lengths)]
    return first


def greedy_decode(model: torch.nn.Module, adapter: Any, prompts: Sequence[Sequence[int]], *, pad_id: int,
                  eos_ids: set[int], max_new_tokens: int, stopped: Callable[[list[int]], bool] | None = None,
                  collectors: Sequence[StepCollector] = (), prune: bool = True,
                  share_prefix: bool = True) -> list[list[int]]:
    """Greedy continuations of ``prompts`` (one batch, input order), with ``collectors`` riding along.

    Each sample's tokens end with the token that finished it (an EOS id, or the token after which
    ``stopped(tokens so far)`` said True), or after ``max_new_tokens``. The caller cuts them
    (:func:`reporter.models.outputs.trim`) and calls each collector's ``finish`` with the kept
    lengths. With ``prune`` (default) a row that finished leaves the batch and the KV cache, so
    the remaining rows decode faster (``generate`` keeps feeding it pad tokens until the last row
    finishes); without it the loop does what ``generate`` does. With ``share_prefix`` (default) a
    prefix every prompt shares runs once (:func:`shared_prefix_length`). Runs in eval mode under
    ``inference_mode``, with the LM head's small-batch kernel (:mod:`reporter.instrument.head`);
    hooks are removed on exit. Raises :class:`FloatingPointError` when a step's logits are not
    finite (checked once, at the end).
    """
    device = input_device(model)
    ids, mask = left_pad(prompts, pad_id, device)
    B = ids.shape[0]
    pos = position_ids_from_mask(mask)
    done = [False] * B
    out_tokens: list[list[int]] = [[] for _ in range(B)]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    with eval_mode(model), torch.inference_mode(), small_batch_head(head), HookSet() as hooks:
        for c in collectors:
            c.attach(hooks, adapter, PassBatch(ids, mask, torch.zeros_like(mask, dtype=torch.bool)))
        keep_logits = _prefill_positions(collectors, ids.shape[1])
        shared = 0
        if share_prefix:
            reads = _reads_from(collectors, [len(p) for p in prompts], ids.shape[1])
            shared = shared_prefix_length(prompts, reads, model=model, max_new_tokens=max_new_tokens)
        if keep_logits and ids.shape[1] - shared < keep_logits:
            shared = 0  # a collector asks for logits at more positions than the rest has
        pre = _prefill_after_prefix(model, hooks, prompts, shared, pad_id, keep_logits) if shared else None
        if pre is not None:
            out, mask, pos = pre
        else:  # the whole prompts (also when the model's cache cannot be repeated across rows)
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                        logits_to_keep=keep_logits)
        cache_kw = "cache" if "cache" in out else "past_key_values"  # transformers >= 5.2x names it cache
        rows = torch.arange(B, device=device)  # the original row of each row still decoding
        live = list(range(B))
        finite = torch.ones((), dtype=torch.bool, device=device)
        for step in range(max(1, max_new_tokens)):  # step 0 runs even for 0 new tokens: prompt logits
            logits = out.logits
            finite &= torch.isfinite(logits[:, -1]).all().to(device)
            nxt = logits[:, -1].float().argmax(-1).to(device)
            for c in collectors:
                c.after_step(step, logits, nxt, rows)
            if max_new_tokens == 0:
                break
            host = nxt.tolist()  # the one host sync of the step
            for b, t in zip(live, host):
                if done[b]:  # (without pruning) a finished row is fed pad tokens
                    continue
                out_tokens[b].append(t)
                done[b] = t in eos_ids or (stopped is not None and stopped(out_tokens[b]))
            if all(done) or step == max_new_tokens - 1:
                break
            keep = [r for r, b in enumerate(live) if not done[b]]
            cache = out[cache_kw]
            if len(keep) < len(live) and prune and hasattr(cache, "batch_select_indices"):
                k = torch.tensor(keep, device=device)  # finished rows leave the batch and its KV cache
                cache.batch_select_indices(k)
                rows, mask, pos, nxt = rows[k], mask[k], pos[k], nxt[k]
                live = [live[r] for r in keep]
            elif any(done[b] for b in live):  # rows that finished are fed the pad token, as generate does
                nxt = torch.where(torch.tensor([done[b] for b in live], device=device),
                                  torch.full_like(nxt, pad_id), nxt)
            # (no row finished: nothing to replace, and no host-to-device copy on this step)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            pos = pos[:, -1:] + 1
            out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True,
                        **{cache_kw: cache})
        if not bool(finite):
            raise FloatingPointError("the model gives NaN or infinite logits")
    return out_tokens


#: KV-cache layers that hold only keys and values per position, so that a prefix's can be repeated across rows
_REPEATABLE_LAYERS = frozenset({"DynamicLayer", "DynamicSlidingWindowLayer"})


class _Prefill(NamedTuple):
    out: Any
    mask: torch.Tensor
    pos: torch.Tensor


def _prefill_after_prefix(model: torch.nn.Module, hooks: HookSet, prompts: Sequence[Sequence[int]], shared: int,
                          pad_id: int, keep_logits: int) -> _Prefill | None:
    """The prefill with the first ``shared`` tokens (the same in every prompt) run once.

    The prefix runs at batch size 1, the hooks paused (the collectors read the batch's own pass
    only), its cache is repeated for every row, and the rest of each prompt runs on it, left-padded
    after the prefix; returns the rest's output with the whole batch's mask and position ids, or
    None when the model's cache is not one of plain key and value layers (:data:`_REPEATABLE_LAYERS`):
    a recurrent state would carry the pads after the prefix, and other layers may not repeat.
    """
    device = input_device(model)
    prefix = torch.tensor([list(prompts[0][:shared])], device=device)
    with hooks.paused():
        first = model(input_ids=prefix, attention_mask=torch.ones_like(prefix), use_cache=True, logits_to_keep=1,
                      position_ids=torch.arange(shared, device=device)[None, :])
    kw = "cache" if "cache" in first else "past_key_values"
    cache = first[kw]
    layers = getattr(cache, "layers", None)
    if not hasattr(cache, "batch_repeat_interleave") or not layers \
            or any(type(layer).__name__ not in _REPEATABLE_LAYERS for layer in layers):
        return None  # recurrent or quantised state: pads in the middle would flow through it, or it cannot be repeated
    cache.batch_repeat_interleave(len(prompts))
    rest, rest_mask = left_pad([list(p[shared:]) for p in prompts], pad_id, device)
    mask = torch.cat([rest_mask.new_ones(len(prompts), shared), rest_mask], dim=1)
    pos = position_ids_from_mask(mask)[:, shared:]
    out = model(input_ids=rest, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=keep_logits,
                **{kw: cache})
    return _Prefill(out, mask, pos)

"""Batches of token sequences for the model: left padding and teacher-forced prompt + response.

>>> ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0, device="cpu")
>>> ids.tolist(), mask.tolist()
([[5, 6, 7], [0, 0, 8]], [[1, 1, 1], [0, 0, 1]])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch


@dataclass
class ScoredSlots:
    """The scored positions of a batch in a padded [B, R] slot layout (R = most positions of any sample).

    Slot ``b * R + r`` holds sample b's r-th scored position; ``rows`` is its row in the flattened
    [B*T, ...] activations, ``valid`` is False on padding slots, and ``bb``/``tt``/``slot`` list
    the real slots (sample, position, slot index).
    """

    R: int
    counts: torch.Tensor  # [B] scored positions per sample
    rows: torch.Tensor  # [B*R] long
    valid: torch.Tensor  # [B*R] bool
    bb: torch.Tensor
    tt: torch.Tensor
    slot: torch.Tensor


@dataclass
class PassBatch:
    """One batch of teacher-forced sequences.

    ``input_ids`` / ``attention_mask`` are [B, T] (left or right padded); ``response_mask``
    [B, T] bool is True where token t is a response token (the model's own answer), False on
    prompt and padding.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor

    def to(self, device: torch.device | str) -> "PassBatch":
        """The same batch on ``device``."""
        return PassBatch(self.input_ids.to(device), self.attention_mask.to(device),
                         self.response_mask.to(device=device, dtype=torch.bool))

    def scored_positions(self) -> torch.Tensor:
        """[B, T] bool: positions t whose NEXT token t+1 is a valid response token.

        These are the positions whose output predicts a response token; the last column is
        always False.

        >>> b = PassBatch(torch.zeros(1, 4, dtype=torch.long), torch.tensor([[0, 1, 1, 1]]),
        ...               torch.tensor([[False, False, True, True]]))
        >>> b.scored_positions().tolist()
        [[False, True, True, False]]
        """
        am = self.attention_mask.bool()
        nxt = self.response_mask.bool()[:, 1:] & am[:, 1:] & am[:, :-1]
        return torch.cat([nxt, torch.zeros_like(nxt[:, :1])], dim=1)

    def scored_slots(self) -> ScoredSlots:
        """:meth:`scored_positions` gathered into the padded slot layout collectors share.

        One host sync (R), before the forward pass.

        >>> b = PassBatch(torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.long),
        ...               torch.tensor([[False, False, True, True], [False, False, False, True]]))
        >>> s = b.scored_slots(); s.R, s.rows.tolist(), s.valid.tolist()
        (2, [1, 2, 6, 0], [True, True, True, False])
        """
        pos = self.scored_positions()
        B, T = pos.shape
        counts = pos.sum(1)
        R = int(counts.max().item()) if B else 0
        dev = pos.device
        rank = pos.long().cumsum(1) - 1
        bb, tt = pos.nonzero(as_tuple=True)
        slot = bb * R + rank[bb, tt]
        rows = torch.zeros(B * R, dtype=torch.long, device=dev)
        rows[slot] = bb * T + tt
        valid = torch.zeros(B * R, dtype=torch.bool, device=dev)
        valid[slot] = True
        return ScoredSlots(R, counts, rows, valid, bb, tt, slot)


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [B, T] and attention mask, each sequence right-aligned (padding on the left)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s):] = torch.tensor(list(s), dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


@dataclass
class PaddedBatch:
    """One batch of :func:`padded_batches`: which of the caller's sequences it holds, and the batch itself.

    ``idx[r]`` is the caller's index of row ``r``; ``lengths[r]`` its token count. The sequences
    are right-aligned, so token ``j`` of row ``r`` sits at column ``width - lengths[r] + j``.
    """

    idx: list[int]
    lengths: list[int]
    batch: PassBatch

    @property
    def width(self) -> int:
        """The padded length T of the batch."""
        return int(self.batch.input_ids.shape[1])

    @property
    def input_ids(self) -> torch.Tensor:
        """The left-padded token ids [B, T]."""
        return self.batch.input_ids


def padded_batches(seqs: Sequence[Sequence[int]], batch_size: int, pad_id: int | None,
                   device: torch.device | str) -> Iterator[PaddedBatch]:
    """The ONE batching loop of every scoring pass: longest sequences first (ties in the caller's order),
    ``batch_size`` at a time, left-padded, no response tokens.

    Sorting by length keeps the padding of each batch small; left padding puts every sequence's
    last token in the last column, which is what ``logits_to_keep`` counts from.

    >>> [(b.idx, b.lengths, b.width) for b in padded_batches([[1], [2, 3, 4], [5, 6]], 2, None, "cpu")]
    [([1, 2], [3, 2], 3), ([0], [1], 1)]
    """
    pad = pad_id if pad_id is not None else 0
    order = sorted(range(len(seqs)), key=lambda i: (-len(seqs[i]), i))
    for s in range(0, len(order), max(1, batch_size)):
        idx = order[s:s + max(1, batch_size)]
        ids, mask = left_pad([list(seqs[i]) for i in idx], pad, device)
        yield PaddedBatch(idx, [len(seqs[i]) for i in idx], PassBatch(ids, mask, torch.zeros_like(mask, dtype=torch.bool)))


def teacher_forced_batch(prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]], pad_id: int,
                         device: torch.device | str) -> PassBatch:
    """Left-padded prompt + response sequences with a mask of the response tokens.

    >>> b = teacher_forced_batch([[1, 2], [3]], [[4], [5, 6]], pad_id=0, device="cpu")
    >>> b.input_ids.tolist(), b.response_mask.int().tolist()
    ([[1, 2, 4], [3, 5, 6]], [[0, 0, 1], [0, 1, 1]])
    """
    seqs = [list(p) + list(r) for p, r in zip(prompt_ids, response_ids)]
    ids, mask = left_pad(seqs, pad_id, device)
    resp = torch.zeros_like(mask, dtype=torch.bool)
    width = ids.shape[1]
    for i, r in enumerate(response_ids):
        if r:
            resp[i, width - len(r):] = True
    return PassBatch(ids, mask, resp)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count only real tokens (correct for left padding).

    >>> position_ids_from_mask(torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0]])).tolist()
    [[1, 1, 0, 1, 2], [0, 1, 2, 1, 1]]
    """
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 1)  # pads: any valid id (HF generate's choice)

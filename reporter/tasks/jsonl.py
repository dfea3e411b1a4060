"""A user's own data: a JSON-lines file with a question, an answer and (optionally) options per line.

>>> import json, tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "faq.jsonl"
>>> _ = p.write_text(json.dumps({"q": "2+2?", "a": "4"}) + "\\n")
>>> t = jsonl_task("faq", str(p), "q", "a", "numeric"); t.items()[0].answer
'4'
"""
from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Sequence

from ..errors import UserError, unknown_home, user_path
from ..registry import did_you_mean
from ..scoring.scorers import extract_number
from ..store.atomic import JSON_ERRORS, why_not_json
from .base import LETTERS, MC_INSTRUCTION, Item, Task, mc_question

#: the scorers a jsonl task may name
JSONL_SCORERS = ("exact", "numeric", "choice", "f1", "code")


def jsonl_task(name: str, path: str, prompt_field: str, answer_field: str, scorer: str,
               choices_field: str | None = None, max_new_tokens: int = 64, instruction: str = "") -> Task:
    """A task over a user's own JSON-lines file."""
    p = user_path(path)

    def load() -> list[Item]:
        return _read_items(name, p, prompt_field, answer_field, choices_field, scorer=scorer)

    def other_split_from_file(other: Path) -> list[Item]:
        # the other split gives question text only (Min-K% against it): its rows are not scored, so not checked
        # for what scoring needs (letters, tests)
        return _read_items(name, other, prompt_field, answer_field, choices_field, id_prefix=f"{name}-other",
                           what=f"the other split of task '{name}'")

    default_instr = MC_INSTRUCTION if scorer == "choice" else "Answer the question."
    return Task(name=name, scorer=scorer, load=load, instruction=instruction or default_instr,
                answer_prefix="Answer:", max_new_tokens=max_new_tokens,
                base_stop=("\n",) if scorer in ("choice", "exact", "numeric") else ("\n\n",),
                description=f"user data from {p}", source=str(p), other_split_from_file=other_split_from_file)


#: a user's data file may be large, but not unbounded
MAX_BYTES = 512 << 20


def _gunzip_bounded(raw: bytes, limit: int, p: Path, what: str) -> bytes:
    """The gzip data ``raw`` (every member) decompressed, refused once it passes ``limit`` bytes: a few MiB
    of gzip can expand to many GiB, which ended in MemoryError.

    >>> import gzip, pathlib
    >>> _gunzip_bounded(gzip.compress(b"ab") + gzip.compress(b"c"), 10, pathlib.Path("x.gz"), "t")
    b'abc'
    """
    out, total = [], 0
    while raw:
        d = zlib.decompressobj(wbits=31)
        piece = d.decompress(raw, limit + 1 - total)
        total += len(piece)
        if total > limit or d.unconsumed_tail:
            raise UserError(f"{what}: {p} expands to more than {limit >> 20} MiB of JSON lines; split it or give "
                            "fewer rows")
        if not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        out.append(piece)
        raw = d.unused_data.lstrip(b"\0")  # members follow each other; gzip pads with zeros
    return b"".join(out)


def jsonl_rows(p: Path, what: str, fields: Collection[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSON-lines file (``.gz`` read compressed).

    Every problem is one :class:`UserError` naming the file and the line; ``what`` names the file's
    role when it is missing ("task 'faq'", "the other split of task 'gsm8k'"). ``fields``: the row's keys
    the caller reads (None: all), which must not be written twice nor hold a text no tokenizer encodes; the
    other fields are the user's own (metadata, a tweet cut mid-character) and are not checked.

    >>> import json, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "rows.jsonl"
    >>> _ = p.write_text(json.dumps({"q": "1+1?"}) + "\\n\\n" + json.dumps({"q": "2+2?"}) + "\\n")
    >>> [(ln, r["q"]) for ln, r in jsonl_rows(p, "test")]
    [(1, '1+1?'), (3, '2+2?')]
    """
    if p.is_dir():
        raise UserError(f"{what}: {p} is a directory, not a JSON-lines file")
    if p.exists() and not p.is_file():  # a device (/dev/zero) or a pipe: it could be read forever
        raise UserError(f"{what}: {p} is not a regular file (a device or a pipe); give a JSON-lines file")
    if not p.is_file():
        raise UserError(f"{what}: data file {p} does not exist" + (f" ({why})" if (why := unknown_home(str(p))) else ""))
    if p.stat().st_size > MAX_BYTES:
        raise UserError(f"{what}: {p} is larger than {MAX_BYTES >> 20} MiB")
    try:
        data = _gunzip_bounded(p.read_bytes(), MAX_BYTES, p, what) if p.suffix == ".gz" else p.read_bytes()
    except (OSError, EOFError, zlib.error) as e:
        raise UserError(f"{p}: not a readable gzip file ({e}); give JSON lines, plain or gzip-compressed") from None
    for ln, raw in enumerate(data.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"{p}: line {ln}: not UTF-8 text (byte 0x{raw[e.start]:02x}); save it as UTF-8") from None
        if ln == 1:
            line = line.removeprefix("\ufeff")  # a byte-order mark, as Windows editors save UTF-8
        if not line.strip():
            continue
        twice: list[list[str]] = []  # per object, its keys written twice; the row's own object is parsed last
        try:
            r = json.loads(line, object_pairs_hook=lambda pairs: _once(pairs, twice))
        except JSON_ERRORS as e:
            raise UserError(f"{p}: line {ln}: not valid JSON ({why_not_json(e)})") from None
        if not isinstance(r, dict):
            raise UserError(f"{p}: line {ln}: expected a JSON object, got {type(r).__name__}")
        if read := [k for k in twice[-1] if fields is None or k in fields]:  # JSON keeps the last in silence
            raise UserError(f"{p}: line {ln}: the key {read[0]!r} is written twice; keep one")
        checked = r if fields is None else {k: r[k] for k in fields if k in r}
        if (bad := _lone_surrogate(checked)) is not None:  # "\ud800" parses, then no tokenizer can encode it
            raise UserError(f"{p}: line {ln}: field '{bad[0]}' holds an invalid character (U+{bad[1]:04X}, half of "
                            "a UTF-16 pair escaped alone); fix the text")
        yield ln, r


def _once(pairs: list[tuple[str, Any]], twice: list[list[str]]) -> dict[str, Any]:
    """A JSON object from its pairs; its keys written twice are appended to ``twice`` (one list per object).

    >>> twice = []; json.loads('{"a": 1, "b": {"c": 2, "c": 3}}', object_pairs_hook=lambda p: _once(p, twice)), twice
    ({'a': 1, 'b': {'c': 3}}, [['c'], []])
    """
    out = dict(pairs)
    dup: list[str] = []
    if len(out) < len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                dup.append(k)
            seen.add(k)
    twice.append(dup)
    return out


#: the fields of a row the code scorer reads besides the prompt and the answer
_CODE_FIELDS = ("test", "entry_point", "prompt", "test_setup")

#: a lone UTF-16 surrogate: what a JSON "\ud800" escape or a path byte that is not UTF-8 (Python's surrogateescape)
#: leaves in a text, which no tokenizer and no output encoding takes
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(row: dict[str, Any]) -> tuple[str, int] | None:
    """The first field of ``row`` whose text (or a text in its list) holds a lone UTF-16 surrogate, and that code
    point; None when there is none.

    >>> _lone_surrogate({"q": "ok", "options": ["a", "b" + chr(0xD800)]})
    ('options', 55296)
    """
    for k, v in row.items():
        for t in v if isinstance(v, list) else (v,):
            if isinstance(t, str) and (m := LONE_SURROGATE.search(t)):
                return str(k), ord(m.group())
    return None


def rows_as_items(p: Path, what: str, fields: Sequence[str], convert: Callable[[int, dict[str, Any]], Item]) -> list[Item]:
    """Each row of a JSON-lines file as an :class:`Item` by ``convert(line, row)``; a row without one of
    ``fields`` or that ``convert`` cannot read is one error naming the file, the line and the fields.

    >>> import json, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "train.jsonl"
    >>> _ = p.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\\n")
    >>> rows_as_items(p, "x", ("question", "answer"), lambda ln, r: Item(str(ln), r["question"], r["answer"]))[0].id
    '1'
    """
    out = []
    for ln, r in jsonl_rows(p, what, fields):
        missing = [f for f in fields if f not in r]
        if missing:
            raise UserError(f"{p}: line {ln}: missing field(s) {', '.join(missing)}; each line of {what} needs "
                            f"the fields {', '.join(fields)}, as the data's hub copy has them")
        try:
            out.append(convert(ln, r))
        except (KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
            raise UserError(f"{p}: line {ln}: not a row of {what} ({type(e).__name__}: {str(e)[:80]}); each line "
                            f"needs the fields {', '.join(fields)}, as the data's hub copy has them") from None
    if not out:
        raise UserError(f"{what}: {p} has no items")
    return out


def _text(v: Any) -> bool:
    """Whether a field's value reads as text: a string or a number (not a boolean, list, object or null)."""
    return isinstance(v, (str, int, float)) and not isinstance(v, bool)


def _options(p: Path, ln: int, field: str, v: Any) -> list[str]:
    """A row's options: a list of 2 to len(LETTERS) distinct, non-empty texts (or numbers)."""
    if not isinstance(v, list) or not 2 <= len(v) <= len(LETTERS):
        raise UserError(f"{p}: line {ln}: field '{field}' must be a list of 2 to {len(LETTERS)} options")
    seen: dict[str, int] = {}
    for k, c in enumerate(v, 1):
        if not _text(c):
            raise UserError(f"{p}: line {ln}: option {k} of field '{field}' must be text (or a number), got "
                            f"{type(c).__name__}")
        if not str(c).strip():
            raise UserError(f"{p}: line {ln}: option {k} of field '{field}' is empty")
        key = " ".join(str(c).split())
        if key in seen:  # two letters for one answer: the gold is ambiguous and the option orders repeat
            raise UserError(f"{p}: line {ln}: options {seen[key]} and {k} of field '{field}' are the same text "
                            f"{key[:40]!r}")
        seen[key] = k
    return [str(c) for c in v]


def _has_tests(v: Any) -> bool:
    """Whether a code row's ``test`` holds a test: a non-empty string, or a list of strings one of which is."""
    if isinstance(v, str):
        return bool(v.strip())
    return isinstance(v, list) and all(isinstance(t, str) for t in v) and any(t.strip() for t in v)


#: the scorers whose gold answer cannot be empty (f1 may be: an unanswerable question, as in SQuAD 2.0; a code
#: task's answer is unused, its row's tests decide)
_GOLD_NEEDED = ("exact", "numeric", "choice")

#: the gold answer of a choice task without options: the letter of an option the prompt itself lists
_LETTER = re.compile(r"\(?([A-Za-z])\)?")


def _read_items(name: str, p: Path, prompt_field: str, answer_field: str,
                choices_field: str | None, *, id_prefix: str | None = None, what: str | None = None,
                scorer: str | None = None) -> list[Item]:
    """Every item of the file; each problem is one line naming the file and the line."""
    out: list[Item] = []
    seen: set[str] = set()
    read = {prompt_field, answer_field, *((choices_field,) if choices_field else ()), "id", *_CODE_FIELDS}
    for ln, r in jsonl_rows(p, what or f"task '{name}'", read):
        for f_ in (prompt_field, answer_field) + ((choices_field,) if choices_field else ()):
            if f_ not in r:
                raise UserError(f"{p}: line {ln}: missing field '{f_}'{did_you_mean(f_, list(r))}; the row's fields: "
                                + (", ".join(map(str, r)) or "none"))
            if f_ != choices_field and not _text(r[f_]):
                raise UserError(f"{p}: line {ln}: field '{f_}' must be text (or a number), got "
                                f"{type(r[f_]).__name__}")
            if f_ != choices_field and not str(r[f_]).strip() and (f_ == prompt_field or scorer in _GOLD_NEEDED):
                raise UserError(f"{p}: line {ln}: field '{f_}' is empty")
        choices = _options(p, ln, choices_field, r[choices_field]) if choices_field else None
        q = mc_question(str(r[prompt_field]), choices) if choices else str(r[prompt_field])
        ans = str(r[answer_field])
        if choices and (m := _LETTER.fullmatch(ans.strip())) and m.group(1).upper() in LETTERS[: len(choices)] \
                and ans not in choices:
            ans = m.group(1).upper()  # "b" or "(B)": the letter, as without options
        if choices and ans not in tuple(LETTERS[: len(choices)]):  # one letter ("BC" was a substring of "ABCD")
            if ans in choices:
                ans = LETTERS[choices.index(ans)]
            elif ans.isdigit() and int(ans) < len(choices):
                ans = LETTERS[int(ans)]
            elif scorer is not None:  # the other split's rows give question text only: their answers are not read
                raise UserError(f"{p}: line {ln}: answer {ans[:40]!r} is neither an option, its letter nor its "
                                "index")
        elif scorer == "choice" and not choices:
            if not (m := _LETTER.fullmatch(ans.strip())) or m.group(1).upper() not in LETTERS:
                raise UserError(f"{p}: line {ln}: answer {ans[:40]!r} is not an option letter ({LETTERS[0]}–"
                                f"{LETTERS[-1]}); scorer: choice without choices_field reads the options from the "
                                "prompt and needs their letter as the answer (or give choices_field)")
            ans = m.group(1).upper()
        if scorer == "numeric" and extract_number(ans) is None:  # no reply could ever match it: every model scored 0
            raise UserError(f"{p}: line {ln}: answer {ans[:40]!r} has no number in it; scorer: numeric compares the "
                            "last number of a reply with the answer's (scorer: exact compares text)")
        if scorer == "code" and not _has_tests(r.get("test")):  # without tests any program that runs passed
            raise UserError(f"{p}: line {ln}: a code task's row needs a 'test' field: the assertions (a string or "
                            "a list of strings) the generated code must pass")
        for f_ in ("entry_point", "test_setup") if scorer == "code" else ():  # read as program text
            if f_ in r and not isinstance(r[f_], str):
                raise UserError(f"{p}: line {ln}: field '{f_}' must be a string, got {type(r[f_]).__name__}")
        iid = str(r.get("id", f"{id_prefix or name}-{ln}"))
        if iid in seen:
            raise UserError(f"{p}: line {ln}: duplicate id {iid[:40]!r}")
        seen.add(iid)
        meta = {k: v for k, v in r.items() if k in _CODE_FIELDS}
        out.append(Item(id=iid, question=q, answer=ans, choices=choices, meta=meta))
    if not out:
        raise UserError(f"{what or f'task {name!r}'}: {p} has no items")
    return out

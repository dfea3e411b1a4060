"""Inputs that decide a result, counted by their content: a file's sha256, and the LPP settings with a local corpus
file by its bytes (run hashes and the model cache's keys use them, so an edited file is measured again).

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "f.txt"; _ = p.write_text("abc")
>>> file_sha256(p)[:19]
'sha256:ba7816bf8f01'
"""
from __future__ import annotations

import hashlib
import os
from typing import Any

from ..errors import user_path

__all__ = ["corpus_for_hash", "file_sha256"]


def file_sha256(path: str | os.PathLike[str]) -> str | None:
    """``sha256:<hex>`` of a file's bytes, or None when it cannot be read.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "f.txt"; _ = p.write_text("abc")
    >>> file_sha256(p)[:19], file_sha256(p.with_name("missing"))
    ('sha256:ba7816bf8f01', None)
    """
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return f"sha256:{h.hexdigest()}"


#: the built-in LPP corpora (``reporter.tasks.corpora.BUILTIN_CORPORA``, a layer above): their names are never files
BUILTIN_NAMES = ("coqa", "lambada")


def corpus_for_hash(lpp: dict[str, Any]) -> dict[str, Any]:
    """The LPP settings as a hash sees them: a local ``corpus`` file counts by its bytes, not by its path (built-in
    and hub corpus names stay names).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.txt"; _ = p.write_text("one")
    >>> a = corpus_for_hash({"corpus": str(p)}); _ = p.write_text("two")
    >>> a == corpus_for_hash({"corpus": str(p)}), corpus_for_hash({"corpus": "coqa"})
    (False, {'corpus': 'coqa'})
    """
    corpus = lpp.get("corpus")
    if isinstance(corpus, str) and corpus not in BUILTIN_NAMES and user_path(corpus).is_file():
        return {**lpp, "corpus": file_sha256(user_path(corpus)) or corpus}
    return lpp

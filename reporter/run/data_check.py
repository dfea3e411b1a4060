"""The data files a run would read, checked before any model loads: :func:`check_user_data`.

Its own module so that ``reporter validate`` checks them without importing the analyse stage (SciPy) or torch.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from ..collect.plan import build_task
from ..config import ModelSpec, Profile, TaskConfig
from ..errors import UserError, user_path
from ..store.atomic import read_json
from ..tasks import Task, get_task
from ..tasks.base import DEFAULT_SHOTS, TASKS, checked_task
from ..tasks.corpora import fixed_texts, most_tokens

__all__ = ["check_user_data", "hub_only_tasks", "uncached_hub_models"]


def check_user_data(profile: Profile, models: Sequence[ModelSpec] = ()) -> None:
    """Read every ``type: jsonl`` task's file and every ``other_split:`` file, and check every ``items:``
    core set against its task and every task's ``shots`` against the examples it can draw, now, so that
    their problems stop the run before a model loads. Each problem is one line naming the profile (its file) and
    the task's key path by name (``tasks['mine'].path``: an index would count the tasks left after ``--tasks`` and
    lm-eval's groups, not the file's). ``models``: the run's models; a task without ``shots`` is checked at the
    default of the base models among them (1), which a one-item task cannot give.
    """
    try:
        _check(profile, _base_model(models))
    except UserError as e:
        at = f"{profile.origin}: " if profile.origin else ""
        raise UserError([f"{at}{line}" for line in e.lines]) from None


def _base_model(models: Sequence[ModelSpec]) -> str | None:
    """The first model that is a base model for certain, whose default shots a task without ``shots`` gives: ``kind:
    base``, an untrained ``random:`` one without a kind, or a local directory whose tokenizer has no chat template
    (:func:`_local_kind`); None if there is none (a hub model's kind is read from its files when it loads).
    """
    return next((m.name for m in models if m.kind == "base" or (m.kind is None and (
        m.source.startswith("random:") or (m.source_type == "local" and _local_kind(m.source) == "base")))), None)


#: the files that give a Hugging Face tokenizer its chat template besides ``tokenizer_config.json``'s own key
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "additional_chat_templates")


def _local_kind(directory: str) -> str | None:
    """``base`` where a local model directory's tokenizer has no chat template (its ``tokenizer_config.json`` has no
    ``chat_template`` key and no chat-template file lies beside it), as loading decides a model without ``kind:``;
    ``instruct`` where it has one; None where that cannot be told without loading (no or unreadable
    ``tokenizer_config.json``: loading will say).

    >>> import json, tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> _local_kind(str(d)) is None
    True
    >>> _ = (d / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    >>> _local_kind(str(d))
    'base'
    >>> _ = (d / "chat_template.jinja").write_text("{{ messages }}")
    >>> _local_kind(str(d))
    'instruct'
    """
    path = user_path(directory)
    try:
        config = read_json(path / "tokenizer_config.json")
    except UserError:
        return None
    if config is None:
        return None
    if config.get("chat_template") or any((path / name).exists() for name in CHAT_TEMPLATE_FILES):
        return "instruct"
    return "base"


def _check(profile: Profile, base: str | None = None) -> None:
    """The LPP corpus's problem and every task's first one, listed at once (a task's later checks read what its
    first one refused).
    """
    lines: list[str] = []
    for check, args in [(_check_lpp_corpus, (profile,))] + [(_check_task, (profile, t, base)) for t in profile.tasks]:
        try:
            check(*args)
        except UserError as e:
            lines += e.lines
    if lines:
        raise UserError(lines)


def _check_task(profile: Profile, t: TaskConfig, base: str | None = None) -> None:
    """One task's data: its first problem (``base``: a base model of the run, see :func:`_base_model`)."""
    if t.lm_eval is not None:
        if t.items is not None:  # document ids: lm-eval's task is loaded (once per process) to check them
            from ..tasks.lm_eval_source import include_dirs, resolve, select_docs

            task = resolve(t.lm_eval_group or t.lm_eval, include_dirs(profile.lm_eval_include)).task(t.lm_eval)
            select_docs(len(task.eval_docs), t.name, limit=None, seed=0, only=t.items)
        return
    if t.type != "jsonl":
        _check_factory(t.name)
    # a built-in task's few-shot split has the default's one example: only a jsonl file or a plugin's task (its
    # few-shot examples drawn from its own items, as few as its author gave) may be too small for it
    small = t.type == "jsonl" or not _built_in(t.name)
    shots = t.shots if t.shots is not None else DEFAULT_SHOTS["base"] if base and small else 0
    if not (t.type == "jsonl" or t.items is not None or t.other_split or shots):
        return
    task = build_task(t)
    known: set[str] | None = None
    if t.type == "jsonl" or t.items is not None:
        try:
            known = {it.id for it in task.items()}
        except UserError as e:
            if t.type != "jsonl":
                raise
            own = f"task '{t.name}': "
            raise UserError([f"tasks[{t.name!r}].path: {line.removeprefix(own)}" for line in e.lines]) from None
    if shots:
        by = None if t.shots is not None else f"not set: base model '{base}' takes {shots} by default"
        _check_shots(t.name, shots, task, None if known is None else len(known), by)
    if t.items is not None and known is not None and not set(t.items) <= known:
        missing = sorted(set(t.items) - known)
        raise UserError(f"tasks[{t.name!r}].items: {len(missing)} of its {len(t.items)} item ids are not items "
                        f"of the task (first: {missing[0]!r}); was {t.items_from or 'the list'} written for "
                        "this task?")
    if t.other_split and task.other_split is not None:
        try:
            task.other_split()
        except UserError as e:
            raise UserError(f"tasks[{t.name!r}].other_split: {e}") from None


def _built_in(name: str) -> bool:
    """Whether task ``name`` is one of reporter's own (its factory lives in the ``reporter`` package), not a plugin's.

    >>> _built_in("arc_easy")
    True
    """
    factory = TASKS.get(name)
    return str(getattr(factory, "__module__", "")).split(".")[0] == "reporter"


def _check_shots(name: str, shots: int, task: Task, n_items: int | None = None, default: str | None = None) -> None:
    """A task's ``shots`` within what it can draw: its few-shot split, or all but one of its items (held out of
    evaluation; ``n_items``: their number where the caller read them). A larger count ran every example it had
    while the card said ``shots``. Data that cannot be read here (a hub-only task, a plugin's loader that raises)
    is not checked: the task reads it when it runs, and fails alone there (``plan_task`` refuses the count then).
    ``default``: why the count applies where the task sets none (then 0 is what to set).
    """
    if task.source.startswith("hub:"):
        return
    try:
        most = len(task.fewshot_pool()) if task.fewshot_pool is not None else None
        n = (n_items if n_items is not None else len(task.items())) if most is None else 0
    except Exception:  # noqa: BLE001  (whatever a loader raises is the task's own failure, at run time)
        return
    if most is not None:
        if shots > most:
            raise UserError(f"tasks[{name!r}].shots: {shots} is more few-shot examples than task '{name}' has "
                            f"({most}, its few-shot split); use at most {most}")
        return
    if shots >= n:
        raise UserError(f"tasks[{name!r}].shots: its {n} item(s) would all be taken as few-shot examples "
                        f"(shots: {shots}{'; ' + default if default else ''}), leaving none to evaluate; "
                        + ("set shots: 0 or add items" if default else f"use at most {max(n - 1, 0)}"))


def _check_lpp_corpus(profile: Profile) -> None:
    """The LPP corpus, when reporter reads it as it is (``coqa``, a local file): parseable, and with a text that
    can reach ``lpp.min_tokens`` in any tokenizer (:func:`~reporter.tasks.corpora.most_tokens`), else every
    model's LPP failed after loading. ``lambada`` is joined to length and a hub dataset is read at run time.
    """
    lpp = profile.lpp
    if not lpp.enabled:
        return
    try:
        texts = fixed_texts(lpp.corpus)
    except UserError as e:
        raise UserError(f"lpp.corpus: {e}") from None
    if texts is None:
        return
    longest = max(map(most_tokens, texts), default=0)
    if longest < lpp.min_tokens:
        raise UserError(f"lpp.min_tokens: no text of the LPP corpus {lpp.corpus!r} can have {lpp.min_tokens} tokens "
                        f"(its {len(texts)} text(s) have at most {max(longest - 8, 0)} UTF-8 bytes); give longer "
                        f"texts or lower lpp.min_tokens (the official LPP code uses 128)")


def _check_factory(name: str) -> None:
    """A registered task's factory (a plugin's, most often) builds a :class:`Task` a run can use
    (:func:`~reporter.tasks.base.checked_task`): one that raised failed every model after loading, outside the guard
    that lets a task fail alone (its data and scorer run inside it).
    """
    try:
        checked_task(name)
    except UserError as e:
        raise UserError(f"tasks[{name!r}]: {e}") from None


def hub_only_tasks(profile: Profile) -> list[tuple[str, str]]:
    """``(task, hub dataset)`` for each built-in task of the profile that has no offline copy (its ``source``
    says ``hub:``): ``validate`` cannot read its data without the network, so it says so.

    >>> from reporter.config import Profile, TaskConfig
    >>> hub_only_tasks(Profile("p", tasks=(TaskConfig(name="bbh"), TaskConfig(name="gsm8k"))))
    [('bbh', 'lukaemon/bbh')]
    """
    out = []
    for t in profile.tasks:
        if t.lm_eval is None and t.type != "jsonl" and (src := get_task(t.name).source).startswith("hub:"):
            out.append((t.name, src.removeprefix("hub:").strip()))
    return out


#: a hub model's weights as ``transformers`` looks for them, in its order: a sharded index (then every shard it names)
#: or one file, safetensors first
_WEIGHTS = (("model.safetensors.index.json", "model.safetensors"), ("pytorch_model.bin.index.json", "pytorch_model.bin"))


def uncached_hub_models(models: Sequence[ModelSpec]) -> list[ModelSpec]:
    """The models given by a hub id whose files are not in the Hugging Face cache at the model's ``revision``: its
    ``config.json``, or its weights (a single file, or a sharded index and every shard it names). ``validate`` reads
    nothing from the hub, so it says that such a model is downloaded when it runs, and fails alone where the hub
    cannot be reached (8 hub models of ``paper-lpp`` passed in silence offline; a cache holding a model's config but
    not its weights passed too).

    >>> uncached_hub_models([ModelSpec(name="m", source="random:llama")])
    []
    """
    return [m for m in models if m.source_type == "hub" and not _hub_files_cached(m.source, m.revision)]


def _hub_files_cached(repo: str, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    def cached(name: str) -> str | None:
        path = try_to_load_from_cache(repo, name, revision=revision)
        return path if isinstance(path, str) else None

    if cached("config.json") is None:
        return False
    for index, single in _WEIGHTS:
        if (listing := cached(index)) is not None:
            try:
                shards = set((json.loads(Path(listing).read_text(encoding="utf-8")).get("weight_map") or {}).values())
            except (OSError, ValueError, AttributeError):
                return False  # a damaged index: loading reads it again from the hub
            return bool(shards) and all(cached(str(s)) is not None for s in shards)
        if cached(single) is not None:
            return True
    return False

"""lm-evaluation-harness tasks as a task source: names, groups, include paths, item selection, digests.

A profile entry ``{lm_eval: NAME}`` names an lm-eval task, group or tag; ``lm_eval_include:
[DIR, ...]`` adds task YAMLs of the user's own (lm-eval's ``include_path``), and the word
``packaged`` adds reporter's offline copies of lm-eval's own ARC, HellaSwag, BoolQ and MMLU
configs (:mod:`reporter.tasks.lm_eval_offline`). Everything about a task (prompt template,
few-shot split, filters, ``generation_kwargs``, metrics) comes from lm-eval's own ``Task``
object; reporter only chooses the documents (seeded, the same for every model and rerun) and
the shot count.

lm-eval is an optional extra (``pip install 'reporter[lm-eval]'``); this module imports it only
when an lm-eval task is asked for. Its task index over every installed YAML costs several
seconds, so a name that the include paths alone define is looked up there first, and each index
is built once per process.

>>> select_docs(10, "arc_challenge", limit=3, seed=0)
[5, 6, 9]
>>> select_docs(10, "arc_challenge", limit=3, seed=0) == select_docs(10, "arc_challenge", limit=3, seed=0)
True
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import inspect
import json
import logging
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import UserError
from ..registry import did_you_mean

LM_EVAL_PIP = "pip install 'reporter[lm-eval]'  (lm-eval==0.4.13)"
#: the ``lm_eval_include`` entry that stands for reporter's offline copies of lm-eval's own task configs
PACKAGED = "packaged"
#: lm-eval's request types that reporter executes
OUTPUT_TYPES = ("multiple_choice", "loglikelihood", "generate_until", "loglikelihood_rolling")
#: the lm-eval task-config fields a profile may override (``tasks[].lm_eval_config``)
CONFIG_OVERRIDES = ("description", "target_delimiter", "fewshot_delimiter", "fewshot_split", "generation_kwargs")
#: the seed of lm-eval's few-shot sampler (lm-eval's own default, ``--fewshot_random_seed``)
FEWSHOT_SEED = 1234

_MANAGERS: dict[tuple[tuple[str, ...], bool], Any] = {}
_LOADED: dict[tuple[tuple[str, ...], str], "Resolved"] = {}


def available() -> bool:
    """Whether lm-eval is installed (located, not imported).

    >>> isinstance(available(), bool)
    True
    """
    return importlib.util.find_spec("lm_eval") is not None


def require(what: str) -> None:
    """Raise one line naming ``what`` and the extra to install when lm-eval is missing."""
    if not available():
        raise UserError(f"{what} needs lm-evaluation-harness, which is not installed; run: {LM_EVAL_PIP}")


def include_dirs(entries: Sequence[str]) -> tuple[str, ...]:
    """The include paths lm-eval gets: each directory as given, ``packaged`` as reporter's offline export."""
    out = []
    for e in entries:
        if e == PACKAGED:
            from .lm_eval_offline import packaged_include_dir

            out.append(str(packaged_include_dir()))
        else:
            out.append(str(e))
    return tuple(out)


def _quiet() -> None:
    """lm-eval logs every override and loaded task at INFO/WARNING; reporter reports its own progress."""
    for name in ("lm_eval", "lm-eval"):
        logging.getLogger(name).setLevel(logging.ERROR)


def task_manager(include: tuple[str, ...], defaults: bool = True) -> Any:
    """lm-eval's ``TaskManager`` over ``include`` (and its own tasks when ``defaults``), built once per process
    (its index through :func:`indexed_once`).
    """
    key = (include, defaults)
    if key not in _MANAGERS:
        _quiet()
        from lm_eval.tasks import TaskManager

        with indexed_once():
            _MANAGERS[key] = TaskManager(include_path=list(include) or None, include_defaults=defaults)
    return _MANAGERS[key]


@contextlib.contextmanager
def indexed_once() -> Iterator[None]:
    """lm-eval's task index, each directory's part built once: while this is active, every ``TaskManager``
    (reporter's, or lm-eval's own command line's) indexes each directory of YAMLs from a memo.

    lm-eval indexes each directory in turn, later ones overriding earlier names; the memo keeps each
    directory's part (keyed by the directory and its YAML files' sizes and times), and lm-eval's own
    several-second part is also stored in reporter's cache (:func:`_stored_index`).
    """
    from lm_eval.tasks import _index

    original = _index.TaskIndex.build

    def build(paths: Any, *, resolve_includes: bool = True) -> dict[str, Any]:
        index: dict[str, Any] = {}
        for root in paths:
            part = (str(Path(root).resolve()), _stamp(Path(root)), resolve_includes)
            if part not in _ROOTS:
                own = Path(root).resolve() == Path(_index.__file__).parent.resolve()
                fresh = lambda: original([Path(root)], resolve_includes=resolve_includes)  # noqa: E731
                _ROOTS[part] = _stored_index(part, fresh) if own else fresh()
            index.update(_ROOTS[part])
        return index

    _index.TaskIndex.build = staticmethod(build)  # type: ignore[method-assign]
    try:
        yield
    finally:
        _index.TaskIndex.build = staticmethod(original)  # type: ignore[method-assign]


_ROOTS: dict[tuple[str, str, bool], dict[str, Any]] = {}


def _stamp(root: Path) -> str:
    """What the index of one directory depends on: its YAML files, their sizes and modification times."""
    h = hashlib.sha256()
    for p in sorted(root.glob("**/*.yaml")):
        try:
            st = p.stat()
        except OSError:
            continue
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


#: the format of a stored index (a change makes every stored one stale)
INDEX_FORMAT = 1


def _stored_index(part: tuple[str, str, bool], build: Any) -> dict[str, Any]:
    """lm-eval's index of its own task YAMLs, read from reporter's cache when its directory has not changed
    (keyed by the directory, its YAML files' sizes and times, and lm-eval's version), else built and stored.

    Building it parses some 14,000 YAML files (about 7 s on 2 CPU cores); reading it back takes about 1 s.
    A cache that cannot be written only costs the next run the build.
    """
    from lm_eval.tasks._index import Entry, Kind

    from ..installed import cache_root

    key = hashlib.sha256(json.dumps([INDEX_FORMAT, lm_eval_version(), *part]).encode()).hexdigest()[:24]
    path = cache_root() / "lm-eval-index" / f"{key}.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
        return {name: Entry(name=e[0], kind=Kind(e[1]), yaml_path=Path(e[2]) if e[2] else None, cfg=e[3],
                            tags=set(e[4])) for name, e in rows.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        pass
    index: dict[str, Any] = build()
    try:
        rows = {name: [e.name, e.kind.value, str(e.yaml_path) if e.yaml_path else None, e.cfg, sorted(e.tags)]
                for name, e in index.items()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(rows), encoding="utf-8")
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):  # read-only or full cache, or a config that is not plain data
        pass
    return index


def _broken_yaml(include: tuple[str, ...]) -> str | None:
    """The first YAML file of the include paths that does not parse (lm-eval's index skips such files silently)."""
    import yaml
    from lm_eval.tasks._yaml_loader import load_yaml

    for root in include:
        for p in sorted(Path(root).glob("**/*.yaml")):
            try:
                load_yaml(p, resolve_func=False, recursive=False)
            except yaml.YAMLError as e:
                return _yaml_problem(e, include)
            except Exception:  # not YAML's problem: lm-eval says so when the task is loaded
                continue
    return None


@dataclass
class Resolved:
    """One profile entry resolved by lm-eval: its loaded task dict and its leaf tasks, in lm-eval's order."""

    name: str
    loaded: dict[str, Any]  # TaskManager.load(): tasks, groups, group_map
    leaves: list[str] = field(default_factory=list)
    #: each leaf's :func:`task_digest`, taken when it was loaded (before a run applies its settings to the task)
    digests: dict[str, str] = field(default_factory=dict)

    @property
    def is_group(self) -> bool:
        """Whether the name is a group or tag (several leaf tasks), not one task."""
        return self.leaves != [self.name]

    def task(self, leaf: str) -> Any:
        """lm-eval's ``Task`` object of leaf ``leaf``."""
        return self.loaded["tasks"][leaf]


def resolve(name: str, include: tuple[str, ...]) -> Resolved:
    """lm-eval's task, group or tag ``name`` (its data loaded), once per process; one-line errors.

    Unknown names get a suggestion; a task YAML that does not parse names its file; data that
    cannot be loaded (a hub dataset offline) says how to give a local copy.
    """
    require(f"task '{name}'")
    key = (include, name)
    if key in _LOADED:
        return _LOADED[key]
    tm = None
    if include:
        tm = _manager_or_error(include, False)
        if name not in tm.all_tasks:
            tm = None
    if tm is None:
        tm = _manager_or_error(include, True)
    if name not in tm.all_tasks:
        broken = _broken_yaml(include)
        if broken is not None:
            raise UserError(f"lm-eval has no task, group or tag '{name}', and a task YAML does not parse: {broken}")
        raise UserError(f"lm-eval has no task, group or tag '{name}'{did_you_mean(name, tm.all_tasks)}"
                        + (f" in its own tasks or {', '.join(include)}" if include else
                           "; list them with `lm_eval ls tasks`, or add a directory of your own YAMLs with "
                           "lm_eval_include"))
    try:
        with _no_progress_bars():
            loaded = _load(tm, name)
    except KeyError as e:
        if tm is _MANAGERS.get((include, False)):  # a group whose members live in lm-eval's own tasks
            with _no_progress_bars():
                loaded = _load(_manager_or_error(include, True), name)
        else:
            raise UserError(f"lm-eval task '{name}': {str(e).strip(chr(34) + chr(39))}") from None
    leaves = list(loaded["tasks"])
    if not leaves:
        raise UserError(f"lm-eval's '{name}' has no tasks")
    for leaf in leaves:
        kind = loaded["tasks"][leaf].get_config("output_type")
        if kind not in OUTPUT_TYPES:
            raise UserError(f"lm-eval task '{leaf}': output_type {kind!r} is not one reporter runs; it runs "
                            f"{', '.join(OUTPUT_TYPES)}")
    for leaf in leaves:  # the config's own shot count, before any run sets one (see lm_eval_run.configure)
        loaded["tasks"][leaf]._reporter_default_fewshot = loaded["tasks"][leaf].get_config("num_fewshot")
    _LOADED[key] = Resolved(name, loaded, leaves, {leaf: task_digest(loaded["tasks"][leaf]) for leaf in leaves})
    return _LOADED[key]


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """The datasets library's progress bars off while lm-eval loads a task's data (they would fill stderr)."""
    from datasets.utils import logging as ds_logging

    was = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            ds_logging.enable_progress_bar()


def _manager_or_error(include: tuple[str, ...], defaults: bool) -> Any:
    try:
        return task_manager(include, defaults)
    except Exception as e:  # a YAML that does not parse, an unreadable directory
        raise UserError(_yaml_problem(e, include)) from None


def _load(tm: Any, name: str) -> dict[str, Any]:
    """``tm.load([name])`` with lm-eval's failures as one line (KeyError passes: a missing group member)."""
    from .hub_reach import offline_while_unreachable

    # a hub dataset offline fails at once, not after the client's retries; local data asks the hub nothing
    with offline_while_unreachable(_hub_dataset(tm, name)) as unreachable:
        try:
            return tm.load([name])  # type: ignore[no-any-return]
        except KeyError:
            raise
        except Exception as e:
            import yaml

            if isinstance(e, yaml.YAMLError):
                raise UserError(f"lm-eval task '{name}': {_yaml_problem(e, ())}") from None
            raise UserError(_data_problem(tm, name, e, unreachable)) from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _yaml_problem(e: Exception, include: tuple[str, ...]) -> str:
    """A YAML error as one line: the file, the line, the problem."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if mark is not None:
        problem = getattr(e, "problem", None) or "not valid YAML"
        return f"{mark.name}: not valid YAML (line {mark.line + 1}): {problem}"
    where = f" (lm_eval_include: {', '.join(include)})" if include else ""
    return f"lm-eval could not read its task configs{where}: {_first_line(e)}"


def _data_problem(tm: Any, name: str, e: Exception, unreachable: str | None = None) -> str:
    """Why a task's data did not load, with the way to give a local copy when it is a hub dataset (``unreachable``:
    why the hub could not be reached, when a connection to it failed).
    """
    path = _dataset_path(tm, name)
    local = path is None or path in _LOCAL_BUILDERS or Path(str(path)).exists()
    if local:
        return f"lm-eval task '{name}': its data could not be loaded ({_first_line(e)})"
    return (f"lm-eval task '{name}': its dataset '{path}' is on the Hugging Face hub, which could not be reached "
            f"({unreachable or _first_line(e)}); give a local copy: a task YAML in a directory listed in lm_eval_include, with "
            f"'include: <lm-eval's YAML>', 'dataset_path: json' and 'dataset_kwargs: {{data_files: ...}}' "
            f"(reporter's offline copies of ARC, HellaSwag, BoolQ and MMLU: lm_eval_include: [{PACKAGED}])")


def _hub_dataset(tm: Any, name: str) -> bool:
    """Whether task ``name``'s data is a hub dataset: its ``dataset_path`` is no builder of local files and no
    path on this machine (None, unknown, counts as one).
    """
    if name in set(getattr(tm, "all_groups", ()) or ()) | set(getattr(tm, "all_tags", ()) or ()):
        return True  # a group's members may read from different places: ask, in case one is the hub's
    path = _dataset_path(tm, name)
    return path is None or not (path in _LOCAL_BUILDERS or Path(str(path)).exists())


#: the ``dataset_path`` values under which lm-eval reads local files (``dataset_kwargs: {data_files: ...}``)
_LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")


def _dataset_path(tm: Any, name: str) -> str | None:
    """The ``dataset_path`` of task ``name``'s YAML (or of its first member's), read without loading the data."""
    try:
        from lm_eval.tasks._yaml_loader import load_yaml

        entry = tm.task_index.get(name)
        path = getattr(entry, "yaml_path", None)
        if path is None:
            return None
        cfg = load_yaml(Path(path), resolve_func=False, recursive=True)
        if "dataset_path" in cfg:
            return str(cfg["dataset_path"])
        for member in cfg.get("task", []) if isinstance(cfg.get("task"), list) else []:
            if isinstance(member, str) and member in tm.task_index:
                return _dataset_path(tm, member)
    except Exception:  # best effort: only the message depends on it
        return None
    return None


def select_docs(n_docs: int, name: str, *, limit: int | None, seed: int, only: Sequence[str] | None = None) -> list[int]:
    """The evaluated document ids of task ``name``: a seeded choice of ``limit`` of its ``n_docs``, sorted.

    The same ids for every model and every rerun with the same seed (so paired tests and
    ``reporter compare`` line up); lm-eval gets them as ``samples=``, never as a ``limit`` that
    takes the first N. ``only`` (a core set's ids) keeps just those.
    """
    order = list(range(n_docs))
    random.Random(f"lm_eval:{name}:{seed}").shuffle(order)
    if only is not None:
        wanted = {int(i) for i in only if str(i).isdigit()}
        missing = sorted(set(only) - {str(i) for i in order if i in wanted})
        if missing:
            raise UserError(f"task '{name}': {len(missing)} of the {len(set(only))} item ids of 'items' are not "
                            f"document ids of the task (first: {missing[0]!r})")
        order = [i for i in order if i in wanted]
    return sorted(order if limit is None else order[:limit])


def task_digest(task: Any) -> str:
    """``sha256:<hex>`` of what decides a task's results: its resolved config, the code of its ``!function`` s and
    every document it may use.

    The evaluated split's documents (all of them: the seeded choice depends on how many there
    are), the few-shot split's documents and the split the Min-K% test compares them with (:func:`other_split`,
    where it is neither of those) count by content, not by where they were read from:
    the config's ``dataset_kwargs`` (local file paths, for one) and the YAML's own path lm-eval records
    are left out, so the same task on the same data has the same digest on every machine. A function the
    config names (``!function utils.process_results``) counts by the whole file that defines it, so a helper
    it calls counts too; a function lm-eval leaves unserialised (the copy in ``fewshot_config``) counts the
    same way, never by its address in memory.
    """
    h = hashlib.sha256()
    config = {k: v for k, v in task.dump_config().items() if k != "dataset_kwargs"}
    if isinstance(config.get("metadata"), dict):  # lm-eval records the YAML's path there
        config["metadata"] = {k: v for k, v in config["metadata"].items() if k != "config_source"}
    h.update(json.dumps(config, sort_keys=True, default=_stable_text).encode())
    for code in sorted({_function_code(f) for f in _functions(getattr(task, "config", None))}):
        h.update(b"\x00code" + code.encode())
    evaluated = task.eval_docs
    fewshot = _fewshot_docs(task)
    for docs in (evaluated, None if fewshot is evaluated else fewshot):
        h.update(b"\x00docs")
        _hash_docs(h, docs)
    try:  # the Min-K% test's other split, where it is neither of those
        other = other_split(task)
        own = None if other is None else _docs_sha256(other[1]())
    except Exception:  # noqa: BLE001 - unreadable: the test cannot read it either, and says so; loading goes on
        own = None
    if own is not None and own not in (_docs_sha256(evaluated), _docs_sha256(fewshot)):
        h.update(b"\x00other split" + own)
    return f"sha256:{h.hexdigest()}"


def other_split(task: Any) -> tuple[str, Any] | None:
    """The split the task's config names as its ``training_split`` or ``validation_split``, when it exists and is
    not the evaluated one: ``(name, read documents)``; None when it names none (the Min-K% test against the other
    split is then not measurable).
    """
    cfg = task.config
    evaluated = cfg.test_split if task.has_test_docs() else cfg.validation_split
    dataset = getattr(task, "dataset", None) or {}
    for split, read in ((cfg.training_split, task.training_docs), (cfg.validation_split, task.validation_docs)):
        if split and split != evaluated and split in dataset:
            return str(split), read
    return None


def _docs_sha256(docs: Any) -> bytes:
    """The digest of ``docs`` alone, by content (:func:`_hash_docs`)."""
    h = hashlib.sha256()
    _hash_docs(h, docs)
    return h.digest()


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable_text(value: Any) -> str:
    """A value JSON cannot write, as text that is the same in every process: a function by its code
    (:func:`_function_code`), anything else by its text without a memory address.

    >>> _stable_text(object()).startswith("<object object>")
    True
    """
    if inspect.isfunction(value) or inspect.ismethod(value):
        return _function_code(value)
    return _ADDRESS.sub("", str(value))


def _functions(value: Any, depth: int = 0) -> Iterator[Any]:
    """Every Python function in a task's config (its dataclass fields, dicts and lists, a few levels deep)."""
    if depth > 6:
        return
    if inspect.isfunction(value) or inspect.ismethod(value):
        yield value
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # lm-eval's TaskConfig is a dict too
        for f in dataclasses.fields(value):
            yield from _functions(getattr(value, f.name, None), depth + 1)
    if isinstance(value, dict):
        for v in value.values():
            yield from _functions(v, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _functions(v, depth + 1)


def _function_code(fn: Any) -> str:
    """A function by what decides what it does: its name and the sha256 of the whole file that defines it (its
    helpers and constants too); its own source where the file cannot be read; its name alone where neither can.

    >>> _function_code(_function_code).startswith("_function_code sha256:")
    True
    """
    name = getattr(fn, "__qualname__", type(fn).__name__)
    try:
        source = inspect.getsourcefile(fn)
        if source:  # line endings as a checkout writes them do not count
            text = Path(source).read_bytes().replace(b"\r\n", b"\n")
            return f"{name} sha256:{hashlib.sha256(text).hexdigest()}"
    except (OSError, TypeError):
        pass
    try:
        return f"{name} source:{inspect.getsource(fn)}"
    except (OSError, TypeError):
        return name


def _hash_docs(h: Any, docs: Any) -> None:
    """Feed ``docs`` into ``h`` by content: a ``datasets.Dataset`` by its Arrow buffers (fast), else as JSON rows."""
    if docs is None:
        return
    table = getattr(getattr(docs, "data", None), "table", None)
    if table is not None and hasattr(docs, "_indices"):
        h.update(json.dumps(table.schema.to_string()).encode())
        for tab in (table, getattr(docs._indices, "table", None)):
            if tab is None:
                continue
            for batch in tab.to_batches():
                for column in batch.columns:
                    for buf in column.buffers():
                        if buf is not None:
                            h.update(memoryview(buf))
            h.update(b"\x00indices")
        return
    for d in docs:
        h.update(json.dumps(d, sort_keys=True, default=str).encode())


def _fewshot_docs(task: Any) -> Any:
    try:
        return task.fewshot_docs()
    except Exception:  # a task without a few-shot split
        return None


def lm_eval_version() -> str:
    """The installed lm-eval's version."""
    from importlib.metadata import version

    return version("lm_eval")

"""How one model's or one task's failure is told apart and recorded: an environment failure every model would meet
(a full disk, a run directory that cannot be written) stops the run; anything else is that model's (or task's) one
line, with its traceback kept in its ``error.json``, and the other models run (:mod:`reporter.collect.job`).

>>> first_line(RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate"))
"DefaultCPUAllocator: can't allocate"
"""
from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path
from typing import Iterator, Sequence

import torch
from tqdm.auto import tqdm

from ..config import RunConfig
from ..errors import UserError, environment_error, inside
from ..installed import cache_root
from ..store.atomic import write_json
from ..store.layout import ERROR, STEP_ERRORS, RunDir

__all__ = ["clear_step_error", "crashed", "failed", "first_line", "log", "not_the_tasks", "out_of_memory", "record_step_failure", "step_crashed", "stops_every_model",
           "task_crashed", "the_environments", "writable"]


def log(msg: str) -> None:
    """Progress messages go to stderr (stdout carries only the final summary)."""
    tqdm.write(msg, file=sys.stderr)


#: the failure lines of this process's run so far, in order (``reporter run`` prints them when interrupted: the
#: progress lines said "listed at the end", and an interrupt ends the run before that list); cleared by each run
RECORDED: list[str] = []


def failed(who: str, lines: Sequence[str]) -> list[str]:
    """Log ``who`` (a model, a task, a pass) as failed, record its reason in :data:`RECORDED`, and return ``lines`` for
    the run's list at the end (the reason is said once, there).

    >>> failed("m / t", ["model 'm', task 't': no items"]), RECORDED[-1]
    (["model 'm', task 't': no items"], "model 'm', task 't': no items")
    """
    log(f"{who}: FAILED (the reason is listed at the end)")
    RECORDED.extend(lines)
    return list(lines)


def stops_every_model(e: OSError, root: str) -> bool:
    """Whether an environment failure would meet every model the same way: a full disk, or a run directory that
    cannot be written. A model's own unreadable files, or its own directory that cannot be written, are that
    model's failure.

    >>> import errno
    >>> stops_every_model(OSError(errno.ENOSPC, "No space left on device", "/elsewhere/x"), "/runs/a")
    True
    >>> stops_every_model(OSError(errno.EACCES, "Permission denied", "/models/m/config.json"), "/runs/a")
    False

    A full cache (a packaged model's conversion) is that model's failure: the models that need no conversion run.
    """
    import errno

    if environment_error(e) is None:
        return False
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return not inside(e.filename, cache_root())
    # in the run directory: every model's failure where the directory itself cannot be written, else this model's
    # (its own directory blocked by a file, or made read-only)
    return inside(e.filename, root) and str(e.filename).rstrip("/") != str(root).rstrip("/") and not writable(root)


@contextlib.contextmanager
def blamed(where: str) -> Iterator[None]:
    """Name the part of a model's work an unexpected exception came from (``evidence pass 'x'``; the innermost
    name is kept): the model's failure line says it, so a plugin's author sees which plugin failed.
    A :class:`UserError` carries its own words.
    """
    try:
        yield
    except UserError:
        raise
    except Exception as e:
        if getattr(e, "reporter_where", None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                e.reporter_where = where  # type: ignore[attr-defined]
        raise


def crashed(cfg: RunConfig, index: int, root: str, e: BaseException) -> list[str]:
    """Record an unexpected failure of model ``index`` in its error.json (with the traceback); its one line."""
    import traceback

    spec = cfg.models[index]
    mdir = RunDir(root).model_dir(spec.slug)
    if isinstance(e, MemoryError) or out_of_memory(e):
        line = (f"model '{spec.name}': ran out of memory ({first_line(e)}); use a smaller model, dtype or batch "
                "size, or another device")
    elif isinstance(e, OSError) and (inside(e.filename, cache_root()) or inside(e.filename, root)) \
            and (env := environment_error(e, cache=str(cache_root()))) is not None:
        # reporter's own places (its cache, the run directory): the environment's line, where and what to do
        line = f"model '{spec.name}': {env} (the traceback is in {mdir / ERROR})"
    else:
        whose = getattr(e, "reporter_where", None)
        line = (f"model '{spec.name}'{f', {whose}' if isinstance(whose, str) else ''}: failed with "
                f"{type(e).__name__}: {first_line(e)} (the traceback is in {mdir / ERROR})")
    try:
        write_json(mdir / ERROR, {"error": line, "traceback": "".join(traceback.format_exception(e))})
    except OSError as write_error:
        if stops_every_model(write_error, root):  # a full disk, or a run directory that cannot be written
            raise write_error from e  # the one line of the environment, not the model's own exception
        # only this model's directory cannot be written: its failure alone, and the others run; its reason goes
        # beside the directory, for its status
        line = f"{line.split(' (the traceback is in ')[0]} ({first_line(write_error)})"
        with contextlib.suppress(OSError, UserError):
            write_json(RunDir(root).failure_note(spec.slug), {"error": line})
    return failed(spec.name, [line])


def writable(root: str) -> bool:
    """Whether the run directory ``root`` and its ``models/`` take a byte (not read-only, not full, not a file)."""
    import os
    import tempfile

    for d in (Path(root), Path(root) / "models"):
        if d == Path(root) / "models" and not d.exists():
            continue
        try:
            with tempfile.NamedTemporaryFile(dir=d, prefix=".writable-") as fh:
                fh.write(b"x")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError:
            return False
    return True


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` is an allocation failure (torch's CPU and CUDA allocators raise RuntimeError subclasses).

    >>> out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried ...")), out_of_memory(
    ...     RuntimeError("shape mismatch"))
    (True, False)
    """
    text = str(e).lower()
    return isinstance(e, torch.OutOfMemoryError) or "can't allocate memory" in text or "out of memory" in text


def first_line(e: BaseException) -> str:
    """The exception's first line, without torch's ``[enforce fail at …] err == 0.`` prefix, at most 160 characters.

    >>> first_line(RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate"))
    "DefaultCPUAllocator: can't allocate"
    """
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return re.sub(r"^\[enforce fail at [^\]]*\]\s*(err == 0\.\s*)?", "", text)[:160]


def not_the_tasks(e: Exception) -> bool:
    """Whether a task's exception belongs to more than the task: a full disk, a read-only directory, no memory."""
    return isinstance(e, MemoryError) or the_environments(e) or out_of_memory(e)


def the_environments(e: BaseException) -> bool:
    """Whether ``e`` is the environment's failure (a full disk, a directory that cannot be written), which every
    model and step would meet, not a step's own.

    >>> import errno
    >>> the_environments(OSError(errno.ENOSPC, "No space left on device")), the_environments(KeyError("x"))
    (True, False)
    """
    return isinstance(e, OSError) and environment_error(e) is not None


def task_crashed(model: str, task: str, task_dir: Path, e: BaseException, also: Sequence[Path] = ()) -> list[str]:
    """One task's unexpected failure: its line, with the traceback kept in the task's ``error.json`` (and in those
    of ``also``: the other tasks of an lm-eval group that failed with it).
    """
    import traceback

    whose = getattr(e, "reporter_where", None)
    line = (f"model '{model}', task '{task}'{f', {whose}' if isinstance(whose, str) else ''}: failed with "
            f"{type(e).__name__}: {first_line(e)} (the traceback is in {task_dir / ERROR})")
    for d in (task_dir, *also):
        with contextlib.suppress(OSError, UserError):
            write_json(d / ERROR, {"error": line, "traceback": "".join(traceback.format_exception(e))})
    failed(f"{model} / {task}", [line])
    return [line]


def step_crashed(who: str, prefix: str, directory: Path, name: str, e: BaseException) -> list[str]:
    """One evidence pass's or model-only step's unexpected failure: its line (``prefix``: "model 'm', task 't',
    evidence pass 'x'"), with the traceback kept in ``directory/errors/<name>.json``, or, out of memory, what to
    change. It is that step's failure alone: the model's tasks and its other passes were measured, and a rerun
    measures the step again.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> step_crashed("m / t / probe", "model 'm', task 't', evidence pass 'probe'", d, "probe", KeyError("x"))[0]
    ... # doctest: +ELLIPSIS
    "model 'm', task 't', evidence pass 'probe': failed with KeyError: 'x' (the traceback is in .../errors/probe.json)"
    """
    import traceback

    path = Path(directory) / STEP_ERRORS / f"{name}.json"
    if isinstance(e, MemoryError) or out_of_memory(e):
        failure = f"ran out of memory ({first_line(e)})"
        line = f"{prefix}: {failure}; set the model's max_batch_size lower, or use a smaller dtype or another device"
        trace = None
    else:
        failure = f"failed with {type(e).__name__}: {first_line(e)}"
        line = f"{prefix}: {failure} (the traceback is in {path})"
        trace = "".join(traceback.format_exception(e))
    if (unwritten := record_step_failure(directory, name, line, failure, trace)) is not None:
        line = f"{line.split(' (the traceback is in ')[0]} (its traceback could not be written: {unwritten})"
    return failed(who, [line])


def record_step_failure(directory: Path, name: str, line: str, failure: str, trace: str | None = None) -> str | None:
    """Keep a step's failure in ``directory/errors/<name>.json`` (``failure``: what the card says, such as "failed
    with KeyError: 'x'"); why it could not be written, or None.
    """
    path = Path(directory) / STEP_ERRORS / f"{name}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"error": line, "failure": failure, **({"traceback": trace} if trace is not None else {})})
    except (OSError, UserError) as e:
        return first_line(e)
    return None


def clear_step_error(directory: Path, name: str) -> None:
    """Remove the traceback :func:`step_crashed` kept for ``name`` (before the step runs again)."""
    path = Path(directory) / STEP_ERRORS / f"{name}.json"
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
        path.parent.rmdir()  # only when it is empty

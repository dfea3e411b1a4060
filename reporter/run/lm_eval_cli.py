"""``reporter lm-eval ARGS…``: lm-eval's own command line, with reporter registered as its model ``reporter``.

An existing ``lm_eval`` command line keeps its meaning; prefixing it with ``reporter`` makes ``--model
reporter`` available (lm-eval 0.4.13 discovers no installed models, so the model must be registered by the
process that runs the command)::

    reporter lm-eval --model reporter \\
        --model_args pretrained=packaged:smollm2-135m-instruct,output=runs/smol \\
        --tasks arc_challenge --include_path my_tasks --limit 20 --num_fewshot 5

``--model reporter`` is :class:`~reporter.collect.lm_eval_lm.ReporterLM`: lm-eval's Hugging Face model with
reporter executing the requests. With ``output=DIR`` in ``--model_args``, reporter first runs its collect
stage on exactly what the command chose (its tasks, the first ``--limit`` documents or ``--samples``,
``--num_fewshot``, ``--gen_kwargs``, ``--apply_chat_template``), collectors on, and writes ``DIR`` as
``reporter run`` does (``results.json`` and its analysis; ``reporter render DIR`` draws the card). lm-eval
then scores from the answers reporter collected and prints and writes its own outputs as always. The same
class answers both directions: a profile's ``{lm_eval: NAME}`` tasks, and this command line.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
from typing import Any, Iterator

from ..collect.job import collect_model, log
from ..config import Profile, load_profile
from ..errors import UserError, user_path
from ..store.atomic import json_ok, read_json
from ..store.layout import RunDir
from ..tasks.lm_eval_source import PACKAGED, include_dirs
from .pipeline import run

__all__ = ["main", "register"]


def register() -> None:
    """Register :class:`~reporter.collect.lm_eval_lm.ReporterLM` as lm-eval's model ``reporter`` (once)."""
    from lm_eval.api.registry import model_registry

    from ..collect.lm_eval_lm import ReporterLM

    if "reporter" not in model_registry:
        model_registry.register("reporter", target=ReporterLM)


def _packaged_include(argv: list[str]) -> list[str]:
    """``--include_path packaged``: reporter's offline copies of lm-eval's ARC, HellaSwag, BoolQ and MMLU tasks (the
    profile's ``lm_eval_include: [packaged]``), as the directory lm-eval reads.

    >>> _packaged_include(["--tasks", "arc_easy"])
    ['--tasks', 'arc_easy']
    """
    out, i = list(argv), 0
    while i < len(out):
        if out[i] == "--include_path" and i + 1 < len(out) and out[i + 1] == PACKAGED:
            out[i + 1] = include_dirs([PACKAGED])[0]
        elif out[i] == f"--include_path={PACKAGED}":
            out[i] = f"--include_path={include_dirs([PACKAGED])[0]}"
        i += 1
    return out


def _unreachable(e: BaseException) -> bool:
    """Whether ``e`` says a dataset's host could not be reached: the ``ConnectionError`` ``datasets`` raises itself,
    requests' and the hub client's (offline mode) — not a broken pipe or a reset connection, which are
    ``ConnectionError``s too.

    >>> _unreachable(ConnectionError("Couldn't reach 'x' on the Hub")), _unreachable(BrokenPipeError(32, "Broken pipe"))
    (True, False)
    """
    if type(e) is ConnectionError:
        return True
    return any(f"{c.__module__}.{c.__name__}" in ("requests.exceptions.ConnectionError",
                                                   "huggingface_hub.errors.OfflineModeIsEnabled")
               for c in type(e).__mro__)


#: a profile's or ``reporter run``'s words, and what lm-eval's command line has instead
_TERMS = ((f"lm_eval_include: [{PACKAGED}]", f"--include_path {PACKAGED}"),
          ("a directory listed in lm_eval_include", "a directory given to --include_path"),
          ("choose another -o/--output or pass --force", "give another output= in --model_args, or remove that "
                                                         "directory to make the run again"),
          ("choose another -o/--output or", "give another output= in --model_args, or"),
          ("; choose another -o/--output", "; give another output= in --model_args"),
          ("pass --force to recompute", "remove that directory to recompute"),
          ("rerun with --force to make the run again there, or choose another -o",
           "remove that directory to make the run again, or give another output= in --model_args"),
          ("or pass --force to measure it again", "or remove that directory to measure it again"))


def _command_line_terms(e: UserError) -> UserError:
    """A profile's or a run directory's problem in the terms of lm-eval's command line (``--include_path``, not
    ``lm_eval_include``; ``output=``, not ``-o``; no ``--force``; ``--num_fewshot``, not a task's ``shots``;
    ``--model_args dtype=``, not a model's ``dtype``).

    >>> print(_command_line_terms(UserError("model 'm': D was measured in bfloat16, and models[0].dtype 'auto' is "
    ...     "float32 on this machine (cpu); resuming would mix the two: set models[0].dtype: bfloat16 where this "
    ...     "device supports it, resume on a machine like the first, or pass --force to measure it again in float32")))
    model 'm': D was measured in bfloat16, and --model_args dtype 'auto' is float32 on this machine (cpu); resuming would mix the two: give dtype=bfloat16 in --model_args where this device supports it, resume on a machine like the first, or remove that directory to measure it again in float32
    """
    lines = []
    for line in e.lines:
        for said, instead in _TERMS:
            line = line.replace(said, instead)
        line = re.sub(r"tasks\[\d+\]\.shots: ", "--num_fewshot: ", line)
        line = re.sub(r"set models\[\d+\]\.dtype: (\w+)", r"give dtype=\1 in --model_args", line)
        line = re.sub(r"models\[\d+\]\.dtype", "--model_args dtype", line)
        lines.append(line)
    return UserError(lines)


#: the failure lines of reporter's run in this command (its exit code is 2 where there are any)
_FAILURES: list[str] = []


def main(argv: list[str]) -> None:
    """Run lm-eval's command line with ``argv``, ``--model reporter`` registered and reporter's run written."""
    register()
    old = sys.argv
    sys.argv = ["lm_eval", *_packaged_include(argv)]
    from ..tasks.lm_eval_source import indexed_once

    _FAILURES.clear()
    try:
        with _reporter_first(), indexed_once():  # lm-eval's own task index from reporter's cache, too
            from lm_eval.__main__ import cli_evaluate

            cli_evaluate()
        if _FAILURES:  # lm-eval's own results are written, but reporter's run is not whole: not a success
            raise UserError("reporter's run had failures, listed above (lm-eval's own results are "
                            "written); fix them and rerun the same command: reporter's finished work is kept")
    except ValueError as e:  # lm-eval's own refusal of a task name, as a traceback
        if not str(e).startswith("Tasks not found: "):
            raise
        raise UserError(f"--tasks: {str(e).removeprefix('Tasks not found: ')}: no such lm-eval task (`reporter lm-eval "
                        "ls tasks` lists them; --include_path DIR adds your own task YAMLs)") from None
    except Exception as e:  # noqa: BLE001  (a hub that cannot be reached, in lm-eval's own loading: a traceback)
        if not _unreachable(e):
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise UserError(f"lm-eval could not load a task's data: {first}; offline, give a local copy (a task YAML in a "
                        "directory given to --include_path) or use reporter's offline copies of ARC, HellaSwag, BoolQ "
                        "and MMLU: --include_path packaged") from None
    finally:
        sys.argv = old


@contextlib.contextmanager
def _reporter_first() -> Iterator[None]:
    """lm-eval's ``simple_evaluate``, preceded by reporter's collect stage when the model is ``reporter``."""
    import lm_eval.evaluator as ev

    original = ev.simple_evaluate

    def simple_evaluate(model: Any, model_args: Any = None, **kw: Any) -> Any:
        if model != "reporter":
            return original(model, model_args, **kw)
        from ..collect.lm_eval_lm import ReporterLM

        extra = {k: kw.get(k) for k in ("batch_size", "max_batch_size", "device") if kw.get(k) is not None}
        check_output_arg(model_args)  # before the model loads, as `reporter run` checks -o
        rlm = (ReporterLM.create_from_arg_obj(model_args, extra) if isinstance(model_args, dict)
               else ReporterLM.create_from_arg_string(model_args or "", extra))
        if rlm.run_output:
            write_run(rlm, **{k: kw.get(k) for k in ("tasks", "task_manager", "num_fewshot", "limit", "samples",
                                                      "gen_kwargs", "apply_chat_template", "fewshot_as_multiturn",
                                                      "system_instruction", "fewshot_random_seed")})
        out = original(rlm, model_args, **kw)
        if isinstance(out, dict) and isinstance(out.get("config"), dict):
            # lm-eval names a model instance by its config's path (reporter's cache of a converted model, or ""):
            # the results file says what the command line named, as for --model hf, so that it reproduces
            out["config"]["model"] = "reporter"
        return out

    ev.simple_evaluate = simple_evaluate
    try:
        yield
    finally:
        ev.simple_evaluate = original


def check_output_arg(model_args: Any) -> None:
    """``output=`` in ``--model_args`` that is a file, or under one: refused before the model loads (it was checked
    only once the model had loaded, with a hint to ``-o``, an option this command does not have).

    >>> import tempfile, pathlib; f = pathlib.Path(tempfile.mkdtemp()) / "afile"; _ = f.write_text("x")
    >>> check_output_arg(f"pretrained=random:llama,output={f}/run")
    Traceback (most recent call last):
    reporter.errors.UserError: --model_args output=.../afile/run: is under a file (afile); give another output= in --model_args
    """
    from lm_eval.utils import simple_parse_args_string

    from ..config.models import file_in_the_way

    args = model_args if isinstance(model_args, dict) else simple_parse_args_string(model_args or "")
    out = args.get("output")
    if isinstance(out, str) and out and (blocked := file_in_the_way(user_path(out))) is not None:
        raise UserError(f"--model_args output={out}: {blocked}; give another output= in --model_args")


def command_profile(rlm: Any, *, tasks: Any, task_manager: Any, num_fewshot: int | None, limit: Any,
                    samples: dict[str, list[int]] | None, gen_kwargs: Any, apply_chat_template: Any,
                    fewshot_as_multiturn: Any, system_instruction: Any, fewshot_random_seed: Any) -> Profile:
    """The reporter profile of an lm-eval command line: its tasks and documents, the collector settings of the
    reporter profile ``model_args`` names (default ``quick``'s).

    What reporter cannot reproduce is refused in one line (a system instruction, another few-shot seed, a
    chat template without multi-turn few-shot examples).
    """
    from lm_eval.evaluator_utils import get_sample_size
    from lm_eval.utils import simple_parse_args_string

    from ..tasks import lm_eval_source as src

    if system_instruction:
        raise UserError("--system_instruction: reporter's lm-eval tasks take no system instruction; drop it, or run "
                        "without output= in --model_args")
    if fewshot_random_seed is not None and fewshot_random_seed != src.FEWSHOT_SEED:
        raise UserError(f"--seed: reporter draws lm-eval's few-shot examples with lm-eval's default seed "
                        f"{src.FEWSHOT_SEED}, not {fewshot_random_seed}")
    if apply_chat_template and not fewshot_as_multiturn:
        raise UserError("--apply_chat_template: reporter gives few-shot examples as a multi-turn chat with it; "
                        "add --fewshot_as_multiturn")
    if apply_chat_template and apply_chat_template is not True:
        raise UserError("--apply_chat_template: reporter applies the tokenizer's own chat template, not a named one")
    names = list(tasks or [])
    if not names or not all(isinstance(n, str) for n in names):
        raise UserError("--tasks: reporter's run needs lm-eval task, group or tag names")
    include = getattr(task_manager, "include_path", None) or []
    include = [str(p) for p in (include if isinstance(include, (list, tuple)) else [include])]
    if task_manager is not None:  # the command's task index, built once: reporter looks its tasks up there too
        src._MANAGERS.setdefault((tuple(include), True), task_manager)
    gen = simple_parse_args_string(gen_kwargs) if isinstance(gen_kwargs, str) else gen_kwargs
    entries: list[dict[str, Any]] = []
    for name in names:
        entry: dict[str, Any] = {"lm_eval": name}
        if num_fewshot is not None:
            entry["shots"] = num_fewshot
        if gen:
            entry["lm_eval_config"] = {"generation_kwargs": dict(gen)}
        if apply_chat_template:
            entry["chat_template"] = True
        entries.append(entry)
    base = load_profile(rlm.run_profile or "quick").to_dict()
    data = {**base, "name": f"lm-eval command line ({base.get('name')})", "tasks": entries, "lm_eval_include": include}
    data.pop("description", None)
    try:
        profile = Profile.from_dict(data, "the lm-eval command line")
    except UserError as e:
        raise _command_line_terms(e) from None
    chosen = []
    for t in profile.tasks:  # exactly the documents lm-eval's command evaluates
        assert t.lm_eval is not None
        task = src.resolve(t.lm_eval_group or t.lm_eval, tuple(include)).task(t.lm_eval)
        if samples is not None and t.lm_eval in samples:
            ids = [int(i) for i in samples[t.lm_eval]]
        else:
            n = get_sample_size(task, limit)
            ids = list(range(len(task.eval_docs) if n is None else min(n, len(task.eval_docs))))
        chosen.append(dataclasses.replace(t, limit=None, items=tuple(str(i) for i in ids)))
    return dataclasses.replace(profile, tasks=tuple(chosen))


def write_run(rlm: Any, **command: Any) -> None:
    """Reporter's run of the command line's tasks into ``rlm.run_output``; then the model's store holds every answer."""
    from ..collect.lm_eval_run import RESPONSES

    profile = command_profile(rlm, **command)
    lm = rlm.reporter_lm

    def jobs(cfg: Any, root: str, prof: Profile, *, force: bool = False, progress: bool = True) -> list[str]:
        return collect_model(cfg, 0, root, prof, force=force, progress=progress, loaded=lm)

    try:
        _, failures = run(rlm.run_config, rlm.run_output, profile=profile,
                          command=["reporter", "lm-eval", *sys.argv[1:]], jobs=jobs)
    except UserError as e:
        raise _command_line_terms(e) from None
    failures = _command_line_terms(UserError(failures)).lines if failures else failures
    for line in failures:
        log(f"reporter: {line}")
    _FAILURES.extend(failures)
    rd = RunDir(rlm.run_output)
    for t in profile.tasks:
        path = rd.task_dir(lm.spec.slug, t.name) / RESPONSES
        if json_ok(path):
            rlm.store.update(read_json(path))
    log(f"reporter run directory: {rd.root} (results.json; `reporter render {rd.root}` draws the card)")

"""Command-line interface: ``reporter run``, ``analyse``, ``render``, ``compare``, ``board``, ``validate``, ``schema`` and
``lm-eval`` (lm-eval's own command line with reporter as its model ``reporter``).

Bad input is one line per problem on stderr and exit code 2, never a traceback. Progress goes to
stderr and the final summary to stdout, so output can be piped (``reporter compare A B > notes.md``).
``analyse``, ``render``, ``compare``, ``board`` and ``schema`` never import torch, so they run on a machine without it.
``--plugin MODULE`` imports a module that registers plugins first; installed packages' plugins (entry points)
need no option.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from .cli_boundary import OneLineGroup, boundary, fail, interrupted
from .cli_options import resolve, run_formats, summary
from .config.models import EXECUTORS
from .errors import UserError, user_path


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="reporter")
@click.option("--plugin", "plugins", multiple=True, metavar="MODULE",
              help="Import MODULE (a module name or a .py file) first: the collectors, evidence passes, tasks, card "
                   "sections and model sources it registers join the built-in ones. Repeatable. Installed packages' plugins "
                   "(entry points) need no option.")
def main(plugins: tuple[str, ...] = ()) -> None:
    """Compare LLMs by benchmarks and by what happens inside them; write a model card.

    \b
    Example (offline, the packaged SmolLM2 and Gemma-3 models and an untrained baseline):
      reporter run --profile quick -o reports/demo
      open reports/demo/card.html        # also card.pdf, card.md

    Each command has its own example: reporter COMMAND --help.
    """
    from .plugin_import import import_plugin

    for module in plugins:
        try:
            import_plugin(module)
        except UserError as e:
            fail(e)


def _nonblank_path(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """A path option given as an empty string is refused (``Path("")`` is the working directory); a quoted ``~``
    is the home directory, as the models file's ``output: ~/…`` is (it made a folder named ``~``).
    """
    if value is not None and not value.strip():
        raise click.BadParameter("is blank; give a directory (or leave the option out for the default)")
    return user_path(value) if value is not None else None


def _board_or_new(path: Path) -> bool:
    """Whether ``path`` holds a board an earlier ``reporter board`` wrote (its ``board.json``), or nothing yet."""
    return (path / "board.json").is_file() or not path.exists() or (path.is_dir() and not any(path.iterdir()))


@main.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(file_okay=False), callback=_nonblank_path,
              help="Run directory (default: reports/<file-stem>-<date>).")
@click.option("--profile", help="Evaluation profile: a name (quick, standard, …) or a YAML path.")
@click.option("--force", is_flag=True, help="Recompute everything instead of resuming.")
@click.option("--device", help="Override the device for every model (auto, cpu, cuda, cuda:N).")
@click.option("--seed", type=int, help="Override the run seed.")
@click.option("--tasks", "only_tasks", help="Comma-separated tasks of the profile to run (a task's name, or an lm-eval "
                                            "group); the others are left out.")
@click.option("--limit", type=click.IntRange(min=1), help="Evaluate a seeded sample of at most this many items of "
                                                          "every task instead of the profile's limits (lm-eval's "
                                                          "--limit takes the first N).")
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
@click.option("--executor", type=click.Choice(EXECUTORS), help="Where model jobs run (default: the models file's executor, else local).")
@click.option("--address", help="Ray cluster address (with --executor ray), e.g. auto or ray://head:10001.")
@click.option("--no-render", is_flag=True, help="Skip the model card (results.json only).")
@click.option("--format", "formats", default="html,pdf,md", show_default=True,
              help="Comma-separated card formats to write: html, pdf, md (reporter render writes others later).")
@boundary
def run(file, output, profile, force, device, seed, only_tasks, limit, no_progress, executor, address, no_render,
        formats):
    """Evaluate the models in FILE (default: the profile's models where it lists some, else the embedded
    SmolLM2 / Gemma-3 / random list).

    Writes results.json and the model card (card.html, card.pdf, card.md) into the run directory;
    rerunning the same command resumes where an interrupted run stopped (on another day with -o: the default
    directory is named by the date), and so does a rerun with models or tasks added, taken off or edited: only
    those are measured again.

    \b
    Examples:
      reporter run models.yaml --profile standard -o reports/v2
      reporter run models.yaml --format html,md       # no PDF (the slowest format to write)
      reporter run models.yaml --tasks arc_challenge,gsm8k --limit 50
    """
    from .models import preflight  # noqa: F401  (registers the checks against this machine)

    began: list[bool] = []  # set once the run's manifest is written (and, with --force, the old models are gone)
    dated: str | None = None  # the run directory, where it is the date-named default
    named: str | None = None  # the run directory, once it is known
    try:
        if no_render and click.get_current_context().get_parameter_source("formats") == ParameterSource.COMMANDLINE:
            raise UserError(f"--format {formats!r}: nothing is rendered with --no-render; leave out one of them "
                            "(reporter render RUN_DIR --format … draws the card later)")
        wanted = run_formats(formats, render=not no_render)  # checked before anything runs
        cfg, prof = resolve(file, profile, only_tasks, limit, device, seed)
        if not no_render and {"html", "pdf"} & set(wanted):  # card.md has fixed blocks: no section template
            from .card.sections import check_templates

            check_templates()  # a plugin's broken section failed the card after every model had run
        if address and (executor or cfg.executor) != "ray":
            raise UserError(f"--address {address}: is a Ray cluster's address, for --executor ray (or executor: ray "
                            "in the models file); add it, or leave --address out")
        # the run's machinery (the analyse stage's SciPy, the executors) only now: a bad file fails in a moment
        from .run.pipeline import default_output
        from .run.pipeline import run as run_models

        # named once: a run that passes midnight renders the directory it wrote, not the new day's
        out_dir = Path(output or cfg.output or default_output(cfg))
        named = str(out_dir)
        if not (output or cfg.output):
            dated = str(out_dir)
            from .run.reuse import earlier_unfinished

            if (line := earlier_unfinished(cfg, prof, out_dir)) is not None and not force:
                click.echo(f"note: {line}", err=True)
        files: dict[str, Path] = {}

        def draw() -> None:  # also when a model failed: the card shows it as failed, next to the others
            from .card.render import render

            files.update(render(out_dir, formats=wanted, locked_ok=True))  # under the run's lock

        res, failures = run_models(cfg, out_dir, profile=prof, force=force, progress=not no_progress,
                                   command=sys.argv, executor=executor, address=address,
                                   began=lambda: began.append(True), then=None if no_render else draw)
    except UserError as e:
        fail(e)
    except KeyboardInterrupt as e:
        if (collecting := sys.modules.get("reporter.collect.failures")) is not None:  # loaded: the run had begun
            from .card.text import neutral  # as fail() shows a name

            for line in collecting.RECORDED:  # "listed at the end": this is the end (in-process models only)
                click.echo(f"error: {neutral(line)}", err=True)
        interrupted(e, "run", bool(began) if force else None, began=bool(began), where=dated, directory=named)
    click.echo(summary(res))
    click.echo(f"run directory: {out_dir}")
    if not no_render:
        click.echo("model card: " + ", ".join(str(files[k]) for k in ("html", "pdf", "md") if k in files))
    if failures:
        fail(UserError(failures + ([f"{dated} is named by today's date: to resume it on another day, rerun with "
                                    f"-o {dated}"] if dated else [])))


@main.command("lm-eval", context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                            "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@boundary
def lm_eval_command(args: tuple[str, ...]) -> None:
    """lm-eval's own command line, with reporter registered as its model `reporter`.

    ARGS are lm_eval's (run `reporter lm-eval --help` for lm-eval's help). With `--model reporter` and
    output=DIR in --model_args, reporter runs its collect stage on exactly the tasks and documents of the
    command (collectors on) and writes DIR as `reporter run` does; lm-eval then scores from the same answers
    and writes its own outputs as always.

    \b
    Example:
      reporter lm-eval --model reporter \\
        --model_args pretrained=packaged:smollm2-135m-instruct,output=runs/smol \\
        --tasks arc_challenge --include_path my_tasks --limit 20
    """
    from .tasks.lm_eval_source import require

    try:
        if any(a == "--plugin" or a.startswith("--plugin=") for a in args):  # lm-eval's argparse would refuse it
            raise UserError("reporter lm-eval: --plugin is reporter's own option and comes before the command: "
                            "reporter --plugin MODULE lm-eval …")
        require("--model reporter")
        from .run.lm_eval_cli import main as lm_eval_main

        lm_eval_main(list(args))
    except UserError as e:
        fail(e)
    except KeyboardInterrupt as e:
        interrupted(e)


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@boundary
def analyse(run_dir):
    """Rebuild results.json and its analysis (law, fairness, contamination, diversity) from RUN_DIR's artifacts.

    \b
    Example:
      reporter analyse reports/v2 && reporter render reports/v2
    """
    from .store.atomic import read_json
    from .store.gate import open_run
    from .store.layout import RunDir
    from .store.lock import run_lock

    try:
        open_run(run_dir, "analyse", results=False, locked_ok=True)  # the gate; its lock is taken here
        from .analyse import fresh_results, write_analysis  # (SciPy) once the directory is a run's

        with run_lock(Path(run_dir)):  # not under a run that is still writing its artifacts
            RunDir(run_dir).sweep_temporaries()  # what a killed process left half-written, under the lock
            write_analysis(run_dir, results=fresh_results(run_dir))  # one write: an interrupt leaves the old file
    except UserError as e:
        fail(e)
    click.echo(summary(read_json(RunDir(run_dir).results)))


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--format", "formats", default="html,pdf,md", show_default=True,
              help="Comma-separated output formats: html, pdf, md (card.md), hf (a Hugging Face README, with --model).")
@click.option("--model", help="With --format hf: the model (name or slug) whose README.md to write.")
@click.option("--section", help="With --format md: print only this section of card.md to stdout (title, summary, "
                                "leaderboard, tasks, warnings, law, methods) and write nothing.")
@boundary
def render(run_dir, formats, model, section):
    """Re-render the model card of RUN_DIR from results.json and the artifacts (no model needed).

    \b
    Examples:
      reporter render reports/v2 --format md                        # card.md + card_files/*.png
      reporter render reports/v2 --format md --section leaderboard  # paste into a document
      reporter render reports/v2 --format hf --model SmolLM2-135M-Instruct   # hf/<model>/README.md
    """
    from .store.gate import open_run

    wanted = tuple(f.strip() for f in formats.split(",") if f.strip())
    try:
        # the card's own gate, before the renderer is imported (the items' scores: load_card's gate, once)
        open_run(run_dir, "render", manifest=False, scores=False)
        from .card.render import render as render_card

        if section is not None:
            from .card.data import load_card
            from .card.markdown import markdown_card

            given = click.get_current_context().get_parameter_source("formats") == ParameterSource.COMMANDLINE
            if given and wanted != ("md",):  # without --format, --section means card.md
                raise UserError(f"--section prints one section of card.md: use it with --format md (not {formats})")
            text = markdown_card(load_card(run_dir), section=section)
        else:
            files = render_card(run_dir, formats=wanted, model=model)
    except UserError as e:
        fail(e)
    if section is not None:
        click.echo(text, nl=False)
        return
    for key, path in files.items():
        click.echo(f"{key}: {path}")


@main.command()
@click.argument("base_run", type=click.Path(file_okay=False, path_type=Path))
@click.argument("new_run", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write compare.{md,html,pdf,json} (default: NEW_RUN/compare).")
@click.option("--pair", "pairs", multiple=True, metavar="OLD=NEW",
              help="Pair a base-run model with a new-run model (repeatable; default: pair models by name).")
@click.option("--no-mui", is_flag=True, help="Compare scores only, even when the runs' MUI settings differ.")
@click.option("--shared-only", is_flag=True,
              help="Compare the items both runs answered when the item sets differ (MUI is then not compared).")
@boundary
def compare(base_run, new_run, output, pairs, no_mui, shared_only):
    """Release notes: what changed from BASE_RUN to NEW_RUN, per model and task, with paired tests.

    Prints compare.md to stdout (the file list goes to stderr) and writes compare.md, .html,
    .pdf and .json. Significant regressions come first, then improvements, then no change.

    \b
    Examples:
      reporter compare reports/v1 reports/v2 > notes.md
      reporter compare reports/v1 reports/v2 --pair "MyModel v1=MyModel v2" -o release/compare
    """
    from .analyse.compare import compare_runs, parse_pairs
    from .card.compare import write_compare
    from .store.layout import COMPARE_DIR

    try:
        doc = compare_runs(base_run, new_run, pairs=parse_pairs(pairs), mui=not no_mui, shared_only=shared_only)
        files = write_compare(doc, _output_dir(output or Path(new_run) / COMPARE_DIR))
    except UserError as e:
        fail(e)
    click.echo(files["md"].read_text(encoding="utf-8"), nl=False)
    for key, path in files.items():
        click.echo(f"{key}: {path}", err=True)


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...")
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=Path("board"),
              show_default=True, help="The site's directory (index.html, models/, history/, runs/, board.json).")
@click.option("--title", default=None, help="The leaderboard's title (default: Model leaderboard).")
@click.option("--seed", type=click.IntRange(0, 2 ** 32 - 1), default=0, show_default=True,
              help="Seed of the bootstrap resamples.")
@click.option("--resamples", type=click.IntRange(100, 100_000), default=2000, show_default=True,
              help="Bootstrap resamples of the rank intervals and the law fit.")
@boundary
def board(run_dirs, output, title, seed, resamples):
    """One leaderboard over many runs: merge every model of RUN_DIR... (paths or globs) that answered the same
    items into a static site (no server, nothing fetched), with release histories and a page per model.

    Runs whose items differ on a task are not merged on that task (the page says which and why); a damaged
    or foreign directory is one warning line and the board is built from the rest. A rebuild reads and
    compares only the runs that changed.

    \b
    Examples:
      reporter board reports/* -o board --title "Vendor shortlist"
      reporter board reports/v1.0 reports/v1.1 reports/v1.2 -o releases
    """
    from .analyse.board import BoardCache, build_board
    from .card.board import write_board

    try:
        # a run's directory; or one of the paths given that is not a board (an earlier build, which a glob the
        # shell expanded names: it is left out as the board's own) nor new
        named = Path(output).resolve() in {Path(r).resolve() for r in run_dirs}
        if (Path(output) / "manifest.json").exists() or (named and not _board_or_new(Path(output))):
            raise UserError(f"-o {output}: is a run directory; give the board a directory of its own")
        doc = build_board(run_dirs, seed=seed, n_resamples=resamples, cache=BoardCache(Path(output) / ".cache"),
                          title=title, exclude=[output])  # `reports/*` may match the board's own directory
        files = write_board(doc, _output_dir(output))
    except UserError as e:
        fail(e)
    for w in doc["warnings"]:
        click.echo(f"warning: {w}", err=True)
    c = doc["cache"]
    def n(count: int, one: str, many: str) -> str:
        return f"{count} {one if count == 1 else many}"

    click.echo(f"board: {output / 'index.html'} ({n(len(doc['rows']), 'model', 'models')} from "
               f"{n(len(doc['runs']), 'run', 'runs')}; {n(len(doc['history']), 'release history', 'release histories')}"
               f"; read {n(c['runs_read'], 'run', 'runs')}, {c['runs_cached']} unchanged; "
               f"{n(c['compared'], 'comparison', 'comparisons')} computed, {c['comparisons_cached']} reused; "
               f"{n(len(files), 'file', 'files')})")


@main.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--profile", help="Evaluation profile: a name (quick, standard, …) or a YAML path.")
@click.option("--tasks", "only_tasks", help="Comma-separated tasks of the profile, as with reporter run --tasks.")
@click.option("--limit", type=click.IntRange(min=1), help="Items per task, as with reporter run --limit.")
@click.option("--device", help="Override the device for every model (auto, cpu, cuda, cuda:N).")
@click.option("--seed", type=int, help="Override the run seed.")
@boundary
def validate(file, profile, only_tasks, limit, device, seed):
    """Check what reporter run with the same arguments would read (the models YAML FILE, the profile it
    names or --profile gives, every data file of the profile's tasks on disk) without loading any model.
    A task with no offline copy, or a hub model not in the Hugging Face cache, read from the hub when it runs, is
    named in a note.

    \b
    Examples:
      reporter validate models.yaml     # models.yaml: OK (3 models, profile quick, 11 tasks)
      reporter validate models.yaml --profile standard --tasks arc_challenge,gsm8k --limit 50
    """
    from .config import check_sae
    from .models import preflight  # noqa: F401  (registers the checks against this machine)
    from .run.data_check import check_user_data, hub_only_tasks, uncached_hub_models
    from .tasks.corpora import fixed_texts

    try:
        cfg, prof = resolve(file, profile, only_tasks, limit, device, seed)
        check_sae(cfg, prof)
        check_user_data(prof, cfg.models)  # every data file `run` would read: jsonl tasks, other_split files, items lists
        from .card.sections import check_templates

        check_templates()  # a plugin's card section: the card of `run` would fail at its end
        if prof.mui.unit in ("sae", "both"):  # and every SAE file (torch is imported only then)
            from .models.sae import check_sae_files

            check_sae_files(cfg, prof)
    except UserError as e:
        fail(e)
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    for m in uncached_hub_models(cfg.models):
        what = f"{m.source} at revision {m.revision}" if m.revision else m.source
        click.echo(f"note: model '{m.name}' ({what}) is not in the Hugging Face cache: "
                   + ("HF_HUB_OFFLINE is set, so it will fail to load" if offline else
                      "it is downloaded from the hub when it runs, and fails alone where the hub cannot be reached"),
                   err=True)
    for name, where in hub_only_tasks(prof):
        click.echo(f"note: task '{name}' has no offline copy: it reads {where} from the Hugging Face hub when it "
                   "runs, and fails alone where the hub cannot be reached", err=True)
    if prof.lpp.enabled and fixed_texts(prof.lpp.corpus) is None and prof.lpp.corpus != "lambada":
        click.echo(f"note: the LPP corpus '{prof.lpp.corpus}' is a hub dataset: it is read from the Hugging Face hub "
                   "when a model's LPP pass runs, and that pass fails where the hub cannot be reached (coqa and "
                   "lambada ship offline)", err=True)
    n_models, n_tasks = len(cfg.models), len(prof.tasks)
    label = prof.name or cfg.profile
    stem = Path(prof.origin).stem if prof.origin and prof.origin.endswith((".yaml", ".yml")) else None
    if stem and (label == stem or label.startswith(stem + " (")):  # a file without name: ("profile profile" for
        label = Path(str(prof.origin)).name + label[len(stem):]    # profile.yaml) its file's name
    click.echo(f"{file or cfg.path}: OK ({n_models} model{'s' if n_models != 1 else ''}, profile "
               f"{label}, {n_tasks} task{'s' if n_tasks != 1 else ''})")


def _output_dir(path: Path) -> Path:
    """``path``, made if missing; where this file system makes no directory there (``/proc/x``, a parent that is
    gone), one line: FileNotFoundError is no environment error in general (a missing input is a bug or its own case).
    """
    import errno

    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise  # a read-only or full file system: the boundary's one line (reporter.errors.environment_error)
        raise UserError(f"{e.filename or path}: {e.strerror}; no directory can be made there (a directory on its path "
                        "is missing, or that file system makes none, as /proc): choose another -o/--output") from None
    return Path(path)


@main.command()
@click.argument("document", default="results", metavar="[DOCUMENT]")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the schema to this file instead of stdout.")
@boundary
def schema(document, output):
    """Print the JSON Schema (draft 2020-12) of results.json (default), compare.json or an artifact.

    summary is a task's summary.json; lpp, model and smoke are a model's lpp.json, model.json and
    smoke.json; validation is a task's validation.json; all bundles every one. The package ships the
    same files (reporter/data/DOCUMENT.schema.json); analyse checks each results.json it writes against it.

    \b
    Examples:
      reporter schema > results.schema.json
      reporter schema compare -o compare.schema.json
    """
    from .schema.published import DOCUMENTS, schema_text

    if document not in (*DOCUMENTS, "all"):
        fail(UserError(f"reporter schema: no document '{document}'; choose one of {', '.join([*DOCUMENTS, 'all'])}"))
    text = schema_text(document)
    if output is None:
        click.echo(text, nl=False)
    else:
        from .store.atomic import write_bytes

        write_bytes(output, text.encode("utf-8"))  # whole or not at all: a full disk leaves no empty file
        click.echo(f"{document}: {output}", err=True)


@main.command("list")
@click.argument("kinds", nargs=-1, metavar="[KIND]...")
@click.option("--json", "as_json", is_flag=True, help="One JSON document (every field of every row) instead of text.")
@boundary
def list_(kinds, as_json):
    """List what this installation can run: tasks, profiles, sources, architectures, collectors, evidence,
    sections, scorers (default: all of them), or plugins (only what is not reporter's own).

    Each name is one a models file, a profile or a command line may use; an entry an installed package or a
    --plugin module added says where it came from.

    \b
    Examples:
      reporter list tasks profiles
      reporter --plugin my_plugins.py list plugins     # is my plugin seen?
      reporter list --json sources
    """
    import json

    from .catalogue import catalogue, render_text

    cat = catalogue(kinds)
    click.echo(json.dumps(cat, indent=2, ensure_ascii=False) if as_json else render_text(cat))


if __name__ == "__main__":  # pragma: no cover
    main()

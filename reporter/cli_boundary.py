"""The command line's boundary: what every command does with a failure, an interrupt and a usage error.

A user's mistake (:class:`~reporter.errors.UserError`) or an environment that cannot do what was asked (a full disk,
a read-only path, no memory, a dependency not installed) is one ``error:`` line and exit code 2; an interrupt
(Ctrl-C, SIGTERM, SIGHUP) is one line saying what is kept and how to go on, and exit 128 + the signal; click's usage
errors are one line naming the command's ``--help``. Anything else is a bug in reporter and keeps its traceback.

>>> _missing_package("vl_convert")
"the Python package 'vl_convert' is not installed, and this command needs it; run: pip install vl-convert-python (or pip install -e . in reporter's checkout, which installs every dependency)"
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading
from typing import Any, Callable, NoReturn, TypeVar

import click

from .errors import UserError, environment_error

__all__ = ["OneLineGroup", "boundary", "fail", "interrupted"]

_F = TypeVar("_F", bound=Callable[..., Any])


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a scheduler's stop, a closed terminal): handled like Ctrl-C, so locks are released and the
    user is told the work is kept; the exit code is the signal's (128 + its number).
    """

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: Any) -> None:
    raise _Terminated(signum)


def interrupted(e: BaseException | None = None, command: str = "run", forced: bool | None = None,
                began: bool = True, where: str | None = None, directory: str | None = None) -> NoReturn:
    """The line an interrupted command ends with: what is kept, and how to go on. ``forced``: a ``--force`` run that
    had begun (True: its manifest is written and the old models' results are gone) or not yet (False); None: not
    forced. ``began``: a run had written its manifest (False: it stopped while checking its input, waiting for the
    lock or connecting, and wrote nothing of its own). ``where``: the run directory, when ``run`` chose it by the
    date (no ``-o``): a rerun on another day would start a new one, so the line says how to resume it then.
    ``directory``: the run directory otherwise (``-o`` or the models file's ``output:``), named where known.

    A second Ctrl-C while the process exits (torch's exit hooks take a second or two) is ignored: it printed a
    traceback from an exit hook and turned the exit code into -2.
    """
    import atexit

    atexit.register(_ignore_interrupts)  # registered last, so run first: before torch's own exit hooks
    if command == "run" and forced is False:  # the old results may be there, in part: only --force replaces them
        line = "interrupted before the forced run began: rerun the same command (with --force)"
    elif command == "run" and not began:
        line = "interrupted before the run began: rerun the same command"
    elif command == "run":
        how = ("rerun it without --force to resume (with --force it would start over)" if forced
               else "rerun the same command to resume")
        if where is not None:  # the default directory is named by the date: tomorrow's rerun would start over
            how += f" (on another day, with -o {where})"
        line = f"interrupted: finished work is saved in {where or directory or 'the run directory'}; {how}"
    elif command in ("board", "compare"):
        line = "interrupted: the runs it reads are unchanged; rerun the same command"
    else:
        line = "interrupted: nothing already computed is lost; rerun the same command"
    click.echo(line, err=True)
    sys.exit(128 + e.signum if isinstance(e, _Terminated) else 130)


def _ignore_interrupts() -> None:
    """At exit, after an interrupt: Ctrl-C is ignored from here on (the exit hooks that follow are not ours)."""
    import signal

    with contextlib.suppress(ValueError):  # only the main thread may set a handler
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def fail(e: UserError) -> NoReturn:
    """Print each of ``e``'s lines as ``error: <line>`` on stderr and exit with its code (2)."""
    from .card.text import neutral  # a name in a message must not reorder the terminal's line either

    for line in e.lines:
        click.echo(f"error: {neutral(line)}", err=True)
    sys.exit(e.exit_code)


def boundary(command: _F) -> _F:
    """Every command's last line of defence: a bad input (:class:`UserError`) or an environment that cannot do
    what was asked (a full disk, a read-only or file-blocked path, no memory) is one line and exit 2; an
    interrupt is exit 130 with finished work kept. Anything else is a bug in reporter and keeps its traceback.
    """
    @functools.wraps(command)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except UserError as e:
            fail(e)
        except KeyboardInterrupt as e:
            interrupted(e, command.__name__)
        except ModuleNotFoundError as e:
            if not e.name or e.name.split(".")[0] == "reporter":
                raise  # reporter's own module missing: a broken install or a bug, keep its traceback
            fail(UserError(_missing_package(e.name)))
        except (OSError, MemoryError) as e:
            from .installed import cache_root

            found = environment_error(e, cache=str(cache_root()))
            if found is None:
                raise
            if command.__name__ in ("analyse", "render"):  # they write into the run directory: there is no -o
                found = UserError([line.replace("(another -o/--output)", "(analyse and render write into the run "
                                                "directory: copy it somewhere writable)") for line in found.lines])
            fail(found)

    return guarded  # type: ignore[return-value]


#: the distribution that installs a module, where the names differ
_DISTRIBUTIONS = {"yaml": "pyyaml", "vl_convert": "vl-convert-python", "lm_eval": "lm-eval==0.4.13",
                  "google.protobuf": "protobuf", "sklearn": "scikit-learn", "PIL": "pillow"}


def _missing_package(module: str) -> str:
    """The one line for a dependency that is not installed (a broken or partial environment).

    >>> _missing_package("weasyprint.text")
    "the Python package 'weasyprint' is not installed, and this command needs it; run: pip install weasyprint (or pip install -e . in reporter's checkout, which installs every dependency)"
    """
    parts = module.split(".")
    top = parts[0]
    prefixes = [".".join(parts[:k]) for k in range(len(parts), 0, -1)]  # google.protobuf before google
    dist = next((_DISTRIBUTIONS[m] for m in prefixes if m in _DISTRIBUTIONS), top.replace("_", "-"))
    return (f"the Python package '{top}' is not installed, and this command needs it; run: pip install {dist} (or "
            "pip install -e . in reporter's checkout, which installs every dependency)")


class OneLineGroup(click.Group):
    """click's group, with its usage errors (an unknown option, a bad option value, a missing argument) as one
    ``error:`` line naming the command's ``--help``, exit code 2, like every other refusal.
    """

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:  # noqa: D102
        kwargs.setdefault("prog_name", "reporter")
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        import signal

        previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
                # an ignored signal stays ignored: `nohup reporter run ...` must outlive its terminal
                if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
                    previous[sig] = signal.signal(sig, _raise_terminated)
        try:
            return self._main(*args, **kwargs)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # `reporter` alone: its help, as click prints it
                click.echo(e.format_message(), err=True)
                sys.exit(e.exit_code)
            where = f"{e.ctx.command_path}: " if e.ctx is not None else ""
            hint = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
            if isinstance(e, click.NoSuchOption) and e.option_name == "--plugin" and e.ctx is not None \
                    and e.ctx.parent is not None:  # an option of reporter itself, given after the command
                hint = (f"; --plugin is reporter's own option and comes before the command: reporter --plugin MODULE "
                        f"{e.ctx.info_name} …")
            click.echo(f"error: {where}{e.format_message().rstrip('.')}{hint}", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(f"error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)

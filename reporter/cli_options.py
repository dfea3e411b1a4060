"""What ``reporter run`` and ``validate`` make of their options: the run config and profile (``--profile``,
``--tasks``, ``--limit``, ``--device``, ``--seed``), the card formats, and the one-line summary of a run.

Each mistake is a :class:`~reporter.errors.UserError` naming the option, never a traceback.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import UserError


def resolve(file: Path | None, profile: str | None, only_tasks: str | None, limit: int | None,
             device: str | None, seed: int | None) -> tuple[Any, Any]:
    """The run config and profile ``run`` and ``validate`` read: FILE (or the profile's models, or the default
    list), ``--profile``, ``--tasks``/``--limit`` and ``--device``/``--seed`` applied, each mistake one line.
    """
    from .config import default_config, load_config, load_profile, parse_config
    from .errors import ConfigError

    for option, value in (("--profile", profile), ("--device", device)):  # "" fell back to the default in silence
        if value is not None and not value.strip():
            raise UserError(f"{option}: is blank; give a value, or leave the option out")
    try:
        cfg = load_config(file) if file else None
    except ConfigError as e:  # the profile's problems too, in the same pass, where the file names the profile
        raise ConfigError(e.lines + ([] if profile else _profile_problems(file))) from None
    origin = "--profile" if profile else (f"{cfg.path}: profile" if cfg and cfg.profile else None)
    prof = load_profile(profile or (cfg.profile if cfg else None), origin)
    if only_tasks is not None or limit is not None:
        names = [t.strip() for t in (only_tasks or "").split(",") if t.strip()]
        if only_tasks is not None and not names:
            raise UserError("--tasks: no task named; give the profile's task names separated by commas")
        prof = prof.restricted(names, limit)
    if cfg is None:
        # a profile file's models are named by its file, and their paths are relative to it (a built-in profile's
        # by its name)
        own = prof.origin if prof.origin and prof.origin.endswith((".yaml", ".yml")) else None
        cfg = (parse_config(list(prof.models), own or f"profile {prof.name}",
                            base_dir=Path(own).resolve().parent if own else None) if prof.models else default_config())
    if device or seed is not None:
        data = cfg.to_dict()
        if device:
            data["device"] = device
            for m in data["models"]:
                m["device"] = None
        if seed is not None:
            data["seed"] = seed
        cfg = _with_overrides(data, cfg.path)
    return cfg, prof


def _profile_problems(file: Path | None) -> list[str]:
    """The problems of the profile a models YAML names (``profile:``, resolved as the file's other paths are), read
    although the file has problems of its own: each was said only after the others were fixed.
    """
    from .config import load_profile
    from .config.files import load_yaml
    from .config.models import _is_path
    from .errors import user_path

    try:
        data = load_yaml(Path(file)) if file else None
    except UserError:
        return []
    value = data.get("profile") if isinstance(data, dict) else None
    if not isinstance(value, str) or not value.strip():
        return []
    if _is_path(value):
        value = str((Path(file).resolve().parent / user_path(value)).resolve())  # type: ignore[arg-type]
    try:
        load_profile(value, f"{file}: profile")
    except UserError as e:
        return list(e.lines)
    return []


def _with_overrides(data: dict[str, Any], path: str) -> Any:
    """The run config with ``--device`` / ``--seed`` applied; a bad value is blamed on the option, not the file."""
    from .config import parse_config
    from .errors import ConfigError

    try:
        return parse_config(_strip_defaults(data), path)
    except ConfigError as e:
        lines = []
        for line in e.lines:
            for key, option in (("seed", "--seed"), ("device", "--device")):
                if line.startswith(f"{path}: {key}: "):
                    line = f"{option}: " + line[len(f"{path}: {key}: "):]
            lines.append(line)
        raise UserError(lines) from None


def run_formats(formats: str, render: bool = True) -> tuple[str, ...]:
    """``reporter run --format``: a comma-separated subset of html, pdf and md (``hf`` needs ``render --model``).

    >>> run_formats("html, md,html", render=False)
    ('html', 'md')
    """
    from .card.formats import FORMATS

    wanted = tuple(dict.fromkeys(f.strip() for f in formats.split(",") if f.strip()))
    run_formats = tuple(f for f in FORMATS if f != "hf")
    if not wanted or any(f not in run_formats for f in wanted):
        hint = "; a Hugging Face README: reporter render RUN_DIR --format hf --model NAME" if "hf" in wanted else ""
        raise UserError(f"--format {formats!r}: use a comma-separated subset of {', '.join(run_formats)}{hint}")
    if "pdf" in wanted and render:  # before the run, not after it: the PDF is written last
        import importlib.util

        try:
            found = importlib.util.find_spec("weasyprint") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            others = ",".join(f for f in wanted if f != "pdf") or "html,md"
            raise UserError(f"--format {formats!r}: the PDF needs weasyprint, which is not installed; run: pip install "
                            f"weasyprint, or leave the PDF out: --format {others}")
    return wanted


def _strip_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """A config's dict without its unset (None) values and false ``random`` flags, as a models file would say it."""
    data = dict(data)
    data["models"] = [{k: v for k, v in m.items() if v is not None and not (k == "random" and not v)}
                      for m in data["models"]]
    return {k: v for k, v in data.items() if v is not None}


def summary(res: dict[str, Any]) -> str:
    """One line per model of a results.json: its status, smoke perplexity, each task's score with its CI, and lm-eval's
    aggregate of each lm-eval group (its value ± lm-eval's standard error, as ``lm_eval`` prints it).

    >>> summary({"models": {"m": {"status": "ok", "tasks": {"t": {"score": 0.5, "ci_low": 0.25, "ci_high": 0.75}}}}})
    'm: ok, t 50.0% [25.0, 75.0]'
    >>> leaf = {"score": 0.5, "ci_low": 0.25, "ci_high": 0.75, "lm_eval": {"group": "g", "metric": "acc,none"}}
    >>> summary({"models": {"m": {"status": "ok", "tasks": {"a": leaf, "b": leaf},
    ...          "lm_eval_groups": {"g": {"metrics": {"acc,none": 0.5, "acc_stderr,none": 0.1}}}}}})
    'm: ok, a 50.0% [25.0, 75.0], b 50.0% [25.0, 75.0], group g (2 tasks, lm-eval) 50.0% ± 10.0'
    """
    from .card.lm_eval import stderr_key

    lines = []
    for name, m in res["models"].items():
        ppl = m.get("smoke", {}).get("perplexity")
        bits = [f"{name}: {m['status']}"]
        if ppl is not None:
            bits.append(f"perplexity {ppl:.1f}")
        for t, s in m.get("tasks", {}).items():
            bits.append(f"{t} {100 * s['score']:.1f}% [{100 * s['ci_low']:.1f}, {100 * s['ci_high']:.1f}]")
        for group, info in (m.get("lm_eval_groups") or {}).items():
            leaves = [s["lm_eval"] for s in m.get("tasks", {}).values()
                      if isinstance(s.get("lm_eval"), dict) and s["lm_eval"].get("group") == group]
            metrics = (info or {}).get("metrics") or {}
            value = metrics.get(leaves[0].get("metric")) if leaves else None
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue  # a group inside another (mmlu_stem in mmlu) or one without its leaves' metric
            err = metrics.get(stderr_key(str(leaves[0]["metric"])))
            bits.append(f"group {group} ({len(leaves)} tasks, lm-eval) {100 * value:.1f}%"
                        + (f" ± {100 * err:.1f}" if isinstance(err, (int, float)) and not isinstance(err, bool) else ""))
        lines.append(", ".join(bits))
    return "\n".join(lines)

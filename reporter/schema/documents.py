"""The documents at the stage seams as :class:`~typing.TypedDict` types (``summary.json``, ``lpp.json``,
``results.json``), and the facts about them every stage shares.
"""
# no ``from __future__ import annotations``: TypedDict needs live Required[...] markers
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal, Mapping, Union

from typing_extensions import NotRequired, Required, TypedDict

from ..errors import SchemaError

SCHEMA_VERSION = 1


def _error(where: str, msg: str, document: str = "results.json") -> SchemaError:
    return SchemaError(f"{document}: {where or 'top level'}: {msg}")


@dataclass(frozen=True)
class _Fraction:
    """Marks a number that must lie in [0, 1]."""


@dataclass(frozen=True)
class _Count:
    """Marks an integer that must be >= 0 (a number of items)."""


@dataclass(frozen=True)
class Check:
    """A whole-value check run after the type check: ``fn(value, where, validate)`` returns the value or
    raises (``validate`` is :func:`reporter.schema.validate`, for the values inside).
    """

    fn: Callable[[Any, str, Callable[..., Any]], Any]


Fraction = Annotated[float, _Fraction()]
Count = Annotated[int, _Count()]
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


class SPCMetrics(TypedDict, total=False):
    """Symbolic-pattern-completion probe metrics beside its char-F1 score (shares over all items)."""

    n: int
    #: the continuation is the true one exactly (the LPP authors' code reports it beside char-F1)
    exact_match: Fraction
    #: the true continuation's characters in another order: char-F1, which ignores order, credits it in full
    reordered: Fraction


class Validation(TypedDict, total=False):
    """The paper's ablation check: scores with the key neurons, or as many random ones, zeroed."""

    score: float
    score_ablated_key: float
    score_ablated_random: float
    n_neurons: int


class LMEvalDataset(TypedDict, total=False):
    """The dataset an lm-eval task config names (its ``dataset_path`` / ``dataset_name``)."""

    #: lm-eval's ``dataset_path``: a Hugging Face hub id, or a builder (``json``, ``parquet`` ...) over local files
    path: str
    #: lm-eval's ``dataset_name`` (the hub config), null when the task names none
    name: str
    #: the split lm-eval evaluated: its ``test_split`` where the task has one, else its ``validation_split``
    split: str


class LMEvalInfo(TypedDict, total=False):
    """How lm-evaluation-harness defines and scored an lm-eval task (``summary.json``'s ``lm_eval``)."""

    #: lm-eval's task name (a leaf task, never a group)
    task: Required[str]
    #: the lm-eval group or tag of the profile entry this task came from, null for a task named alone
    group: str
    #: the task config's version, as lm-eval reports it
    version: Scalar
    #: the number of few-shot examples (lm-eval's ``num_fewshot``)
    n_shot: int
    #: lm-eval's request type
    output_type: Literal["multiple_choice", "loglikelihood", "loglikelihood_rolling", "generate_until"]
    #: the lm-eval metric (``name,filter``) that is reporter's ``score``, e.g. ``acc,none``
    metric: str
    #: every metric lm-eval computed for this task (``acc,none``, ``acc_stderr,none`` ...); a null stderr is lm-eval's N/A
    metrics: dict[str, Union[float, None]]
    #: lm-eval's higher_is_better per metric name
    higher_is_better: dict[str, bool]
    #: the harness that scored it, e.g. ``lm-eval 0.4.13``
    harness: str
    dataset: LMEvalDataset
    #: a content hash of the resolved task config (the same digest: the same prompts)
    digest: str
    #: whether prompts went through the model's chat template
    chat_template: bool
    #: the seed of lm-eval's few-shot sampler
    fewshot_seed: int
    #: the evaluated document ids (lm-eval's ``samples=``), the same for every model and rerun
    doc_ids: list[int]


class Majority(TypedDict, total=False):
    """A task's best constant answer (``summary.json``'s ``majority``)."""

    answer: Required[str]
    #: the share of the split (``over`` items) it gets right
    share: Required[Fraction]
    over: Required[int]
    #: the share of the evaluated items it gets right (what always giving it scores on the items the models answered)
    evaluated: Fraction


class TaskSummary(TypedDict, total=False):
    """``models/<slug>/tasks/<task>/summary.json``: one task of one model (collectors add their own keys)."""

    task: str
    scorer: str
    #: a plugin's scorer that reads the answer from the end of the reply or the whole of it (``register_scorer(name,
    #: answer_last=True)``): the card then says when most replies were cut at the token limit and scored 0
    answer_last: bool
    shots: int
    limit: int
    #: the task's data by content (``sha256:<hex>``): its evaluated items and few-shot examples (an lm-eval task's:
    #: its documents); two runs with another digest for a task evaluated other data under its name
    items_sha256: str
    #: how the task prompts and scores its items, by content (``sha256:<hex>`` of its instruction, answer prefix,
    #: scorer, token limit and stop sequences: :meth:`reporter.tasks.Task.settings_sha256`); a resume compares it.
    #: Absent for an lm-eval task (its configuration is in the run's hash) and in runs made before it was recorded
    task_sha256: str
    score: Required[Fraction]
    ci_low: Required[Fraction]
    ci_high: Required[Fraction]
    n: Required[Count]
    seed: int
    method: str
    chance: Fraction
    #: the best constant answer over the task's whole evaluation split: the answer most items accept (an lm-eval
    #: multiple-choice task: always the option at one position), the share it gets right, the items counted
    majority: Majority
    source: str
    #: the split of the task's hub dataset that its items are (the offline copy's, or the hub's where it answered)
    split: str
    description: str
    mean_response_tokens: float
    #: "fused" (the collectors rode generation) or "teacher-forced" (one pass after it)
    collection: Literal["fused", "teacher-forced"]
    #: why a task that asked for the fused path ran the teacher-forced pass instead
    collection_fallback: str
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
    spc: SPCMetrics
    validation: Validation
    flag_accuracy: Fraction
    answer_accuracy: Fraction
    format_validity: Fraction
    overconfidence: Fraction
    #: an lm-evaluation-harness task: its lm-eval name, version, n-shot, metrics and data
    lm_eval: LMEvalInfo
    #: wall time from the task's start to this summary in the process that finished it (after a resume: the
    #: batches that process ran): generation, the collectors, scoring. The evidence is timed in its own files; an
    #: lm-eval task counts its own requests and its summary, not lm-eval's scoring, which its group's tasks share
    seconds: float


# --- per model: lpp.json -------------------------------------------------------------------------

class LPPPrefix(TypedDict, total=False):
    """LPP metrics at one prefix length m."""

    m: Required[int]
    entropy: Required[float]
    pr: float
    er: float
    pr_raw: float
    er_raw: float
    n_texts: int  # texts long enough to count at m
    n_tokens: int  # hidden states the PR and ER at m are computed from
    robust_pr: float  # the robust variant at m (first position dropped, largest dimensions clipped)
    robust_er: float
    robust_pr_raw: float
    robust_er_raw: float


class LPPRobust(TypedDict, total=False):
    """PR and ER with the first position dropped and the largest dimensions clipped."""

    participation_ratio: float
    effective_rank: float
    pr_raw: float
    er_raw: float
    n_clip: int  # the highest-variance dimensions clipped
    n_sigma: float  # clipped to this many standard deviations


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
    #: the texts asked for (``lpp.n_texts``); ``n_texts`` is those long enough to use
    n_texts_requested: int
    n_tokens: int  # hidden states read over every prefix
    context: int
    step: int
    short_texts: str
    min_tokens: int  # the shortest text used (``lpp.min_tokens``)
    schedule: list[int]  # the prefix lengths m
    entropy_floor_m: int  # the m at which each maximum or minimum was taken
    participation_ratio_m: int
    effective_rank_m: int
    hidden: str  # which hidden states ("last": the last layer's)
    d_model: int
    dtype: str  # the precision the pass ran in


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
    #: a hub id's commit: the one its ``revision`` (or the default branch) resolved to when it loaded, at which every
    #: file was read
    commit: str
    #: what the weights are by content (:func:`reporter.models.identity.model_identity`): ``packaged:NAME:<sha256 of
    #: its GGUF>``, ``local:<sha256 of its weight, config and tokenizer files>``, ``hub:REPO@<commit>``,
    #: ``random:<sha256 of its recipe>``, ``weights:<sha256 of a plugin source's loaded weights, configuration and
    #: tokenizer>``, ``source:PREFIX:<sha256 of what a plugin source's identity() said>``;
    #: absent where it could not be read
    identity: str
    #: when this model was first measured in this run directory (UTC, ISO 8601): a model added to a run later than
    #: the run was made has its own date (``reporter board`` orders a release's versions by it); absent in runs made
    #: before it was recorded
    first_measured: str


class Smoke(TypedDict, total=False):
    """``models/<slug>/smoke.json``: perplexity on a few packaged LAMBADA passages."""

    perplexity: float
    mean_nll: float
    n_texts: int
    n_tokens: int
    #: each passage's first ``max_tokens`` tokens (the held-out reference pass's cut)
    max_tokens: int
    corpus: str
    #: ``reference_logprobs.npz`` (read from the held-out reference pass) or ``own pass``
    source: str
    seconds: float


class LMEvalGroup(TypedDict, total=False):
    """lm-eval's own aggregate of one group over its subtasks (``models/<slug>/lm_eval_groups.json``)."""

    #: lm-eval's group metrics (``acc,none``, ``acc_stderr,none`` ...; a null stderr is lm-eval's N/A) and
    #: ``sample_count`` (items per metric)
    metrics: dict[str, Any]
    #: the group's member tasks (or subgroups), as lm-eval lists them
    subtasks: list[str]
    #: the group config's version, as lm-eval reports it
    version: Scalar
    #: the harness that aggregated it, e.g. ``lm-eval 0.4.13``
    harness: str
    #: per aggregated metric (``acc``), whether the group weighs its tasks by their items (lm-eval's
    #: ``weight_by_size``) or each as one; absent in runs made before it was recorded (lm-eval's default: by items)
    weight_by_size: dict[str, bool]
    #: every task the aggregate is over, subgroups expanded (lm-eval's ``get_all_tasks``); absent in older runs
    leaves: list[str]


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
    #: why a task of the run's list has no summary: its failure line, by task name (``models/<slug>/tasks/<task>/
    #: error.json``: its data or definition was refused, or it raised); absent where no listed task failed
    task_errors: dict[str, str]
    #: a model-only step (a model-scope collector such as LPP, or evidence pass such as the held-out reference) or a
    #: task's evidence pass that failed, by its name (``<task>/<pass>`` for a task's): how (``failed with KeyError:
    #: …``, ``ran out of memory (…)``, ``failed: <reason>``), from ``errors/<name>.json`` in the model's or task's
    #: directory; the model's tasks were measured, what the step gives is missing
    step_errors: dict[str, str]
    #: lm-eval's aggregates of the run's lm-eval groups, by group name (``models/<slug>/lm_eval_groups.json``)
    lm_eval_groups: dict[str, LMEvalGroup]
    #: the verbatim check on held-out text (``models/<slug>/reference_verbatim.json``): the chance rate the task's
    #: verbatim test compares with (``n``, ``rate``, ``token_match``, ``per_item``, the corpus and cuts)
    reference_verbatim: dict[str, Any]


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
    #: the other names of the same weights (equal ``meta.identity``) this point stands for: one model, one point
    same_weights: list[str]
    #: the name the point was measured under, where a copy of the model's weights ran a task the model itself did not
    measured_as: str
    label: str  # the point's name on the charts
    n_tasks: int  # per-model average: the tasks averaged
    residual: float  # MUI minus the fit's MUI at this P
    std_residual: float  # the residual over the fit's residual standard deviation
    #: the leave-one-out studentised residual (null where it cannot be computed); ``studentized_inf``: infinite
    studentized: Union[float, None]
    studentized_inf: bool


class LawFit(TypedDict, total=False):
    """A fitted Utility Law MUI = intercept + slope · ln P (P, MUI in %)."""

    slope: Required[float]
    intercept: Required[float]
    r2: Required[float]
    n: Required[int]
    slope_ci: list[Union[float, None]]
    intercept_ci: list[Union[float, None]]
    points: list[LawPoint]
    n_points: int
    slope_stderr: float
    p_value: float  # the slope's two-sided OLS p-value
    residual_std: float
    confidence: float  # the level of the CIs (0.95)
    n_resamples: int  # the pairs bootstrap's resamples asked for, and those with a fit (``n_resamples_used``)
    n_resamples_used: int
    seed: int
    equation: str
    excluded: list[dict[str, Any]]  # points left out of this fit, each with its reason
    reason: Union[str, None]  # a caution about the fit, where there is one
    tasks: list[str]  # per-model average: the tasks every model has
    tasks_dropped: list[str]  # and those left out because a model lacks them


class NoFit(TypedDict):
    """Why there is no fit."""

    reason: str


def _law_fit(v: Any, where: str, validate: Callable[..., Any]) -> Any:
    if isinstance(v, dict) and "reason" in v and "slope" not in v:
        return {"reason": validate(v["reason"], str, f"{where}.reason")}
    return validate(v, LawFit, where)


LawFitOrReason = Annotated[Union[LawFit, NoFit], Check(_law_fit)]


class Excluded(TypedDict, total=False):
    """A model × task left out of a fit, and why."""

    model: str
    task: str
    reason: str
    #: left out as a copy of this model's weights (equal ``meta.identity``), whose point stands for it
    same_weights_as: str
    scopes: list[str]  # the fits it is left out of


class Law(TypedDict, total=False):
    """Utility Law fits: pooled, per task and on per-model averages."""

    pooled: LawFitOrReason
    per_task: dict[str, LawFitOrReason]
    per_model_average: LawFitOrReason
    excluded: list[Union[str, Excluded]]
    notes: list[str]
    left_out: list[Excluded]  # law_sae: model × task rows with no SAE MUI (task null: the whole model), and why


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
    #: the adjusted rank's central interval under the law's bootstrap fits, and the share of them ranking it first
    rank_adjusted_interval: list[int]
    p_first: float
    label: str
    P: float  # the score in % and MUI in %, as the law reads them
    MUI: float
    P_law: Union[float, None]  # the score the law predicts at this MUI (null: outside the law's range)
    MUI_law: float  # the MUI the law predicts at this score
    effort_ratio: float  # MUI over MUI_law: above 1, more effort than the law predicts for the score


class RankUncertainty(TypedDict, total=False):
    """How the law's pairs-bootstrap fits were carried to the adjusted ranks (:func:`reporter.analyse.fairness.adjusted_rank_intervals`)."""

    resamples: int
    of: int
    share_slope_not_negative: Union[float, None]
    confidence: float
    what: str


class Fairness(TypedDict, total=False):
    """The law-adjusted ranking, or the reason there is none."""

    definition: str
    sentence: str
    reason: str
    caution: str
    available: bool
    per_model: list[FairRow]
    rank_uncertainty: Union[RankUncertainty, None]
    fit: dict[str, Any]  # the law fit the adjustment uses (a LawFit)
    #: the same adjustment on each task's own fit: ``available``, ``reason``, ``fit``, ``rows``
    per_task: dict[str, dict[str, Any]]
    reference_rows: list[dict[str, Any]]  # untrained references beside the fit (label, model, P, MUI, baseline)


class OrderNullDoc(TypedDict):
    """The option-order test's null: exchangeable orders, or a benchmark's calibrated preference share."""

    name: Literal["exchangeable", "calibrated"]
    preference: float
    source: str
    calibration_sha256: NotRequired[str]  # content hash of reporter/data/option_order_null.json
    clean_models: NotRequired[list[str]]  # the null study's clean models, by name
    #: the same models by content (:func:`reporter.models.identity.model_identity`)
    clean_identities: NotRequired[list[str]]


class PowerAtSize(TypedDict, total=False):
    """A test's positive-control power at the run's size (``reporter/data/evidence_power.json``, cautious rounding)."""

    power: Required[Fraction]  # share of the controls' subsets of this size that fire in a run of this many tests
    items: Required[int]  # items (option order) or pairs (other split) the run's test scored
    orders: int  # other orders per item (option order)
    n_tests: Required[int]  # tests the run corrected together
    table_items: Required[int]  # the table's size used: the largest at most ``items``
    table_orders: int
    table_tests: Required[int]  # the table's K used: the smallest at least ``n_tests``
    draws: int
    power_range: list[float]  # the lowest and highest control's own share at this size and K
    source: str
    control: str  # the positive control it was measured on (the table's short description; the task's own where shipped)
    table_sha256: str


class Signal(TypedDict, total=False):
    """One contamination test (or the descriptive Min-K%): measured or not, its statistic, p-values, effect, verdict."""

    measured: bool
    test: bool
    fires: bool
    statistic: Union[Scalar, None]  # null: not measured
    statistic_name: str
    p_value: float  # under the null used (``null``)
    p_value_exchangeable: float  # option order: the plain exchangeable test's, whatever null is used
    null: OrderNullDoc
    #: the smallest p-value the test could reach given what it conditions on (its items, orders or pairs; the
    #: exact continuations on both sides): a test whose ``p_min`` is not below the correction's q cannot fire
    p_min: float
    #: False: it cannot fire at this size and is left out of the run's correction (no ``p_adjusted``)
    in_correction: bool
    p_adjusted: float
    n_tests: int  # tests the run corrected together (those that could fire)
    orders: int  # option order: the fewest other orders any of its items was scored in
    power_at_size: PowerAtSize  # the positive control's power at this test's size and the run's n_tests
    power_reason: str  # why power_at_size is missing (the table cannot say at this size)
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
    n: int  # items (or pairs) the test scored
    # the option-order test
    top_share: Fraction  # items whose published order is the most likely
    chance_share: Fraction  # that share under the null
    expected_statistic: float  # the statistic's expectation under the null
    ranks_sum: int  # the published order's ranks, summed, and their expectation under exchangeable orders
    expected_ranks_sum: float
    p_value_rank_sum: float  # the rank-sum test's p-value, the option-order test until 2026-12-01
    # the other split's test and Min-K%
    k: float  # Min-K%'s k (the share of lowest-probability tokens averaged)
    share: Fraction  # pairs whose evaluated item has the higher Min-K% Prob
    median_difference: float
    benchmark_median: float
    reference_median: float
    source: str  # what the reference texts are
    stratified: bool  # partners drawn from the evaluated item's own stratum
    reference_ids: list[str]
    n_benchmark: int
    n_reference: int
    reference_length: Union[int, None]  # Min-K%: reference texts cut to this length (the median question's)
    auc: float  # Min-K%: P(benchmark score > reference score)
    question_spans_known: int  # Min-K%: questions whose span in the prompt is known
    # the verbatim test
    rate: Fraction  # continuations reproduced exactly
    n_exact: int
    token_match: Fraction  # tokens of the continuations reproduced, on average
    reference_n: int  # the held-out texts' count and rate, the chance the test compares with
    reference_rate: Fraction
    # the law residual
    z: Union[float, None]  # the leave-one-out studentised residual (null: not finite)
    P: float  # the model's score (%) and its task's median score
    median_P: float
    n_points: int


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
    """Task × task overlap of key-neuron unions: a square matrix, one row and column per task."""

    tasks: Required[list[str]]
    matrix: Required[list[list[float]]]
    matrix_kind: str
    jaccard: list[list[float]]  # the Jaccard overlap of the unions
    redundancy: list[list[float]]  # the share of the row task's union inside the column task's
    sizes: list[int]  # each task's union size


def _square(v: dict, where: str, _validate: Callable[..., Any]) -> dict:
    k = len(v["tasks"])
    if len(v["matrix"]) != k or any(len(r) != k for r in v["matrix"]):
        raise _error(f"{where}.matrix", f"expected a {k}×{k} matrix (one row and column per task)")
    return v


def _same_length(v: dict, where: str, _validate: Callable[..., Any]) -> dict:
    if len(v["n"]) != len(v["union"]):
        raise _error(where, "n and union differ in length")
    return v


class _SaturationShape(TypedDict, total=False):
    """The key-neuron union of a task as samples are added (``n`` and ``union`` of equal length)."""

    n: Required[list[float]]
    union: Required[list[float]]
    n95: float
    total: float
    n_samples: int
    union_size: list[int]  # the union's size after each sample, in the seeded order
    fraction: float  # the share of the final union the n_at_fraction samples reach
    n_at_fraction: int
    seed: int


#: task × task overlap of key-neuron unions (a square matrix)
Overlap = Annotated[_OverlapShape, Check(_square)]
#: the key-neuron union of a task as samples are added
Saturation = Annotated[_SaturationShape, Check(_same_length)]


class CoreSet(TypedDict, total=False):
    """The greedy key-neuron core set of a task."""

    size: Required[int]
    n: Required[int]
    coverage: Required[float]
    items: list[str]  # the core set's item ids
    covered: int  # key neurons the core set covers, of the task's ``total``
    total: int
    fraction: float  # the coverage asked for
    n_samples: int


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
    recommendations: list[str]  # the advice as sentences
    definitions: dict[str, str]  # what jaccard, redundancy, marginal_gain and core_set mean
    rules: str  # the thresholds the advice applies
    fraction: float  # the core sets' coverage
    redundant_at: float  # the redundancy above which a task is called redundant
    seed: int


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
    #: each task's share of one unit of the mean, where an lm-eval group counts as one task (its tasks share the
    #: unit as lm-eval's aggregate of the group weighs them); absent where every task counts as one
    shares: dict[str, float]
    #: the number of units the mean divides by (tasks outside a group, and groups); with ``shares``
    units: int
    alpha: float
    method: str


class Reference(TypedDict, total=False):
    """A reference row below the ranked models: an untrained model (``chance``), the theoretical chance level
    (``theoretical``), or always each task's most common answer where that scores more (``majority``).
    """

    model: str
    score: Required[Fraction]
    kind: Required[Literal["chance", "theoretical", "majority"]]
    reason: str
    #: ``majority``: the same rule's mean score on the evaluated items (every task recorded its share there)
    evaluated_score: Fraction


class NotRanked(TypedDict, total=False):
    """A model left out of the ranking, and why."""

    model: Required[str]
    reason: Required[str]


class ChanceTest(TypedDict, total=False):
    """Whether a model beats a task's chance level, or its most common answer where that scores higher
    (one-sided, α = 0.05).
    """

    model: Required[str]
    task: Required[str]
    reference: bool
    chance: Fraction
    #: the share of the task's items its most common answer gets (where the task records one)
    majority: Fraction
    #: that answer (present where it is the level tested)
    majority_answer: str
    #: the level tested: the higher of chance and majority
    baseline: Fraction
    baseline_kind: Literal["chance", "majority"]
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
    #: the paired 95% bootstrap interval of dP (fractions), when the run's items were read
    dP_ci: Union[list[float], None]
    dMUI: float
    phase: str


class Training(TypedDict, total=False):
    """Training phases along a checkpoint series."""

    model_series: Required[list[TrainingPoint]]
    collapse: bool
    summary: str
    rule: str  # how a step's phase is decided
    tolerance: dict[str, float]  # the changes below which a step counts as flat (P_points, MUI_relative)
    series: list[dict[str, Any]]  # the checkpoints in order (label, checkpoint, P, MUI)
    steps: list[dict[str, Any]]  # each step with its dP, dMUI and phase
    collapse_steps: list[str]  # the steps whose phase is collapse ("ckpt-3000 -> ckpt-4000")
    per_task: dict[str, dict[str, Any]]  # the same per task (steps, collapse)
    tasks: list[str]  # the tasks every checkpoint has, and those left out
    tasks_dropped: list[str]
    notes: list[str]


class ResponseRow(TypedDict, total=False):
    """A trained model's replies to a task that measure the generation settings more than the model (the
    definitions' ``responses`` rule): mostly empty, or mostly cut at the new-token limit and scored 0.
    """

    model: Required[str]
    task: Required[str]
    kind: Required[Literal["empty", "cut"]]
    #: the task's generated replies
    n: Required[Count]
    #: replies with no text (whitespace only) that ended at once and were scored as empty
    empty: Required[Count]
    #: those by stop reason ("eos", "stop")
    empty_stopped: Required[dict[str, Count]]
    #: replies that stopped at the task's new-token limit
    cut: Required[Count]
    #: of those, the ones that scored 0
    cut_wrong: Required[Count]
    #: lm-eval generate_until tasks: of the cut replies, the ones that scored 0 and in which lm-eval's filter found no
    #: answer (the fallback the task's filters are built with, "[invalid]" unless its YAML sets another, or nothing)
    cut_unread: Count
    #: the limit the cut replies reached (their length in tokens); absent where none was cut
    limit: Count
    #: the replies by stop reason ("eos", "stop", "length")
    stopped: Required[dict[str, Count]]


class Analysis(TypedDict, total=False):
    """The analyse stage's output, computed from the artifacts alone."""

    version: int  # the analysis's version (reporter.analyse.ANALYSIS_VERSION)
    seed: int  # the seed of its bootstraps
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
    responses: list[ResponseRow]
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


# --- compare.json ----------------------------------------------------------------------------------

class RunSide(TypedDict, total=False):
    """One side of a comparison: the run directory and its ``run`` block."""

    dir: Required[str]
    name: Required[str]
    created: str | None
    config_hash: str | None
    profile: str | None
    reporter_version: str | None
    seed: int | None


class Pair(TypedDict):
    """A model of the base run paired with a model of the new run."""

    base: str
    new: str


class Unpaired(TypedDict, total=False):
    """The models of each run that were not paired, so not compared."""

    base: list[str]
    new: list[str]


class MUIDelta(TypedDict, total=False):
    """The MUI of one task in both runs (only when they recorded the same MUI settings)."""

    base: Required[float]
    new: Required[float]
    delta: Required[float]
    definition: str
    n_samples: int | None


class SeverityChange(TypedDict, total=False):
    """The contamination verdict of one task in both runs (null: not measured) and how it moved."""

    base: Literal["strong", "weak", "none"] | None
    new: Literal["strong", "weak", "none"] | None
    change: Required[Literal["new", "cleared", "changed", "unchanged", "not measured"]]
    note: str  # cleared: each test that fired in the base run, at its size and power in both runs


class ComparisonRow(TypedDict, total=False):
    """One paired model and task: the score change new − base on the items both runs answered."""

    base_model: Required[str]
    new_model: Required[str]
    task: Required[str]
    n: Required[int]
    base_score: Fraction
    new_score: Fraction
    delta: Required[float]
    ci_low: float
    ci_high: float
    ci_method: str
    test: str | None
    p_value: float
    n_regressed: int | None
    n_improved: int | None
    reference: bool
    mui: MUIDelta | None
    contamination: SeverityChange
    p_holm: float
    significant: bool
    status: Required[Literal["regression", "improvement", "no significant change"]]
    #: the lm-eval group this task counts in, where lm-eval aggregated one over it: release notes' mean over tasks
    #: counts the group as one task (absent: a task of its own)
    lm_eval_unit: str
    #: whether that group weighs its tasks by their items (its YAML's ``weight_by_size``, lm-eval's default) or equally
    lm_eval_group_by_size: bool


class MetricDelta(TypedDict):
    """One LPP number in both runs."""

    base: float
    new: float
    delta: float


class LPPDelta(TypedDict, total=False):
    """The LPP signature deltas of one paired model, or why they are not compared."""

    base_model: Required[str]
    new_model: Required[str]
    compared: Required[bool]
    reason: str
    metrics: dict[str, MetricDelta]


class CompareDocument(TypedDict, total=False):
    """``compare.json``: what changed between two runs (``reporter compare BASE NEW``)."""

    version: Required[int]
    alpha: float
    family: int
    base: RunSide
    new: RunSide
    pairs: list[Pair]
    unpaired: Unpaired
    failures: list[str]
    #: a paired model that did not finish in either run (partial or pending): only its finished tasks are compared
    incomplete: list[str]
    rows: Required[list[ComparisonRow]]
    lpp: list[LPPDelta]
    notes: list[str]


#: the documents of the README's schema section, in reading order
DOCUMENTS: tuple[Any, ...] = (Results, RunInfo, ModelResult, ModelMeta, Smoke, TaskSummary, MUISettings, SAESettings,
                              SAEInfo, TopFeature, Calibration, ARMetrics, SPCMetrics, LMEvalInfo, LMEvalDataset,
                              LMEvalGroup, Validation, LPPProfile, LPPPrefix, LPPRobust, Comparison, LPPCorrelation, Analysis,
                              Law, LawFit, NoFit, LawPoint, Excluded, Fairness, FairRow, Ranking, RankRow, LeaderDiff,
                              Reference, NotRanked, ChanceTest, Ties, Power, PowerRow, ContaminationRow, Signal,
                              Diversity, Advice, CoreSet, CoreSetExport, Training, TrainingPoint, ResponseRow)
#: the types of compare.json, in reading order
COMPARE_DOCUMENTS: tuple[Any, ...] = (CompareDocument, RunSide, Pair, Unpaired, ComparisonRow, MUIDelta, SeverityChange,
                                      LPPDelta, MetricDelta)


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

"""The collect stage of lm-eval tasks: reporter executes lm-eval's requests, lm-eval scores them.

One profile entry ``{lm_eval: NAME}`` is one lm-eval task, or a group's or tag's leaf tasks (each
a reporter task of its own, with its own directory). Per leaf task:

1. **Plan.** lm-eval's own ``Task`` builds its requests (``build_all_requests``: prompt template,
   few-shot context from its sampler with lm-eval's default seed, chat template) for the chosen
   documents (:func:`reporter.tasks.lm_eval_source.select_docs`, passed as ``samples=``).
2. **Execute, batch by batch, collectors on.** A batch is ``max_batch_size`` documents:
   * ``multiple_choice`` / ``loglikelihood``: every option's log-likelihood, each context run
     once (:class:`~reporter.collect.lm_eval_lm.ReporterLM`), with the collectors riding those
     passes (``collection: fused``: MUI's hooks on every option's pass, the prompt's token
     log-probs from the LM head on the context's pass); each collector keeps **the option the
     model ranks first** (the argmax of the raw log-likelihoods, lm-eval's ``acc`` choice: the
     model's answer), so MUI's response for such an item is its answer. Where they cannot ride
     (:func:`leaf_collection`), ONE teacher-forced hooked pass over context + that answer feeds them;
   * ``generate_until``: reporter's greedy loop with the collectors riding it, cut at lm-eval's
     stop sequences.
   Each batch's answers and records land in ``parts/lm_eval-<batch>.json`` as it finishes, so an
   interrupted run resumes where it stopped.
3. **Score** (:mod:`reporter.collect.lm_eval_score`). ``lm_eval.evaluator.evaluate`` runs on the entry's task dict with the model's
   answers in its store: lm-eval's filters, ``process_results`` and aggregation (groups too)
   give every per-item metric and every aggregate. Reporter's score of an item is the value of
   one lm-eval metric (the task's first, or ``metric:``), so its bootstrap CIs, paired tests and
   ``compare`` work on lm-eval tasks as on built-in ones.

``lm_eval_responses.json`` keeps every answer of a leaf after it finishes (a group's aggregate
can be recomputed from them); ``lm_eval_groups.json`` in the model directory holds lm-eval's
group results.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..config import Profile, TaskConfig
from ..instrument.gather import head_output_is_logits
from ..models.generation import Generation
from ..store.atomic import json_ok, read_json, write_json
from ..store.layout import LM_EVAL_GROUPS
from ..tasks import Task, content_sha256
from ..tasks.lm_eval_source import FEWSHOT_SEED, Resolved, include_dirs, lm_eval_version, resolve, select_docs
from .collectors import BatchContext, CollectorPlugin, OptionPasses, TaskContext, enabled_collectors
from .lm_eval_items import doc_item, other_split
from .plan import TaskPlan
from .task_run import _collect, collection_choice, task_complete

#: every answer of one leaf task, kept after it finishes
RESPONSES = "lm_eval_responses.json"
#: lm-eval's group results of one model (its directory)
GROUPS = LM_EVAL_GROUPS
#: the request types whose items are scored from log-likelihoods
LOGLIKELIHOOD_TYPES = ("multiple_choice", "loglikelihood")


@dataclass
class LeafPlan:
    """One leaf task of one model: lm-eval's task object, the chosen documents and reporter's plan of them."""

    config: TaskConfig
    task: Any  # lm_eval.api.task.Task
    ids: list[int]  # the evaluated document ids (lm-eval's `samples`)
    requests: list[list[Any]]  # per document (position in ids): its lm-eval Instances, by option index
    plan: TaskPlan
    output_type: str
    chat_template: bool


def configure(task: Any, config: TaskConfig) -> None:
    """Apply the profile's settings to lm-eval's task object, as ``lm_eval`` applies its command line.

    ``shots`` is lm-eval's ``num_fewshot`` (a task whose config pins 0 keeps 0, as in lm-eval);
    ``max_new_tokens`` its ``max_gen_toks``; ``lm_eval_config`` the documented overrides. The
    few-shot sampler is re-seeded (lm-eval's default seed), so every build of the requests draws
    the same examples.
    """
    if not hasattr(task, "_reporter_default_fewshot"):  # a task object resolve() did not load
        task._reporter_default_fewshot = task.get_config("num_fewshot")
    default = task._reporter_default_fewshot
    if config.shots is not None and default != 0:
        task.set_config(key="num_fewshot", value=config.shots)
    else:
        task.set_config(key="num_fewshot", value=default or 0)
    for key, value in (config.lm_eval_config or {}).items():
        if key == "generation_kwargs" and task.get_config("output_type") != "generate_until":
            continue  # as lm-eval applies --gen_kwargs: to generate_until tasks only (a group may mix the two)
        task.set_config(key=key, value=value, update=key == "generation_kwargs")
    if config.max_new_tokens and task.get_config("output_type") == "generate_until":
        task.set_config(key="generation_kwargs", value={"max_gen_toks": config.max_new_tokens}, update=True)
    task.set_fewshot_seed(seed=FEWSHOT_SEED)


def resolve_entry(profile: Profile, config: TaskConfig) -> Resolved:
    """The lm-eval task dict of a leaf's profile entry (its group, or the task itself)."""
    if config.lm_eval is None:
        raise AssertionError(f"task '{config.name}' is not an lm-eval task")
    return resolve(config.lm_eval_group or config.lm_eval, include_dirs(profile.lm_eval_include))


#: where lm-eval finds the progress bars it draws while reporter plans and scores its tasks: building each task's
#: requests (``Task.build_all_requests``), tokenising them (``LM.loglikelihood``), and bootstrapping a metric's stderr
#: (``lm_eval.api.metrics``, which imports ``tqdm.tqdm`` inside its functions)
_BAR_MODULES = ("lm_eval.api.task", "lm_eval.api.model", "tqdm")


@contextlib.contextmanager
def lm_eval_bars(progress: bool) -> Iterator[None]:
    """lm-eval's own progress bars on stderr only with ``progress``: ``reporter run --no-progress`` hides them as it
    hides reporter's (they printed three bars per task into a log that asked for none).

    >>> import lm_eval.api.task as t
    >>> with lm_eval_bars(False):
    ...     from tqdm import tqdm
    ...     t.tqdm(range(3)).disable, tqdm(range(3)).disable
    (True, True)
    >>> tqdm is not t.tqdm  # undone: reporter's own bars and other code see tqdm itself again
    True
    """
    if progress:
        yield
        return
    import importlib

    modules = [importlib.import_module(name) for name in _BAR_MODULES]
    saved = [(m, m.tqdm) for m in modules if hasattr(m, "tqdm")]

    def quiet(real: Any) -> Any:
        def bar(*args: Any, **kwargs: Any) -> Any:
            kwargs["disable"] = True  # also where lm-eval passes its own disable=False
            return real(*args, **kwargs)
        return bar

    for module, real in saved:
        module.tqdm = quiet(real)
    try:
        yield
    finally:
        for module, real in saved:
            module.tqdm = real


def plan_leaf(rlm: Any, resolved: Resolved, config: TaskConfig, seed: int) -> LeafPlan:
    """Build lm-eval's requests for the chosen documents of one leaf, and reporter's plan of them."""
    assert config.lm_eval is not None
    task = resolved.task(config.lm_eval)
    configure(task, config)
    ids = select_docs(len(task.eval_docs), config.lm_eval, limit=config.limit, seed=seed, only=config.items)
    chat = bool(config.chat_template)
    task.build_all_requests(samples=ids, apply_chat_template=chat, fewshot_as_multiturn=chat,
                            chat_template=rlm.apply_chat_template if chat else None,
                            tokenizer_name=rlm.tokenizer_name if chat else "")
    by_doc: dict[int, list[Any]] = {}
    for inst in task.instances:
        by_doc.setdefault(inst.doc_id, []).append(inst)
    requests = [sorted(by_doc[k], key=lambda x: x.idx) for k in range(len(ids))]
    kind = task.get_config("output_type")
    docs = task.eval_docs
    items, prompts, prompt_ids = [], [], []
    for k, doc_id in enumerate(ids):
        context = requests[k][0].args[0]
        items.append(doc_item(task, kind, docs[doc_id], str(doc_id), context))
        prompts.append(context)
        prompt_ids.append(_context_ids(rlm, kind, requests[k][0]))
    version = (task.dump_config().get("metadata") or {}).get("version")
    rtask = Task(config.name, "lm_eval", "", "", load=lambda: items,
                 description=str(task.get_config("description") or "").strip()[:200],
                 source=f"lm-eval {lm_eval_version()} task {config.lm_eval} (version {version})")
    other = other_split(task)
    if other is not None:
        split, read = other
        rtask.other_split = lambda: [doc_item(task, kind, d, f"{split}:{i}", "") for i, d in enumerate(read())]
        rtask.other_split_source = f"the {split} split of lm-eval task {config.lm_eval} (its config's {split} split)"
    # an item's digest is its document's (lm-eval's own content), not the prompt, which holds the model's template
    plan = TaskPlan(rtask, items, prompts, prompt_ids, int(task.get_config("num_fewshot") or 0), (),
                    item_digests=[content_sha256(docs[doc_id]) for doc_id in ids])
    return LeafPlan(config, task, ids, requests, plan, kind, chat)


def _context_ids(rlm: Any, kind: str, inst: Any) -> list[int]:
    """The context's tokens as lm-eval's ``hf`` model encodes them for this request type."""
    if kind in LOGLIKELIHOOD_TYPES:
        context, continuation = inst.args
        if context == "":
            return [rlm.prefix_token_id]
        return list(rlm._encode_pair(context, continuation)[0])
    if kind == "generate_until":
        _, max_gen = rlm.generation_settings(inst.args[1])
        return rlm.context_ids(inst.args[0], max_gen)
    return [rlm.prefix_token_id]


# -- executing one leaf, batch by batch

def part_path(ctx: TaskContext, batch: int) -> Path:
    """The per-batch answers and records of an lm-eval leaf."""
    return ctx.part_path("lm_eval", batch, ".json")


def leaf_complete(profile: Profile, task_dir: Path) -> bool:
    """Whether a leaf is complete as any task is (:func:`~reporter.collect.task_run.task_complete`), and its answers
    (``lm_eval_responses.json``, which a group's aggregate is recomputed from) are there, whole.
    """
    return json_ok(task_dir / RESPONSES) and task_complete(profile, task_dir)


def execute_leaf(lm: Any, rlm: Any, profile: Profile, lp: LeafPlan, task_dir: Path, *, seed: int,
                 progress: bool = True, plugins: list[CollectorPlugin] | None = None) -> None:
    """Answer every request of one leaf, ``max_batch_size`` documents per batch, the collectors on; resumable."""
    task_dir.mkdir(parents=True, exist_ok=True)
    ctx = TaskContext(lm=lm, profile=profile, config=lp.config, plan=lp.plan, task_dir=task_dir, seed=seed)
    ctx.parts_dir.mkdir(exist_ok=True)
    plugins = enabled_collectors(profile) if plugins is None else plugins
    for part in ctx.parts("lm_eval", ".json"):
        if json_ok(part):
            rlm.store.update(read_json(part)["store"])
    ids = lp.plan.prompt_ids
    order = sorted(range(len(ids)), key=lambda i: (-len(ids[i]), i))
    bs = lm.spec.max_batch_size
    batches = [order[i:i + bs] for i in range(0, len(order), bs)]
    todo = [(b, idx) for b, idx in enumerate(batches)
            if not json_ok(part_path(ctx, b)) or not all(p.batch_done(ctx, b) for p in plugins)]
    bar = tqdm(total=len(order), initial=len(order) - sum(len(i) for _, i in todo), disable=not progress,
               desc=f"{lm.spec.name}: {lp.config.name}", leave=False)
    path, _ = leaf_collection(lm, profile, lp, plugins)
    for b, idx in todo:
        batch = BatchContext(task=ctx, index=b, positions=idx, generations=[])
        if lp.output_type in LOGLIKELIHOOD_TYPES and path == "fused":
            keys = _options_batch(rlm, lp, batch, plugins)
        elif lp.output_type in LOGLIKELIHOOD_TYPES:
            keys = _loglikelihood_batch(lm, rlm, lp, batch, plugins)
        elif lp.output_type == "generate_until":
            keys = _generate_batch(rlm, lp, batch, plugins, fused=path == "fused")
        else:  # loglikelihood_rolling
            keys = _rolling_batch(lm, rlm, lp, batch, plugins)
        write_json(part_path(ctx, b), {"store": {k: rlm.store[k] for k in keys}, "records": batch.records})
        bar.update(len(idx))
    bar.close()


def _records(lp: LeafPlan, batch: BatchContext, texts: Sequence[str], extra: Sequence[dict[str, Any]] | None = None
             ) -> None:
    for n, (i, g, t) in enumerate(zip(batch.positions, batch.generations, texts)):
        rec = {"id": lp.plan.items[i].id, "item_sha256": lp.plan.item_digests[i], "prompt": lp.plan.prompts[i],
               "response": t,
               "prompt_tokens": len(g.prompt_ids), "response_tokens": len(g.response_ids), "stopped_by": g.stopped_by,
               "batch": batch.index}
        if extra is not None:
            rec.update(extra[n])
        batch.records.append(rec)


def leaf_collection(lm: Any, profile: Profile, lp: LeafPlan, plugins: list[CollectorPlugin] | None = None
                    ) -> tuple[str, str | None]:
    """How the collectors of one leaf are fed, and why not the fused way the profile asked for (None: as asked).

    ``generate_until``: riding the generation (:func:`~reporter.collect.task_run.collection_choice`);
    ``multiple_choice`` / ``loglikelihood``: riding the option passes when every plugin
    :meth:`~reporter.collect.collectors.CollectorPlugin.rides_options` and the LM head's output is the model's
    logits (the prompt's log-probs come from the head on the context's pass); otherwise, and for perplexity tasks,
    one teacher-forced pass.
    """
    plugins = enabled_collectors(profile) if plugins is None else plugins
    if lp.output_type == "generate_until":
        return collection_choice(lm, profile, plugins)
    if profile.collection != "fused":
        return "teacher-forced", None
    if lp.output_type not in LOGLIKELIHOOD_TYPES:
        return "teacher-forced", ("a perplexity task's collectors read one teacher-forced pass over each document's "
                                  "first window")
    ctx = TaskContext(lm=lm, profile=profile, config=lp.config, plan=lp.plan, task_dir=Path("."), seed=0)
    slow = [p.name for p in plugins if not p.rides_options(ctx)]
    if slow:
        names = ", ".join(f"'{n}'" for n in slow)
        return "teacher-forced", f"collector{'s' if len(slow) > 1 else ''} {names} cannot ride the option passes"
    if getattr(lm.model, "base_model", lm.model) is lm.model or not head_output_is_logits(lm.model):
        return "teacher-forced", ("the model's logits are not its LM head's output on its body's states (a soft-cap "
                                  "or scale after the head), so the prompt's log-probs need a pass of their own")
    return "fused", None


def _answers(lp: LeafPlan, batch: BatchContext, res: Sequence[tuple[float, bool]],
             enc: Sequence[tuple[list[int], list[int]]]) -> list[int]:
    """Each item's answer (the option the model ranks first: the argmax of the raw log-likelihoods, lm-eval's
    ``acc`` choice) as its batch's generation and sample record; the answers' request indices.
    """
    gens, texts, extra, chosen = [], [], [], []
    k = 0
    for i in batch.positions:
        m = len(lp.requests[i])
        lls = [float(r[0]) for r in res[k:k + m]]
        j = int(np.argmax(lls))
        context_ids, cont_ids = enc[k + j]
        text = lp.requests[i][j].args[1]
        gens.append(Generation(prompt_ids=context_ids, response_ids=cont_ids, text=text, stopped_by="option"))
        texts.append(text)
        extra.append({"loglikelihoods": [round(x, 6) for x in lls], "answer_index": j})
        chosen.append(k + j)
        k += m
    batch.generations = gens
    _records(lp, batch, texts, extra)
    return chosen


def _loglikelihood_batch(lm: Any, rlm: Any, lp: LeafPlan, batch: BatchContext,
                         plugins: list[CollectorPlugin]) -> list[str]:
    """Every option's log-likelihood; then one teacher-forced hooked pass over context + the model's answer."""
    insts = [inst for i in batch.positions for inst in lp.requests[i]]
    res = rlm.loglikelihood(insts, disable_tqdm=True)
    enc = list(rlm.encoded)
    _answers(lp, batch, res, enc)
    _collect(lm, batch, plugins)
    return [rlm.key("loglikelihood", [c, x]) for c, x in enc]


def _options_batch(rlm: Any, lp: LeafPlan, batch: BatchContext, plugins: list[CollectorPlugin]) -> list[str]:
    """Every option's log-likelihood with the collectors riding those passes (each option one of their samples);
    each plugin keeps what it saw of the model's answer.
    """
    insts = [inst for i in batch.positions for inst in lp.requests[i]]
    riders = [(p, p.for_options(batch)) for p in plugins]
    wanted = [s for s in (p.prompt_logprobs_from(batch) for p in plugins) if s is not None]
    prompt_from = None
    if wanted:
        first = [min(s[k] for s in wanted) for k in range(len(batch.positions))]
        prompt_from = [first[k] for k, i in enumerate(batch.positions) for _ in lp.requests[i]]
    res, passes = rlm.loglikelihood_riding(insts, [c for _, c in riders if c is not None], prompt_from)
    enc = list(rlm.encoded)
    chosen = _answers(lp, batch, res, enc)
    seen_at = {r: n for n, r in enumerate(passes.seen)}  # empty when no collector rode: nothing to pick from
    options = OptionPasses(picks=[seen_at[r] for r in chosen] if seen_at else [],
                           answer_logprobs=[passes.token_logprobs[r] for r in chosen],
                           prompt_logprobs=None if passes.prompt_logprobs is None
                           else [passes.prompt_logprobs[r] for r in chosen])
    for p, c in riders:
        p.save_options(c, batch, options)
    return [rlm.key("loglikelihood", [c, x]) for c, x in enc]


def _rolling_batch(lm: Any, rlm: Any, lp: LeafPlan, batch: BatchContext, plugins: list[CollectorPlugin]) -> list[str]:
    """A perplexity task's documents: lm-eval's own rolling windows scored; then one teacher-forced hooked pass over
    each document's first window (lm-eval's prefix token, then the text) feeds the collectors.
    """
    from lm_eval import utils

    insts = [lp.requests[i][0] for i in batch.positions]
    rlm.encoded_all = []
    lls = rlm.loglikelihood_rolling(insts, disable_tqdm=True)
    keys = [rlm.key("loglikelihood", [c, x]) for c, x in rlm.encoded_all]
    gens, texts = [], []
    for inst in insts:
        tokens = rlm.tok_encode(inst.args[0])
        ctx, cont = next(map(utils.make_disjoint_window, utils.get_rolling_token_windows(
            token_list=tokens, prefix_token=rlm.prefix_token_id, max_seq_len=rlm.max_length, context_len=1)))
        gens.append(Generation(prompt_ids=list(ctx), response_ids=list(cont), text=rlm.tok_decode(list(cont)),
                               stopped_by="window"))
        texts.append(inst.args[0][:200])
    batch.generations = gens
    _records(lp, batch, texts, [{"loglikelihood": round(float(x), 6), "tokens": len(rlm.tok_encode(i.args[0]))}
                                for x, i in zip(lls, insts)])
    _collect(lm, batch, plugins)
    return keys


def _generate_batch(rlm: Any, lp: LeafPlan, batch: BatchContext, plugins: list[CollectorPlugin], *,
                    fused: bool) -> list[str]:
    """Greedy answers, the collectors riding the generation (or one teacher-forced pass after it)."""
    reqs = [tuple(lp.requests[i][0].args) for i in batch.positions]
    riders = [(p, p.for_generation(batch)) for p in plugins] if fused else []
    texts, gens = rlm.generate_batch(reqs, [c for _, c in riders if c is not None], fused=fused)
    batch.generations = gens
    _records(lp, batch, texts)
    if fused:
        for p, c in riders:
            p.save_batch(c, batch)
    else:
        _collect(batch.task.lm, batch, plugins)
    return [rlm.key("generate_until", [c, kw]) for c, kw in reqs]

"""Reporter as an lm-eval model: :class:`ReporterLM`, an ``lm_eval`` ``HFLM`` whose requests reporter executes.

lm-eval's evaluator hands a model its requests and scores what comes back. ``ReporterLM`` is
lm-eval's own Hugging Face model class (so its tokenisation of contexts and continuations, its
chat templates, its rolling windows and its stop-sequence handling are lm-eval's, not a copy)
with the three request types executed by reporter:

* ``loglikelihood`` (and ``multiple_choice``): each distinct context runs once and its KV cache
  serves all of its continuations (:func:`reporter.instrument.continuations.continuation_loglikelihoods`),
  where lm-eval's ``hf`` model runs every (context, option) pair whole;
* ``loglikelihood_rolling``: lm-eval's own disjoint rolling windows, each scored like a request;
* ``generate_until``: reporter's greedy loop (:func:`reporter.models.generation.generate_collecting`),
  the collectors riding its forward passes, cut at lm-eval's stop sequences by lm-eval's own
  post-processing.

Every answer is kept in :attr:`ReporterLM.store`, keyed by the request's tokens (or, for
generation, its context and generation settings). The collect stage fills the store batch by
batch with the collectors on (:mod:`reporter.collect.lm_eval_run`), then hands the model to
``lm_eval.evaluator.evaluate``, which finds every answer there and computes the scores with
lm-eval's filters, ``process_results`` and aggregations.

>>> ReporterLM.key("generate_until", ("Q: 2+2?", {"until": ["\\n"]}))
'generate_until\\x00["Q: 2+2?", {"until": ["\\\\n"]}]'
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text

from ..errors import UserError
from ..instrument.continuations import ContinuationPasses, continuation_passes
from ..models.generation import Generation, fusable_generation, generate, generate_collecting

__all__ = ["ReporterLM"]


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


class ReporterLM(HFLM):  # type: ignore[misc]
    """lm-eval's ``HFLM`` around a reporter :class:`~reporter.models.loading.LoadedModel`.

    ``store`` maps :meth:`key` to an answer: ``[log-likelihood, is_greedy]`` or a generated
    string. Answers missing from it are computed (without collectors) and added; ``misses``
    counts them.
    """

    def __init__(self, lm: Any, *, batch_size: int | None = None, store: dict[str, Any] | None = None) -> None:
        super().__init__(pretrained=lm.model, tokenizer=lm.tokenizer,
                         batch_size=int(batch_size or lm.spec.max_batch_size))
        self.reporter_lm = lm
        self.store: dict[str, Any] = {} if store is None else store
        self.misses = 0
        #: (context tokens, continuation tokens) of every log-likelihood request of the last call, in order
        self.encoded: list[tuple[list[int], list[int]]] = []
        #: the same over every call since a caller last reset it (a rolling request spans several calls)
        self.encoded_all: list[tuple[list[int], list[int]]] = []
        #: set when lm-eval's command line made this model (:meth:`from_model_args`): the run it writes
        self.run_config: Any = None
        self.run_output: str | None = None
        self.run_profile: str | None = None
        #: while :meth:`loglikelihood_riding` runs: its riders and prompt_from; then what the passes measured
        self._riding: tuple[Sequence[Any], Sequence[int] | None] | None = None
        self.passes: ContinuationPasses | None = None

    #: the keys of ``--model_args`` of ``--model reporter``
    MODEL_ARGS = ("pretrained", "name", "dtype", "device", "kind", "max_batch_size", "output", "profile", "seed")

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict[str, Any] | None = None
                               ) -> "ReporterLM":
        """``--model reporter --model_args pretrained=SOURCE,output=DIR,...`` (lm-eval's model factory)."""
        from lm_eval.utils import simple_parse_args_string

        return cls.from_model_args(simple_parse_args_string(arg_string), additional_config or {})

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict[str, Any] | None = None
                            ) -> "ReporterLM":
        """The same, from a mapping (lm-eval's Python API)."""
        return cls.from_model_args(dict(arg_dict), additional_config or {})

    @classmethod
    def from_model_args(cls, args: dict[str, Any], extra: dict[str, Any]) -> "ReporterLM":
        """Load the model ``pretrained`` names (a reporter source: ``packaged:…``, ``random:…``, a directory or a
        hub id) through reporter's loader, checked like a models YAML entry; ``output`` is the reporter run
        directory to write, ``profile`` the reporter profile whose collector settings apply (default ``quick``'s).
        """
        from ..config import parse_config
        from ..models import preflight  # noqa: F401  (the checks of packaged: and random: sources, as validate's)
        from ..models.loading import load_model
        from ..registry import unknown_name

        for key in args:
            if key not in cls.MODEL_ARGS:
                raise UserError("--model_args: " + unknown_name("key", str(key), cls.MODEL_ARGS, listing="valid keys"))
        if not args.get("pretrained"):
            raise UserError("--model_args: pretrained=SOURCE is required (packaged:smollm2-135m-instruct, "
                            "random:llama, a model directory or a hub id)")
        source = str(args["pretrained"])
        entry: dict[str, Any] = {"name": str(args.get("name") or source), "source": source}
        for key in ("dtype", "device", "kind", "max_batch_size"):
            if args.get(key) is not None:
                entry[key] = args[key]
        if isinstance(extra.get("batch_size"), int) and "max_batch_size" not in entry:
            entry["max_batch_size"] = extra["batch_size"]
        device = extra.get("device")
        if device and "device" not in entry and not (str(device).startswith("cuda") and not _cuda()):
            entry["device"] = device  # lm-eval's default device is cuda; on a machine without one reporter's auto holds
        data: dict[str, Any] = {"models": [entry]}
        if args.get("seed") is not None:
            data["seed"] = args["seed"]
        # where each key of the entry came from, to name it as the user wrote it
        written = {"source": "--model_args pretrained", "name": "--model_args name" if args.get("name") else
                   "--model_args pretrained (the model's name where name= is not given)"}
        written.update({k: f"--model_args {k}" for k in ("dtype", "device", "kind", "max_batch_size") if args.get(k)
                        is not None})
        written.setdefault("max_batch_size", "--batch_size")
        written.setdefault("device", "--device")
        try:
            cfg = parse_config(data, "--model_args")
        except UserError as e:
            raise UserError([_as_written(ln, written) for ln in e.lines]) from None
        try:
            lm = load_model(cfg.models[0], run_device=cfg.device, run_dtype=cfg.dtype, run_seed=cfg.seed)
        except UserError:
            raise
        except Exception as e:  # a model that does not load here: one line, not lm-eval's traceback
            raise UserError(f"--model_args pretrained={source}: the model could not be loaded ({type(e).__name__}: "
                            f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})") from None
        out = cls(lm)
        out.run_config = cfg
        out.run_output = None if args.get("output") is None else str(args["output"])
        out.run_profile = None if args.get("profile") is None else str(args["profile"])
        return out

    @staticmethod
    def key(kind: str, args: Any) -> str:
        """The store key of one request: its type and its arguments (tokens, or text and settings)."""
        return kind + "\x00" + json.dumps(args, sort_keys=True, default=str)

    # -- log-likelihoods (loglikelihood, multiple_choice, and the rolling windows)
    def _loglikelihood_tokens(self, requests: list[tuple[Any, list[int], list[int]]], disable_tqdm: bool = False,
                              override_bs: int | None = None) -> list[tuple[float, bool]]:
        """``(log P(continuation | context), is_greedy)`` per tokenised request, each distinct context run once."""
        self.encoded = [(list(c), list(x)) for _, c, x in requests]
        self.encoded_all.extend(self.encoded)
        keys = [self.key("loglikelihood", [c, x]) for c, x in self.encoded]
        riding = self._riding
        if riding is None:
            todo = sorted({k: i for i, k in enumerate(keys) if k not in self.store}.values())
        else:  # the riders need every request's pass, answered before or not
            todo = list(range(len(keys)))
        if todo:
            if riding is None:
                self.misses += len(todo)
            got = continuation_passes(
                self.reporter_lm.model, self.reporter_lm.adapter, [self.encoded[i][0] for i in todo],
                [self.encoded[i][1] for i in todo], pad_id=self._pad_id(), batch_size=override_bs or self.batch_size,
                max_length=self.max_length, riders=riding[0] if riding else (),
                prompt_from=riding[1] if riding else None)
            if riding is not None:
                self.passes = got
            for i, (ll, greedy) in zip(todo, got.scores):
                if ll != ll:  # NaN: damaged weights, or a dtype the model does not run in
                    raise UserError(f"model '{self.reporter_lm.spec.name}': the model gives NaN log-likelihoods; "
                                    "its weights are damaged or it does not run in this dtype")
                self.store[keys[i]] = [ll, greedy]
        return [(float(self.store[k][0]), bool(self.store[k][1])) for k in keys]

    def loglikelihood_riding(self, requests: list[Any], riders: Sequence[Any], prompt_from: Sequence[int] | None
                             ) -> tuple[list[tuple[float, bool]], ContinuationPasses]:
        """lm-eval's ``loglikelihood`` of ``requests`` with collectors riding the passes
        (:func:`~reporter.instrument.continuations.continuation_passes`): the answers, and what the passes measured
        (its ``seen`` and ``prompt_from`` index ``requests``).
        """
        self._riding, self.passes = (riders, prompt_from), None
        try:
            res = self.loglikelihood(requests, disable_tqdm=True)
        finally:
            self._riding = None
        assert self.passes is not None
        return res, self.passes

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.eot_token_id)

    # -- generation
    def generation_settings(self, gen_kwargs: dict[str, Any]) -> tuple[list[str], int]:
        """lm-eval's stop sequences (with the EOS text) and token budget of one request's ``gen_kwargs``.

        Reporter decodes greedily: a task asking for sampling is refused in one line.
        """
        kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
        until = handle_stop_sequences(kwargs.pop("until", None), eos=self.tok_decode(self.eot_token_id,
                                                                                      skip_special_tokens=False))
        max_gen = int(kwargs.pop("max_gen_toks"))
        if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) > 0.0:
            raise UserError(f"an lm-eval task asks for sampling (generation_kwargs {gen_kwargs}); reporter decodes "
                            "greedily: override it with lm_eval_config: {generation_kwargs: {do_sample: false, "
                            "temperature: 0}}")
        return until, max_gen

    def context_ids(self, context: str, max_gen: int) -> list[int]:
        """The context's tokens as lm-eval's ``hf`` model encodes it for generation (left-truncated to fit)."""
        ids = self.tok_encode(context)
        keep = self.max_length - max_gen
        return ids[-keep:] if keep > 0 and len(ids) > keep else ids

    def generate_batch(self, requests: Sequence[tuple[str, dict[str, Any]]], collectors: Sequence[Any] = (),
                       fused: bool = False) -> tuple[list[str], list[Generation]]:
        """Greedy answers to ``(context, gen_kwargs)`` requests that share their ``gen_kwargs``, one batch:
        the texts lm-eval gets (cut at its stop sequences by its own post-processing) and the generations.

        With ``fused`` the step collectors ride the generation's forward passes.
        """
        until, max_gen = self.generation_settings(requests[0][1])
        ids = [self.context_ids(c, max_gen) for c, _ in requests]
        try:
            if fused:
                gens = generate_collecting(self.reporter_lm, ids, max_new_tokens=max_gen, stop=until,
                                           collectors=collectors)
            else:
                gens = generate(self.reporter_lm, ids, max_new_tokens=max_gen, stop=until, batch_size=len(ids))
        except FloatingPointError:
            raise UserError(f"model '{self.reporter_lm.spec.name}': the model gives NaN or infinite logits; its "
                            "weights are damaged or it does not run in this dtype") from None
        texts = [postprocess_generated_text(generation=g.text, stop=until, think_end_token=None) for g in gens]
        for (c, kw), t in zip(requests, texts):
            self.store[self.key("generate_until", [c, kw])] = t
        return texts, gens

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """lm-eval's ``generate_until``: each answer from the store, the missing ones generated greedily."""
        args = [tuple(r.args) for r in requests]
        keys = [self.key("generate_until", [c, kw]) for c, kw in args]
        todo = [i for i, k in enumerate(keys) if k not in self.store]
        groups: dict[str, list[int]] = {}
        for i in todo:
            groups.setdefault(json.dumps(args[i][1], sort_keys=True, default=str), []).append(i)
        for idx in groups.values():
            idx.sort(key=lambda i: -len(args[i][0]))
            for b in range(0, len(idx), self.batch_size):
                chunk = idx[b:b + self.batch_size]
                self.misses += len(chunk)
                self.generate_batch([args[i] for i in chunk])
        return [str(self.store[k]) for k in keys]

    def can_fuse(self) -> str | None:
        """Why the collectors cannot ride this model's generation (None: they can)."""
        return fusable_generation(self.reporter_lm)


def _as_written(line: str, written: dict[str, str]) -> str:
    """A models-YAML line about ``models[0].KEY`` named by the option the user wrote (``--model_args dtype``,
    ``--batch_size``).

    >>> _as_written("--model_args: models[0].dtype: 'fp8' is not valid", {"dtype": "--model_args dtype"})
    "--model_args dtype: 'fp8' is not valid"
    """
    head = "--model_args: models[0]."
    if line.startswith(head):
        key, _, rest = line[len(head):].partition(":")
        return f"{written.get(key, '--model_args ' + key)}:{rest}"
    return line

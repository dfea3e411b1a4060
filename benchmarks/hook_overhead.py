"""Cost of MUI's in-pass computation: the hooked pass vs the plain forward pass, same batch.

A random-initialised model of a real shape; one batch of ``--batch`` x ``--seq`` tokens whose
last ``--response`` tokens are the response. Every variant is the SAME call,
``reporter.instrument.hooked_pass.hooked_pass`` (no KV cache, inference mode, full logits), with no
collector ("plain") or with one :class:`reporter.collect.collectors.mui.MUICollector` per mode; so the ratio is
exactly the cost of the collector. After ``--warmup`` rounds, ``--repeats`` rounds run every
variant once each (order rotated per round); reported times are medians.

Peak memory, per variant, in one extra untimed pass:

* cuda: ``torch.cuda.max_memory_allocated()`` after ``reset_peak_memory_stats()`` (it
  includes the weights and the batch, which are resident before the pass).
* cpu: the CPU allocator's peak of live tensor bytes during the pass, from the torch
  profiler's memory events (``profile_memory=True``: every allocation/free with its size,
  summed in time order), plus the bytes resident before the pass (parameters, buffers,
  batch) — the same quantity as ``max_memory_allocated`` on GPU. RSS is not used: the malloc
  arena makes it lag and it cannot separate the pass from the rest of the process.
  ``peak_extra_mb_*`` is the in-pass part alone (activations, logits, collector work).

With ``--sae-features N`` two more variants run: ``sae`` (one random N-feature SAE on the
residual stream after the middle layer, :class:`reporter.collect.collectors.sae.SAECollector`)
and ``score+sae`` (neuron MUI and feature MUI in the same pass); ``ratio_sae_over_score`` is
the cost of adding the SAE to the neuron-only pass.

Usage::

    python benchmarks/hook_overhead.py --shape smollm2-135m --device cpu --json
    python benchmarks/hook_overhead.py --shape smollm2-135m --modes score --sae-features 16384 --json
    python benchmarks/hook_overhead.py --shape llama-3.1-8b --device cuda --dtype bfloat16 --json
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import json
import os
import platform
import statistics
import sys
import time

import torch

from reporter.collect.collectors.mui import MUICollector
from reporter.instrument.hooked_pass import PassBatch, hooked_pass
from reporter.metrics.mui import MODES
from reporter.models.adapters import get_adapter

SHAPES = {
    # SmolLM2-135M
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True,
                         max_position_embeddings=8192, rope_theta=100000.0),
    # Llama-3.1-8B
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False,
                         max_position_embeddings=131072, rope_theta=500000.0),
    # smoke test
    "tiny": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=True),
}
TARGETS = {"cpu": {"score": 1.3, "activation": 1.1, "peak_mem": 1.25},
           "cuda": {"score": 1.15, "activation": 1.05, "peak_mem": 1.25}}


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(shape: str, device: str, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[shape])
    torch.manual_seed(0)
    with torch.device(device), _default_dtype(dtype):  # initialise directly on the device, in dtype
        model = LlamaForCausalLM(cfg)
    return model.to(device=device, dtype=dtype).eval()


def make_batch(vocab: int, batch: int, seq: int, response: int, device: str) -> PassBatch:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    am = torch.ones_like(ids)
    rm = torch.zeros_like(ids, dtype=torch.bool)
    rm[:, seq - response:] = True
    return PassBatch(ids.to(device), am.to(device), rm.to(device))


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


_SAE: list = []  # the benchmark's random SAE (built once in main)


def random_sae(d_model: int, n_features: int, layer: int, device: str):
    """A random ReLU SAE of ``n_features`` features on ``layer``'s output (weights as SAELens keeps them: fp32)."""
    from reporter.models.sae import SAE

    g = torch.Generator().manual_seed(2)
    W = torch.randn(d_model, n_features, generator=g) / d_model ** 0.5
    return SAE("random", layer, "resid_post", "standard", W, torch.full((n_features,), -0.5), torch.zeros(d_model),
               None, True, "").to(device)


def _collectors(variant: str, top_ratio: float):
    """``plain``; a MUI mode; ``score+lpp`` (MUI score + the LPP signature collector over the
    whole sequence); ``full`` (score + LPP + token log-probs: everything the run's pass feeds).
    """
    if variant == "plain":
        return []
    if variant in ("sae", "score+sae"):
        from reporter.collect.collectors.sae import SAECollector

        cols = [SAECollector(_SAE, rho=0.9)]
        return cols + ([MUICollector(top_ratio=top_ratio, mode="score")] if variant == "score+sae" else [])
    if variant in ("score+lpp", "full"):
        from reporter.collect.collectors.logprobs import TokenLogProbCollector
        from reporter.collect.collectors.lpp import LPPCollector

        cols = [MUICollector(top_ratio=top_ratio, mode="score"), LPPCollector(context=_SEQ[0], min_tokens=1)]
        return cols + ([TokenLogProbCollector()] if variant == "full" else [])
    return [MUICollector(top_ratio=top_ratio, mode=variant)]


_SEQ = [512]


def run_once(model, adapter, batch, variant, top_ratio, device) -> tuple[float, float]:
    """(wall ms, process CPU ms) of one pass."""
    cols = _collectors(variant, top_ratio)
    _sync(device)
    c0, t0 = time.process_time(), time.perf_counter()
    logits = hooked_pass(model, adapter, batch, cols)
    _sync(device)
    ms, cpu_ms = (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3
    del logits
    return ms, cpu_ms


def _resident_bytes(model, batch: PassBatch) -> int:
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() not in seen:  # tied weights count once
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    for t in (batch.input_ids, batch.attention_mask, batch.response_mask):
        total += t.numel() * t.element_size()
    return total


def _sae_bytes() -> int:
    """The SAE's own tensors: resident like weights, counted only for the variants that use it."""
    return sum(t.numel() * t.element_size() for s in _SAE for t in (s.W_enc, s.b_enc, s.b_dec, s.threshold)
               if t is not None)


def peak_memory(model, adapter, batch, variant, top_ratio, device) -> tuple[int, int]:
    """(peak bytes including what is resident before the pass, peak bytes allocated by the pass).

    The SAE's weights count as resident for the ``sae`` variants only (on cuda they are allocated
    for the whole benchmark, so they are subtracted from the other variants).
    """
    uses_sae = "sae" in variant
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        logits = hooked_pass(model, adapter, batch, _collectors(variant, top_ratio))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        del logits
        return peak - (0 if uses_sae else _sae_bytes()), peak - base
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        logits = hooked_pass(model, adapter, batch, _collectors(variant, top_ratio))
    del logits
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort(key=lambda e: e.start_ns())
    cur = extra = 0
    for e in events:
        cur += e.nbytes()
        extra = max(extra, cur)
    return _resident_bytes(model, batch) + (_sae_bytes() if uses_sae else 0) + extra, extra


def machine_info(device: str) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    try:
        import transformers
        info["transformers"] = transformers.__version__
    except Exception:  # pragma: no cover
        pass
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu_model"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    except OSError:
        info["cpu_model"] = platform.processor() or "?"
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                    help="default: float32 on cpu, bfloat16 on cuda")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--response", type=int, default=300)
    ap.add_argument("--top-ratio", type=float, default=0.001)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--extras", default="", help="comma-separated extra variants: score+lpp, full "
                    "(LPP's cost is reported as ratio_lpp_over_score)")
    ap.add_argument("--sae-features", type=int, default=0,
                    help="add the variants sae and score+sae with one random SAE of this many features")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: all CPUs)")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory passes")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    args = ap.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but CUDA is not available", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device == "cuda" else "float32"))
    modes = [m for m in args.modes.split(",") if m] + [e for e in args.extras.split(",") if e]
    _SEQ[0] = args.seq
    if args.sae_features:
        modes += ["sae", "score+sae"]
    variants = ["plain"] + modes
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else print

    t0 = time.perf_counter()
    model = build_model(args.shape, args.device, dtype)
    adapter = get_adapter(model)
    if args.sae_features:
        _SAE[:] = [random_sae(adapter.d_model, args.sae_features, adapter.n_layers // 2, args.device)]
    batch = make_batch(model.config.vocab_size, args.batch, args.seq, args.response, args.device)
    log(f"model {args.shape} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M params, {dtype}) "
        f"built in {time.perf_counter() - t0:.1f}s on {args.device}, threads={torch.get_num_threads()}")

    for _ in range(args.warmup):
        for v in variants:
            run_once(model, adapter, batch, v, args.top_ratio, args.device)
    times = {v: [] for v in variants}
    cpu_times = {v: [] for v in variants}
    for r in range(args.repeats):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for v in order:
            ms, cpu_ms = run_once(model, adapter, batch, v, args.top_ratio, args.device)
            times[v].append(ms)
            cpu_times[v].append(cpu_ms)
        log(f"round {r + 1}/{args.repeats}: " + ", ".join(f"{v} {times[v][-1]:.0f} ms" for v in variants))
    med = {v: statistics.median(ts) for v, ts in times.items()}
    cpu_med = {v: statistics.median(ts) for v, ts in cpu_times.items()}

    res = {"shape": args.shape, "device": args.device, "dtype": str(dtype).replace("torch.", ""),
           "batch": args.batch, "seq": args.seq, "response": args.response, "top_ratio": args.top_ratio,
           "repeats": args.repeats, "warmup": args.warmup, "plain_ms": round(med["plain"], 2)}
    for m in modes:
        res[f"{m}_ms"] = round(med[m], 2)
        res[f"ratio_{m}"] = round(med[m] / med["plain"], 4)
    if "score+lpp" in modes and "score" in modes:  # issue target: LPP adds at most 10% to the hooked pass
        res["ratio_lpp_over_score"] = round(med["score+lpp"] / med["score"], 4)
        res["min_ratio_lpp_over_score"] = round(min(times["score+lpp"]) / min(times["score"]), 4)
    if "score+sae" in modes and "score" in modes:  # issue target: the SAE adds at most 5% to the neuron-only pass
        res["sae_features"] = args.sae_features
        res["ratio_sae_over_score"] = round(med["score+sae"] / med["score"], 4)
        res["min_ratio_sae_over_score"] = round(min(times["score+sae"]) / min(times["score"]), 4)
    for m in modes:  # least-disturbed run: robust to other processes on a shared machine
        res[f"min_ratio_{m}"] = round(min(times[m]) / min(times["plain"]), 4)
    res["times_ms"] = {v: [round(t, 2) for t in ts] for v, ts in times.items()}
    if args.device == "cpu":  # process CPU time: less sensitive to other processes on a shared machine
        res["cpu_plain_ms"] = round(cpu_med["plain"], 2)
        for m in modes:
            res[f"cpu_ratio_{m}"] = round(cpu_med[m] / cpu_med["plain"], 4)
        res["cpu_times_ms"] = {v: [round(t, 2) for t in ts] for v, ts in cpu_times.items()}
        res["loadavg_end"] = os.getloadavg()
    if not args.no_memory:
        res["peak_mem_method"] = ("torch.cuda.max_memory_allocated" if args.device == "cuda" else
                                  "torch.profiler CPU allocator events (peak live bytes) + resident weights/batch")
        peaks = {v: peak_memory(model, adapter, batch, v, args.top_ratio, args.device) for v in variants}
        res["peak_mem_mb_plain"] = round(peaks["plain"][0] / 2**20, 1)
        res["peak_extra_mb_plain"] = round(peaks["plain"][1] / 2**20, 1)
        for m in modes:
            res[f"peak_mem_mb_{m}"] = round(peaks[m][0] / 2**20, 1)
            res[f"peak_extra_mb_{m}"] = round(peaks[m][1] / 2**20, 1)
            res[f"peak_mem_ratio_{m}"] = round(peaks[m][0] / peaks["plain"][0], 4)
            res[f"peak_extra_ratio_{m}"] = round(peaks[m][1] / max(peaks["plain"][1], 1), 4)
    tg = TARGETS[args.device]
    res["targets"] = {"ratio_score": tg["score"], "ratio_activation": tg["activation"], "peak_mem_ratio_score": tg["peak_mem"]}
    res["meets_targets"] = all(res.get(k, 0) <= v for k, v in res["targets"].items() if k in res)
    res["machine"] = machine_info(args.device)

    if args.json:
        print(json.dumps(res))
    else:
        print(f"plain forward: {med['plain']:.1f} ms (median of {args.repeats})")
        for m in modes:
            line = f"{m:>12}: {med[m]:8.1f} ms  ratio {res[f'ratio_{m}']:.3f}"
            if not args.no_memory:
                line += f"  peak mem ratio {res[f'peak_mem_ratio_{m}']:.3f} (in-pass {res[f'peak_extra_ratio_{m}']:.3f})"
            print(line)
        print("meets targets:", res["meets_targets"], res["targets"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

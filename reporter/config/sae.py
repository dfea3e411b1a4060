"""The ``sae:`` block: which sparse autoencoders MUI over features reads (profile ``mui.sae`` or per model).

::

    mui:
      unit: sae                 # neurons (default) | sae | both (one pass computes both)
      sae:
        path: ./saes/gemma-scope-2b-pt-res/layer_{layer}/width_16k/average_l0_71   # or params.npz
        layers: [12]            # {layer} in path/id is replaced by each; required for params.npz
        hook: resid_post        # resid_post | resid_pre | mlp_out; SAELens cfg.json says it itself
        rho: 0.9                # a feature is key at >= rho x the sample's strongest feature

or ``release: gemma-scope-2b-pt-res-canonical`` with ``id: layer_{layer}/width_16k/canonical``
(loaded through ``sae-lens`` when it is installed and online). A model of the models YAML may
carry its own ``sae:`` block, which replaces the profile's for that model.

>>> p = Problems("profile.yaml")
>>> cfg = parse_sae(p, "mui.sae", {"release": "r", "id": "layer_{layer}", "layers": [3, 5]}, Path("."))
>>> cfg.layers, p.lines
((3, 5), [])
>>> _ = parse_sae(p, "mui.sae", {"path": "nowhere.npz", "layers": [1]}, Path("/tmp"))
>>> p.lines[0]
"profile.yaml: mui.sae.path: SAE file '/tmp/nowhere.npz' does not exist"
>>> _ = parse_sae(p, "mui.sae", {"release": "r", "id": "layer_{layer}/width_16k"}, Path("."))
>>> p.lines[-1]
'profile.yaml: mui.sae.layers: is required when path or id contains {layer}: list the layers, e.g. layers: [12]'
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import user_path
from .files import Problems, short

__all__ = ["SAEConfig", "SAE_HOOKS", "MUI_UNITS", "parse_sae"]

#: the hook points an SAE can read (TransformerLens names without ``blocks.L.hook_``)
SAE_HOOKS = ("resid_post", "resid_pre", "mlp_out")
#: what MUI counts: FFN neurons, SAE features, or both in the same pass
MUI_UNITS = ("neurons", "sae", "both")
SAE_KEYS = ("path", "release", "id", "layers", "hook", "rho")


@dataclass(frozen=True)
class SAEConfig:
    """Where the SAEs are and how features become key (see the module docstring)."""

    path: str | None = None
    release: str | None = None
    id: str | None = None
    layers: tuple[int, ...] = ()
    hook: str | None = None
    rho: float = 0.9


def parse_sae(p: Problems, key: str, v: Any, base_dir: Path, *, recorded: bool = False) -> SAEConfig | None:
    """Validate an ``sae:`` mapping; ``recorded`` (a manifest's copy) skips the file checks."""
    if not isinstance(v, dict):
        p.add(key, f"must be a mapping with path (or release and id), layers, hook, rho; got {short(v)}")
        return None
    n0 = len(p.lines)
    p.unknown_keys(key, v, SAE_KEYS)
    for k in ("path", "release", "id", "hook"):
        if v.get(k) is not None and not isinstance(v[k], str):
            p.add(f"{key}.{k}", f"must be a string, got {short(v[k])}")
    if (v.get("path") is None) == (v.get("release") is None):
        p.add(key, "give exactly one of path (a SAELens directory or a Gemma Scope params.npz) and release "
                   "(a sae-lens hub release, with id)")
    if v.get("release") is not None and not v.get("id"):
        p.add(f"{key}.id", "is required with release (e.g. layer_{layer}/width_16k/canonical)")
    layers = v.get("layers", [])
    if not isinstance(layers, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                               for x in layers):
        p.add(f"{key}.layers", f"must be a list of layer indices (non-negative integers), got {short(layers)}")
        layers = []
    elif len(set(layers)) != len(layers):
        p.add(f"{key}.layers", f"lists a layer twice: {layers}")
    if not layers and any("{layer}" in str(v.get(k) or "") for k in ("path", "id")):
        p.add(f"{key}.layers", "is required when path or id contains {layer}: list the layers, e.g. layers: [12]")
    if v.get("hook") is not None and v["hook"] not in SAE_HOOKS:
        p.add(f"{key}.hook", f"{short(v['hook'])} is not valid; use one of {', '.join(SAE_HOOKS)}")
    rho = v.get("rho", 0.9)
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0 < rho <= 1:
        p.add(f"{key}.rho", f"must be a number in (0, 1], got {short(rho)}")
    path = v.get("path")
    if isinstance(path, str) and len(p.lines) == n0:
        if len(layers) > 1 and "{layer}" not in path:
            p.add(f"{key}.path", "several layers need one SAE each: put {layer} in the path")
        path = str(user_path(path) if user_path(path).is_absolute() else (base_dir / path).resolve())
        if not recorded:
            for layer in layers or [None]:
                one = Path(path.replace("{layer}", str(layer)))
                if not one.exists():
                    p.add(f"{key}.path", f"SAE file '{one}' does not exist")
                elif one.is_file() and one.suffix == ".npz" and not layers:
                    p.add(f"{key}.layers", "a params.npz SAE records no layer: give layers: [L]")
                elif one.is_dir() and not (one / "cfg.json").is_file():
                    p.add(f"{key}.path", f"'{one}' has no cfg.json; a SAE directory must be in SAELens format "
                                         "(cfg.json + sae_weights.safetensors)")
    if len(p.lines) > n0:
        return None
    return SAEConfig(path=path, release=v.get("release"), id=v.get("id"), layers=tuple(layers), hook=v.get("hook"),
                     rho=float(rho))


def check_sae(cfg: Any, profile: Any) -> None:
    """Every model has SAEs when the profile's ``mui.unit`` needs them; else one :class:`ConfigError` line per model.

    ``cfg`` is a :class:`~reporter.config.RunConfig`, ``profile`` a :class:`~reporter.config.Profile`.
    """
    mui = profile.mui
    if mui.unit not in ("sae", "both") or mui.sae is not None:
        return
    p = Problems(str(cfg.path or "<models>"))
    for i, m in enumerate(cfg.models):
        if m.sae is None:
            p.add(f"models[{i}].sae", f"is required when the profile's mui.unit is {mui.unit} (or give mui.sae "
                                      "in the profile)")
    p.raise_if_any()

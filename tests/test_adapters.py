"""Every adapter family: the captured down-projection input is the MLP's neuron activation."""
import pytest
import torch

from reporter.errors import UserError
from reporter.instrument.hooks import HookSet
from reporter.models.adapters import get_adapter, supported_families
from reporter.models.random_archs import RANDOM_ARCHS

from .conftest import tiny_model

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "gpt2", "gpt_neox", "opt"]


def _mlp_input_module(family, layer):
    return layer.fc1 if family == "opt" else (layer.mlp.c_fc if family == "gpt2" else layer.mlp)


def _manual_activation(family, layer, x):
    """Recompute the neuron activation vector from the MLP input, written out per family."""
    if family == "opt":
        return layer.activation_fn(layer.fc1(x))
    if family == "gpt2":
        return layer.mlp.act(layer.mlp.c_fc(x))
    if family == "gpt_neox":
        return layer.mlp.act(layer.mlp.dense_h_to_4h(x))
    mlp = layer.mlp
    if family == "phi3":
        gate, up = mlp.gate_up_proj(x).chunk(2, dim=-1)
        return mlp.activation_fn(gate) * up
    return mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)


@pytest.mark.parametrize("family", FAMILIES)
def test_down_proj_input_is_the_neuron_activation(family):
    model = tiny_model(family)
    ad = get_adapter(model)
    assert ad.n_layers == 2 and ad.d_ff == 96 and ad.d_model == 64
    assert ad.gated == (family not in ("gpt2", "gpt_neox", "opt"))
    W = ad.down_weight(0)
    assert W.shape == (64, 96)
    assert ad.unembedding().shape == (211, 64)
    captured_in, captured_act = {}, {}
    with HookSet() as hs:
        for i, layer in enumerate(ad.layers):
            hs.on_input(_mlp_input_module(family, layer), lambda x, i=i: captured_in.__setitem__(i, x.clone()))
            hs.on_input(ad.down_proj(i), lambda x, i=i: captured_act.__setitem__(i, x.clone()))
        ids = torch.randint(0, 211, (2, 9), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            model(input_ids=ids)
    for h in (ad.down_proj(0)._forward_pre_hooks,):
        assert len(h) == 0  # hooks removed
    with torch.no_grad():
        for i, layer in enumerate(ad.layers):
            manual = _manual_activation(family, layer, captured_in[i])
            assert captured_act[i].shape[-1] == 96
            torch.testing.assert_close(captured_act[i], manual, rtol=1e-5, atol=1e-6)
            # the down projection maps the activation to the MLP output: W_down @ a (+ bias)
            out = ad.down_proj(i)(captured_act[i])
            bias = getattr(ad.down_proj(i), "bias", None)
            ref = captured_act[i] @ ad.down_weight(i).T + (0 if bias is None else bias)
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_every_family_is_registered_and_buildable():
    assert set(FAMILIES) <= set(RANDOM_ARCHS)
    for fam in FAMILIES:
        assert fam in supported_families()


def test_unsupported_architecture_lists_the_supported_ones():
    from transformers import BloomConfig, BloomForCausalLM

    m = BloomForCausalLM(BloomConfig(hidden_size=32, n_layer=1, n_head=4, vocab_size=50))
    with pytest.raises(UserError) as e:
        get_adapter(m)
    assert "architecture 'bloom' is not supported" in str(e.value)
    assert "llama" in str(e.value) and "gpt_neox" in str(e.value)

"""The Keras decoder (model/decoder.py) against `transformers` (issue 26): GPT-2 and GPT-Neo checkpoints
built here with random weights (the TinyStories-1M shape among them: GPT-Neo, d 64, 8 layers, 16 heads,
local attention on alternate layers), loaded from their saved directory; logits equal to float precision,
and decoding over the KV cache equal to recomputing the prefix."""

import json

import numpy as np
import pytest

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.decoder import KVCache, greedy_continuation
from tflm_mcubert.model.decoder_import import load_decoder

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 97


def _perturbed(model, seed: int):
    """Every parameter moved off HF's init (LayerNorm ones/zeros included), so a swapped or dropped tensor shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


def gpt2(tmp_path, **overrides):
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, **overrides)
    torch.manual_seed(0)
    model = _perturbed(transformers.GPT2LMHeadModel(config), 1)
    model.save_pretrained(tmp_path / "gpt2")
    return model, tmp_path / "gpt2"


def gpt_neo(tmp_path, *, hidden=32, layers=2, heads=4, window=5, name="neo"):
    config = transformers.GPTNeoConfig(
        vocab_size=VOCAB,
        max_position_embeddings=64,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        attention_types=[[["global", "local"], layers // 2]],
        window_size=window,
    )
    torch.manual_seed(0)
    model = _perturbed(transformers.GPTNeoForCausalLM(config), 2)
    model.save_pretrained(tmp_path / name)
    return model, tmp_path / name


def _ids(batch=2, length=24, seed=0):
    return np.random.default_rng(seed).integers(0, VOCAB, size=(batch, length)).astype(np.int64)


def _assert_parity(hf, ckpt):
    ours, _ = load_decoder(str(ckpt))
    ids = _ids()
    with torch.no_grad():
        want = hf(torch.tensor(ids)).logits.numpy()
    got = np.asarray(ours(ids.astype(np.int32)))
    np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max(), rtol=0)
    return ours


def test_gpt2_logits_equal_transformers(tmp_path):
    _assert_parity(*gpt2(tmp_path))


def test_gpt2_with_layer_scaled_attention_equals_transformers(tmp_path):
    _assert_parity(*gpt2(tmp_path, scale_attn_by_inverse_layer_idx=True, activation_function="gelu"))


def test_gpt_neo_with_a_local_window_shorter_than_the_text_equals_transformers(tmp_path):
    _assert_parity(*gpt_neo(tmp_path, window=5))


def test_the_tinystories_1m_shape_equals_transformers(tmp_path):
    _assert_parity(*gpt_neo(tmp_path, hidden=64, layers=8, heads=16, window=256, name="tinystories"))


@pytest.mark.parametrize("family", [gpt2, gpt_neo])
def test_decoding_over_the_cache_equals_recomputing_the_prefix(tmp_path, family):
    hf, ckpt = family(tmp_path)
    ours, _ = load_decoder(str(ckpt))
    ids = _ids(batch=1, length=20, seed=3).astype(np.int32)
    full = np.asarray(ours(ids))[0]
    logits, cache = ours.step(ids[:, :7], KVCache.empty(ours.config))  # a prompt of 7, then one by one
    steps = [np.asarray(logits)[0]]
    for t in range(7, 20):
        logits, cache = ours.step(ids[:, t : t + 1], cache)
        steps.append(np.asarray(logits)[0])
    np.testing.assert_allclose(np.concatenate(steps), full, atol=1e-5 * np.abs(full).max(), rtol=0)
    assert cache.length == 20
    # Greedy decoding through the cache is the transformers model's greedy generation.
    prompt = ids[0, :5].tolist()
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=0)[0, 5:]
    assert greedy_continuation(ours, prompt, 8) == want.tolist()


def test_a_context_longer_than_the_positions_is_refused(tmp_path):
    ours, _ = load_decoder(str(gpt2(tmp_path)[1]))
    with pytest.raises(UserError, match="holds 64 positions; this needs 65"):
        ours(np.zeros((1, 65), np.int32))


def test_an_untied_head_a_missing_tensor_and_a_foreign_model_are_refused_by_name(tmp_path):
    from safetensors.numpy import load_file, save_file

    _, ckpt = gpt2(tmp_path)
    weights = load_file(ckpt / "model.safetensors")
    untied = dict(weights, **{"lm_head.weight": weights["transformer.wte.weight"] + 1})
    save_file(untied, ckpt / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UserError, match="lm_head is not tied"):
        load_decoder(str(ckpt))
    save_file({k: v for k, v in weights.items() if "h.1.mlp.c_fc.weight" not in k}, ckpt / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip
    with pytest.raises(UserError, match=r"missing tensors \['h.1.mlp.c_fc.weight'\]"):
        load_decoder(str(ckpt))
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(UserError, match="model_type 'llama' is not supported: this tool reads BERT encoders"):
        load_decoder(str(ckpt))

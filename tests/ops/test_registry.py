"""The op registry: every OpDef agrees with the contract, the C API and the TFLM binding, and no module
outside ops/ switches on an op's name (the allowlist below only shrinks)."""

from __future__ import annotations

import ast
import re
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

# Words that equal an op kind but name something else, where they appear as a key or in a comparison:
# (module, word) -> what they are. Review an addition here as you would an op switch.
NOT_OP_KINDS = {
    ("cli/tflm_check.py", "head"): "TFLM's arena head (and tail) section",
    ("export/pipeline.py", "embedding"): "report.json's params.embedding: the word-table parameter count",
    ("model/hf_import.py", "embedding"): "a searched checkpoint's compression record field",
}
# Calls whose argument is a key: a kind passed to them selects an op as a subscript would.
_LOOKUPS = {"get", "op", "op_of", "pop", "setdefault"}


def _selects(node: ast.AST, parents: dict) -> bool:
    """Whether a string constant is used to select or compare: a comparison operand, a subscript, a dict
    key, a lookup call's argument or a match pattern (directly or inside a tuple/list/set there)."""
    parent = parents.get(node)
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, (ast.Compare, ast.Subscript, ast.MatchValue)):
        return True
    if isinstance(parent, ast.Dict):
        return any(key is node for key in parent.keys)
    if isinstance(parent, ast.Call):
        func = parent.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in _LOOKUPS and node in parent.args
    return False


def op_kind_names(root: Path = PACKAGE) -> list[tuple[str, int, str]]:
    """(module, line, what) of every place outside ops/ that names an op: a custom code (its string or its
    contract constant, attribute or import), a kind string used to select or compare, an OPS[...] or
    BY_KIND[...] subscript (registry.op(code) is the lookup)."""
    codes = set(OPS)
    kinds = {d.kind for d in OPS.values()}
    constants = {n for n, v in vars(contract).items() if isinstance(v, str) and v in codes}
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("ops/"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            what = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value in codes:
                    what = repr(node.value)
                elif node.value in kinds and _selects(node, parents):
                    if (relative, node.value) not in NOT_OP_KINDS:
                        what = repr(node.value)
            elif isinstance(node, ast.Attribute) and node.attr in constants:
                what = f"contract.{node.attr}"
            elif isinstance(node, ast.ImportFrom) and any(a.name in constants for a in node.names):
                what = "import " + ", ".join(a.name for a in node.names if a.name in constants)
            elif isinstance(node, ast.Subscript) and getattr(node.value, "id", None) in ("OPS", "BY_KIND"):
                what = f"{node.value.id}[...]"
            if what:
                found.append((relative, node.lineno, what))
    return found


def test_no_module_outside_ops_names_an_op():
    found = op_kind_names()
    assert not found, f"ops named outside ops/ (read them from ops/topology.py or registry.op instead): {found}"


def test_every_word_that_is_not_an_op_kind_is_still_there():
    """An entry of NOT_OP_KINDS whose word left its module is stale: remove it."""
    for module, word in NOT_OP_KINDS:
        assert repr(word) in (PACKAGE / module).read_text() or f'"{word}"' in (PACKAGE / module).read_text()


PLANTED = {
    "compare": 'if step.kind == "mlp":\n    pass\n',
    "membership": 'if kind in ("attention", "decoder_mlp"):\n    pass\n',
    "subscript": 'cost = table["causal_attention"]\n',
    "dict key": 'COST = {"lm_head": 1}\n',
    "lookup": 'row = rows.get("embedding", 0)\n',
    "code string": 'CODE = "MCUBERT_MLP"\n',
    "contract constant": "from tflm_mcubert.ops import contract\nCODE = contract.MLP\n",
    "constant import": "from tflm_mcubert.ops.contract import LM_HEAD\n",
    "registry subscript": "from tflm_mcubert.ops.registry import OPS\nMLP = OPS[CODE]\n",
    "match": 'match kind:\n    case "head":\n        pass\n',
}


@pytest.mark.parametrize("planted", list(PLANTED))
def test_the_scan_catches_a_planted_op_name(tmp_path, planted):
    (tmp_path / "schedule").mkdir()
    (tmp_path / "schedule" / "new.py").write_text(PLANTED[planted])
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "mlp.py").write_text('OP = contract.MLP\nKIND = "mlp"\nif x == "mlp":\n    pass\n')
    found = op_kind_names(tmp_path)
    assert found and {module for module, _, _ in found} == {"schedule/new.py"}, found


def test_the_scan_lets_words_that_only_look_like_kinds_pass(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "layers.py").write_text(
        'attention = Layer(name="attention")\nprint("mlp")\nlabel = f"layer0.{kind}"\nNode("embedding", op)\n'
    )
    assert op_kind_names(tmp_path) == []


# The apps that run any exported model of their topology; the layer check is one encoder layer's test.
GENERIC_APPS = ("text_check_main.c", "generate_main.c")
APPS_DIR = Path(__file__).resolve().parents[2] / "examples" / "baremetal" / "src"


def c_op_calls(text: str) -> list[str]:
    """The op entry points (mcubert_<op>_s8, _validate, _get_buffer_size) a C text calls by name."""
    names = {d.c_name for d in OPS.values()}
    pattern = re.compile(r"\bmcubert_(\w+?)_(?:s8|validate|get_buffer_size)\s*\(")
    return [m.group(0) for m in pattern.finditer(text) if m.group(1) in names]


def test_the_bare_metal_apps_run_ops_from_their_node_table_only():
    for name in GENERIC_APPS:
        calls = c_op_calls((APPS_DIR / name).read_text())
        assert not calls, f"{name} calls ops by name (run them through mcubert_app_run): {calls}"


def test_the_c_scan_catches_an_op_called_by_name():
    assert c_op_calls("status = mcubert_lm_head_s8(&p, &w, hidden, top, &c, m);") == ["mcubert_lm_head_s8("]
    assert c_op_calls("mcubert_attention_get_buffer_size (s, d, h, t)") == ["mcubert_attention_get_buffer_size ("]
    assert c_op_calls("mcubert_app_run(nodes, n, values, &c, &what, m); mcubert_bpe_encode(&b)") == []

"""The Flash probes `boards` needs, shipped with the package so that it answers without exporting a model.

`flash_budget.measure_shape` reads a model's Flash items off the .tflite of a random-weight twin, and
`boards` measures the default export's Flash by exporting BERT-tiny and BERT-mini: each is an export, which
loads TensorFlow, and together they took `boards` 12 s. Those exports depend only on the package's code, so
their results ship as data/flash_probes.json: the twins of the configurations `boards` prices (BERT-tiny and
BERT-mini as 2-label classifiers at int8 and int4 weights, the structure probes of
`flash_budget.estimate_shape`) and the default exports' Flash. `flash_budget` and `boards` read a probe from
it when it is there and measure it otherwise, so any other configuration is measured as before.

The file is written by `python -m tflm_mcubert.export.measure_probes`, and a test measures every probe afresh
and compares: a change to the writer that moves a byte fails that test until the file is written again.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

PROBES_FILE = "flash_probes.json"
PRICED_PRESETS = ("bert-tiny", "bert-mini")  # the presets `boards` prices
PRICED_LABELS = 2  # as a sequence classifier, as the default export builds


@functools.lru_cache(maxsize=1)
def shipped() -> dict:
    """The package's probes ({"twins": [...], "default_flash_bytes": {...}}); empty ones when absent."""
    source = resources.files("tflm_mcubert.data").joinpath(PROBES_FILE)
    if not source.is_file():
        return {"twins": [], "default_flash_bytes": {}}
    return json.loads(source.read_text())


def twin_key(key: tuple, embedding_bits: int, weight_bits: int) -> str:
    """One twin's name in the file: its configuration key (flash_budget._shape_key) and widths."""
    return json.dumps([list(key), embedding_bits, weight_bits])


def shipped_twin(key: tuple, embedding_bits: int, weight_bits: int) -> dict | None:
    """A twin's items as `flash_budget._twin_items` returns them, or None when the package has no such probe."""
    name = twin_key(key, embedding_bits, weight_bits)
    items = next((t["items"] for t in shipped()["twins"] if t["twin"] == name), None)
    if items is None:
        return None
    return {
        **items,
        "encoder_ops": tuple(items["encoder_ops"]),
        "layer_savings": {op: tuple(v) for op, v in items["layer_savings"].items()},
    }


def shipped_default_flash(preset: str) -> int | None:
    return shipped()["default_flash_bytes"].get(preset)

"""The package's Flash probes (data/flash_probes.json) are what the exports measure today: every twin and the
default exports' Flash measured afresh equals the shipped file, which `boards` and the Flash budget read
instead of exporting. When this fails, the writer changed: `python -m tflm_mcubert.export.measure_probes`."""

from __future__ import annotations

import json
from importlib import resources

from tflm_mcubert.cli.boards import default_flash_bytes
from tflm_mcubert.export import flash_budget, flash_probes, measure_probes
from tflm_mcubert.model.config import preset


def test_the_shipped_probes_equal_fresh_measurements():
    shipped = json.loads(resources.files("tflm_mcubert.data").joinpath(flash_probes.PROBES_FILE).read_text())
    fresh = json.loads(json.dumps(measure_probes.measure()))
    assert fresh == shipped, "the writer changed: run `python -m tflm_mcubert.export.measure_probes`"


def test_a_shipped_probe_is_read_and_any_other_configuration_measured():
    tiny = preset("bert-tiny", num_labels=2)
    key = flash_budget._shape_key(tiny)
    assert flash_probes.shipped_twin(key, 8, 4) is not None and default_flash_bytes("bert-tiny") > 0
    three_labels = preset("bert-tiny", num_labels=3)
    assert flash_probes.shipped_twin(flash_budget._shape_key(three_labels), 8, 8) is None
    measured = flash_budget.measure_shape(three_labels, 8, (8,))
    assert measured.head_bytes > flash_budget.measure_shape(tiny, 8, (8,)).head_bytes  # one more label's row

"""Measures the Flash probes the package ships (export/flash_probes.py) and writes data/flash_probes.json:

    python -m tflm_mcubert.export.measure_probes

Each probe is an export (TensorFlow loads): the twins of the configurations `boards` prices and
`flash_budget.estimate_shape`'s structure probes, and the default export of each preset `boards` lists.
tests/export/test_flash_probes.py measures them again and compares with the shipped file."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from importlib import resources
from pathlib import Path

from tflm_mcubert.boards import BOARDS
from tflm_mcubert.errors import DoesNotFitError
from tflm_mcubert.export import flash_budget
from tflm_mcubert.export.flash_probes import PRICED_LABELS, PRICED_PRESETS, PROBES_FILE, twin_key
from tflm_mcubert.export.pipeline import ExportRequest, run_export
from tflm_mcubert.model.config import preset

EMBEDDING_BITS = 8


def measured_default_flash(name: str) -> int:
    """Flash of the default export of preset `name` (PRICED_LABELS labels) at flash_budget.FLASH_PROBE_SEQ tokens,
    measured by exporting it."""
    # Flash no model misses, so the export keeps the paper's embedding shape (it scales the shape down only
    # to fit a board: export/board_fit.py) and the figure stays the default export's own.
    largest = dataclasses.replace(max(BOARDS.values(), key=lambda b: b.flash_bytes), flash_bytes=1 << 40)
    with tempfile.TemporaryDirectory(prefix="mcubert-boards-") as tmp:
        out = Path(tmp) / "out"
        request = ExportRequest(
            out, largest, preset=name, num_labels=PRICED_LABELS, seq_len=flash_budget.FLASH_PROBE_SEQ
        )
        try:
            run_export(request)
        except DoesNotFitError:  # the files and the report are written all the same
            pass
        return json.loads((out / "report.json").read_text())["flash_bytes"]


def probe_configs() -> list:
    """The configurations whose twins ship: the presets `boards` prices, and estimate_shape's structure probes."""
    configs = [preset(name, num_labels=PRICED_LABELS) for name in PRICED_PRESETS]
    return configs + [flash_budget.container_probe(h, n, 2, PRICED_LABELS) for h, n in flash_budget.CONTAINER_PROBES]


def measure() -> dict:
    """Every probe measured afresh, in the file's form."""
    twins = []
    for config in probe_configs():
        key = flash_budget._shape_key(config)
        for bits in flash_budget.WIDTHS:
            items = flash_budget.measured_twin_items(config, EMBEDDING_BITS, bits)
            twins.append({"twin": twin_key(key, EMBEDDING_BITS, bits), "items": items})
    return {
        "written_by": "python -m tflm_mcubert.export.measure_probes",
        "twins": twins,
        "default_flash_bytes": {name: measured_default_flash(name) for name in PRICED_PRESETS},
    }


def main() -> int:
    path = Path(str(resources.files("tflm_mcubert.data").joinpath(PROBES_FILE)))
    path.write_text(json.dumps(measure(), indent=1) + "\n")
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

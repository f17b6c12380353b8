"""The clustered word table as the ops that share it see it: MCUBERT_EMBEDDING and MCUBERT_DECODER_EMBEDDING
(looking ids up) and MCUBERT_LM_HEAD (scoring every id). Cluster i owns ids [end_{i-1}, end_i) and stores rows of
rank r_i (r_0 = d) and, for i > 0, the pair4 projection V_i (d outputs, r_i inputs); SPEC 4.1. At int4 storage
(SPEC 4.1.1) a row is packed nibbles, and a cluster-0 row starts with its uint16 row scale.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.ops import contract
from tflm_mcubert.ops.linear import packed_size, unpack_weights
from tflm_mcubert.ops.validation import OpSpecError, check_array, check_int


@dataclasses.dataclass(frozen=True)
class WordCluster:
    start: int
    end: int
    rank: int
    rows: np.ndarray  # int8[end - start, rank] (int4 storage: unpacked)
    projection: np.ndarray | None  # int8[d, rank] (V_i unpacked); None for cluster 0
    row_scale: np.ndarray | None = None  # int4 cluster 0: int64[end - start], the uint16 row scales


def check_word_bits(op: str, bits: int) -> int:
    check_int(op, "word_bits", bits, 4, 8)
    if bits not in contract.EMBEDDING_WORD_BITS:
        raise OpSpecError(op, "word_bits", f"{bits} is not a storage width (4: packed int4, 8: int8)")
    return bits


def unpack_int4(packed: np.ndarray, length: int) -> np.ndarray:
    """uint8/int8[n, ceil(r/2)] -> int8[n, r] (sign-extended nibbles; value 2j low, 2j+1 high; SPEC 4.1.1)."""
    raw = np.asarray(packed).view(np.uint8).astype(np.int16)
    nibbles = np.empty((raw.shape[0], 2 * raw.shape[1]), np.int16)
    nibbles[:, 0::2], nibbles[:, 1::2] = raw & 0xF, raw >> 4
    return ((nibbles[:, :length] ^ 8) - 8).astype(np.int8)


def check_int4_size(op: str, word_rows, row_sizes: list[int], d: int) -> None:
    """A clear message for a word_rows tensor whose size does not fit int4 storage (SPEC 4.1.1)."""
    if isinstance(word_rows, np.ndarray) and word_rows.shape != (sum(row_sizes),):
        raise OpSpecError(
            op,
            "word_rows",
            f"int4 storage of these clusters is {sum(row_sizes)} bytes (cluster 0: rows of "
            f"{contract.INT4_ROW_SCALE_BYTES} + ceil({d}/2) bytes; cluster i: rows of ceil(r_i/2) bytes), "
            f"got shape {tuple(word_rows.shape)}",
        )


def unpack_cluster(op: str, stored: np.ndarray, index: int, rank: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(int8[n, rank] values, int64[n] row scales or None) of one cluster's packed int4 rows."""
    raw = stored.view(np.uint8)
    row_scale = None
    if index == 0:
        row_scale = raw[:, 0].astype(np.int64) | (raw[:, 1].astype(np.int64) << 8)
        raw = raw[:, contract.INT4_ROW_SCALE_BYTES :]
    if rank % 2:
        bad = np.flatnonzero(raw[:, -1] >> 4)
        if bad.size:
            raise OpSpecError(
                op,
                "word_rows",
                f"cluster {index} row {int(bad[0])}: the padding nibble of an odd-length int4 row "
                f"(rank {rank}) must be 0, got {int(raw[bad[0], -1] >> 4)}",
            )
    return unpack_int4(raw, rank), row_scale


def word_clusters(
    op: str, clusters, word_rows, word_projections, d: int, vocab_size: int, bits: int = 8
) -> tuple[WordCluster, ...]:
    """The clusters of the tables at `bits` storage, checked (sizes, ends, ranks, padding) as the kernels check
    them; errors name `op`."""
    table = check_array(op, "clusters", clusters, np.int32)
    if table.ndim != 2 or table.shape[1] != 2 or not 1 <= table.shape[0] <= contract.MAX_CLUSTERS:
        raise OpSpecError(
            op, "clusters", f"expected int32[c, 2] with 1 <= c <= {contract.MAX_CLUSTERS}, got {table.shape}"
        )
    ends, ranks = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    if np.any(ends <= starts) or ends[-1] != vocab_size:
        raise OpSpecError(
            op, "clusters", f"cluster ends must increase strictly and the last must equal vocab_size {vocab_size}"
        )
    if ranks[0] != d or np.any(ranks[1:] < 1) or np.any(ranks[1:] > d):
        raise OpSpecError(op, "clusters", f"rank of cluster 0 must be d={d}; others in [1, d]")
    # Sizes in Python ints: a hostile table cannot wrap the offsets.
    row_bytes = [contract.word_row_bytes(i, int(r), bits) for i, r in enumerate(ranks)]
    row_sizes = [int(n) * b for n, b in zip(ends - starts, row_bytes)]
    proj_sizes = [0] + [packed_size(d, int(r)) for r in ranks[1:]]
    if bits == 4:
        check_int4_size(op, word_rows, row_sizes, d)
    check_array(op, "word_rows", word_rows, np.int8, (sum(row_sizes),))
    check_array(op, "word_projections", word_projections, np.int8, (sum(proj_sizes),))
    views, row_off, proj_off = [], 0, 0
    for i, (start, end, rank) in enumerate(zip(starts, ends, ranks)):
        stored = word_rows[row_off : row_off + row_sizes[i]].reshape(int(end - start), row_bytes[i])
        rows, row_scale = (stored, None) if bits == 8 else unpack_cluster(op, stored, i, int(rank))
        projection = None
        if i > 0:
            packed = word_projections[proj_off : proj_off + proj_sizes[i]]
            projection = unpack_weights(packed, d, int(rank), op=op, field=f"word_projections[{i}]")
        views.append(WordCluster(int(start), int(end), int(rank), rows, projection, row_scale))
        row_off += row_sizes[i]
        proj_off += proj_sizes[i]
    return tuple(views)

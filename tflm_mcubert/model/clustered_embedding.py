"""The deployable compressed word embedding: clustered low-rank tables over a permuted vocabulary.

The vocabulary is permuted so that cluster i is the contiguous id range [cut_{i-1}, cut_i) (cut_{-1} = 0,
cut_{c-1} = vocab size): the device then finds a token's cluster from c-1 cut-offs instead of a
vocab-sized token→cluster map (61 KB as int16 for BERT's 30522 tokens). Cluster 0 is a dense table
[n_0, d]; cluster i > 0 stores U_i [n_i, r_i] and Vᵀ_i [r_i, d], and the embedding of its token j is
U_i[j - cut_{i-1}] · Vᵀ_i. Rank 0 is allowed (its tokens embed to the zero vector), so is an empty
cluster (it stores nothing); a whole-table low-rank embedding is an empty cluster 0 plus one cluster.

The layer takes ids in the *permuted* vocabulary. `permutation[old_id] = new_id` maps the original
tokenizer's ids; `write_permuted_tokenizer` writes a tokenizer that emits the new ids directly.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.clustered_lookup import clustered_lookup, pad_rows
from tflm_mcubert.model.lowrank import factorize, low_rank_factorization
from tflm_mcubert.model.stored_tables import stored_word_vectors

# The stored bytes' arithmetic (Keras-free, for the commands that price without a model): embedding_bytes.py.
from tflm_mcubert.model.embedding_bytes import (  # noqa: E402,F401 (re-exported)
    CLUSTER_ENTRY_BYTES,
    REQUANT_BYTES_PER_CHANNEL,
    cluster_stored_bytes,
    exported_clusters,
    stored_embedding_bytes,
)


# --- vocabulary permutation ----------------------------------------------------------------------------


def permutation_from_assignment(assignment: np.ndarray, num_clusters: int) -> tuple[np.ndarray, list[int]]:
    """Sort tokens by cluster (ties by original id). Returns (permutation old→new, the c-1 cut-offs)."""
    assignment = np.asarray(assignment)
    if assignment.ndim != 1 or (assignment.size and (assignment.min() < 0 or assignment.max() >= num_clusters)):
        raise UserError(f"a token's cluster must be in 0..{num_clusters - 1}")
    order = np.argsort(assignment, kind="stable")  # new id -> old id
    counts = np.bincount(assignment, minlength=num_clusters)
    return invert_permutation(order), [int(c) for c in np.cumsum(counts)[:-1]]


def permutation_from_ranking(ranking: np.ndarray) -> np.ndarray:
    """`ranking[k]` is the old id that gets new id k (e.g. tokens sorted by frequency)."""
    return invert_permutation(np.asarray(ranking))


def check_permutation(permutation) -> np.ndarray:
    """The ids 0..n-1, each exactly once, as int32."""
    permutation = np.asarray(permutation)
    if permutation.ndim != 1 or not np.array_equal(np.sort(permutation), np.arange(permutation.size)):
        raise UserError("not a permutation of the vocabulary ids")
    return permutation.astype(np.int32)


def invert_permutation(permutation) -> np.ndarray:
    permutation = check_permutation(permutation)
    inverse = np.empty_like(permutation)
    inverse[permutation] = np.arange(permutation.size, dtype=np.int32)
    return inverse


def bert_tokenizer_with_vocab(tokens: list[str], like, out_dir: str | Path):
    """A BertTokenizerFast whose id k is tokens[k], with the options and special tokens of `like`; its
    vocab.txt is written to out_dir."""
    from transformers import BertTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab_file = out_dir / "vocab.txt"
    vocab_file.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    options = like.init_kwargs
    # transformers 5 takes the vocabulary as `vocab` and silently ignores a `vocab_file`; 4.x wants `vocab_file`.
    vocab_arg = "vocab" if "vocab" in inspect.signature(BertTokenizerFast.__init__).parameters else "vocab_file"
    tokenizer = BertTokenizerFast(
        **{vocab_arg: str(vocab_file)},
        do_lower_case=options.get("do_lower_case", True),
        tokenize_chinese_chars=options.get("tokenize_chinese_chars", True),
        strip_accents=options.get("strip_accents"),
        unk_token=like.unk_token,
        sep_token=like.sep_token,
        pad_token=like.pad_token,
        cls_token=like.cls_token,
        mask_token=like.mask_token,
        model_max_length=like.model_max_length,
    )
    copy_added_tokens(like, tokenizer, set(tokens))
    tokenizer.backend_tokenizer.model.max_input_chars_per_word = like.backend_tokenizer.model.max_input_chars_per_word
    return tokenizer


def copy_added_tokens(like, tokenizer, kept: set[str]) -> None:
    """`like`'s added tokens that `kept` holds ([URL], <s>, ...: the constructor adds only the five BERT
    ones), each with its flags (normalized, lstrip, ...): the device matches them as `like` does."""
    present = {str(t) for t in tokenizer.added_tokens_decoder.values()}
    extra = [t for t in like.added_tokens_decoder.values() if str(t) in kept and str(t) not in present]
    tokenizer.add_tokens([t for t in extra if not t.special])
    tokenizer.add_tokens([t for t in extra if t.special], special_tokens=True)


def write_permuted_tokenizer(tokenizer, permutation: np.ndarray, out_dir: str | Path):
    """Save a BERT WordPiece tokenizer whose vocab.txt lists the tokens in the new order, and return it.

    Line k of the new vocab.txt is the token whose new id is k, so tokenizing with it yields permuted ids
    directly. Special tokens are found by their text, so [CLS], [SEP], [PAD], ... keep working (at their
    new ids). `AutoTokenizer.from_pretrained(out_dir)` loads the result.
    """

    vocab = tokenizer.get_vocab()
    permutation = check_permutation(permutation)
    if len(vocab) != permutation.size or sorted(vocab.values()) != list(range(permutation.size)):
        raise UserError(
            f"the tokenizer has {len(vocab)} tokens but the embedding's vocabulary has "
            f"{permutation.size}: cannot permute it"
        )
    new_tokens = [""] * permutation.size
    for token, old_id in vocab.items():
        new_tokens[permutation[old_id]] = token
    permuted = bert_tokenizer_with_vocab(new_tokens, tokenizer, out_dir)
    if permuted.get_vocab() != {token: int(permutation[old_id]) for token, old_id in vocab.items()}:
        raise UserError("transformers did not build the permuted tokenizer from its vocab.txt")
    permuted.save_pretrained(str(out_dir))
    return permuted


# --- the layer -----------------------------------------------------------------------------------------


def cluster_boundaries(vocab_size: int, cutoffs) -> list[int]:
    """(0, cut_0, ..., cut_{c-2}, vocab_size), validated: cut-offs non-decreasing inside [0, vocab_size]."""
    bounds = [0, *[int(c) for c in cutoffs], int(vocab_size)]
    if any(lo > hi for lo, hi in zip(bounds[:-1], bounds[1:])):
        raise UserError(f"cut-offs {list(cutoffs)} must be non-decreasing and within 0..{vocab_size}")
    return bounds


class ClusteredLowRankEmbedding(keras.layers.Layer):
    """Clustered low-rank word embedding (see module docstring). Plug into `BertModel(word_lookup=...)`.

    `cutoffs`: the c-1 cluster boundaries in the permuted vocabulary (the paper's "1000,4000,10000").
    `ranks`: the c-1 ranks of clusters 1..c-1 (the paper's "32,8,2"; cluster 0 is dense, rank d). A rank
    above a cluster's token count n_i is lowered to n_i (same function, fewer parameters); an empty
    cluster gets rank 0. `permutation`: old id → new id, or None for the identity. `origin`: how it was made
    ("adaptive", "nas-two-stage", "svd", ...), for the description only.
    """

    def __init__(self, vocab_size: int, dim: int, cutoffs, ranks, *, permutation=None, origin: str = "", **kwargs):
        # A fixed name: Keras numbers unnamed layers per process, and the stock export's tensor names
        # (so its bytes) would depend on how many embeddings were built before.
        kwargs.setdefault("name", "word_lookup")
        super().__init__(**kwargs)
        self.vocab_size, self.dim = int(vocab_size), int(dim)
        self.boundaries = cluster_boundaries(vocab_size, cutoffs)
        ranks = [int(r) for r in ranks]
        if len(ranks) != len(self.boundaries) - 2:
            raise UserError(
                f"{len(self.boundaries) - 1} clusters need {len(self.boundaries) - 2} ranks "
                f"(clusters 1..c-1; cluster 0 is dense), got {ranks}"
            )
        if any(not 0 <= r <= self.dim for r in ranks):
            raise UserError(f"ranks {ranks} must be within 0..{self.dim}")
        self.ranks = tuple(min(r, n) for r, n in zip(ranks, self.cluster_sizes[1:]))
        self.permutation = None if permutation is None else check_permutation(permutation)
        if self.permutation is not None and self.permutation.size != self.vocab_size:
            raise UserError(f"permutation has {self.permutation.size} ids, vocabulary {self.vocab_size}")
        self.origin = origin
        # 8 or 4: the forward sees the tables as the export stores them (`stored_tables`), for a fine-tune
        # that trains what deploys; None: float tables.
        self.storage_bits = None

    # -- structure --
    @property
    def num_clusters(self) -> int:
        return len(self.boundaries) - 1

    @property
    def cutoffs(self) -> list[int]:
        return self.boundaries[1:-1]

    @property
    def cluster_sizes(self) -> list[int]:
        return [b - a for a, b in zip(self.boundaries[:-1], self.boundaries[1:])]

    def build(self, input_shape=None):
        zeros = keras.initializers.Zeros()
        self.table = self.add_weight(name="table_0", shape=(self.cluster_sizes[0], self.dim), initializer=zeros)
        self.us, self.vts = [], []
        for i, (n, r) in enumerate(zip(self.cluster_sizes[1:], self.ranks), start=1):
            self.us.append(self.add_weight(name=f"u_{i}", shape=(n, r), initializer=zeros))
            self.vts.append(self.add_weight(name=f"vt_{i}", shape=(r, self.dim), initializer=zeros))
        super().build(input_shape)

    def call(self, input_ids):
        ids = tf.cast(input_ids, tf.int32)
        if self.storage_bits is not None:
            return stored_word_vectors(self, ids, self.storage_bits)

        def embed_cluster(i, local):
            if i == 0:
                return tf.gather(pad_rows(self.table), local)
            if self.ranks[i - 1] == 0:
                return None
            return tf.matmul(tf.gather(pad_rows(self.us[i - 1]), local), self.vts[i - 1])

        return clustered_lookup(ids, self.boundaries, embed_cluster, self.dim)

    def remap(self, original_ids: np.ndarray) -> np.ndarray:
        """Ids of the original tokenizer → the ids this layer takes."""
        original_ids = np.asarray(original_ids)
        return original_ids if self.permutation is None else self.permutation[original_ids]

    # -- construction --
    @classmethod
    def from_dense(
        cls,
        table: np.ndarray,
        *,
        cutoffs,
        ranks,
        permutation=None,
        method: str = "svd",
        row_fisher: np.ndarray | None = None,
        origin: str | None = None,
        **kwargs,
    ) -> "ClusteredLowRankEmbedding":
        """Compress a dense table [vocab, d] given in the ORIGINAL id order: permute it, then factorize each
        cluster i > 0 at its rank with Alg. 2 ("svd") or FWSVD ("fwsvd", with per-row Fisher importances
        `row_fisher`, also in the original order)."""
        table = np.asarray(table, np.float32)
        layer = cls(
            table.shape[0],
            table.shape[1],
            cutoffs,
            ranks,
            permutation=permutation,
            origin=method if origin is None else origin,
            **kwargs,
        )
        order = np.arange(table.shape[0]) if layer.permutation is None else invert_permutation(layer.permutation)
        table = table[order]
        fisher = None if row_fisher is None else np.asarray(row_fisher)[order]
        b = layer.boundaries
        factors = []
        for i, rank in enumerate(layer.ranks, start=1):
            rows = slice(b[i], b[i + 1])
            if rank == 0:
                factors.append((np.zeros((b[i + 1] - b[i], 0)), np.zeros((0, layer.dim))))
                continue
            weights = None if fisher is None else fisher[rows]
            # A cluster whose tokens the task never touched has no Fisher weight to go by: plain SVD then.
            cluster_method = "svd" if weights is not None and not np.any(weights > 0) else method
            factors.append(factorize(table[rows], rank, method=cluster_method, row_fisher=weights))
        layer.set_arrays(table[b[0] : b[1]], factors)
        return layer

    @classmethod
    def from_assignment(cls, table: np.ndarray, assignment: np.ndarray, ranks, **kwargs):
        """Like `from_dense`, with clusters given as one cluster index per token (original ids)."""
        permutation, cutoffs = permutation_from_assignment(assignment, len(ranks) + 1)
        return cls.from_dense(table, cutoffs=cutoffs, ranks=ranks, permutation=permutation, **kwargs)

    @classmethod
    def from_factors(
        cls, table_0: np.ndarray, factors, *, cutoffs, permutation=None, origin: str = "", **kwargs
    ) -> "ClusteredLowRankEmbedding":
        """From ready arrays: the dense cluster-0 rows and one (U_i, Vᵀ_i) per cluster i > 0."""
        dim = int(np.shape(table_0)[1])
        vocab_size = int(np.shape(table_0)[0]) + sum(int(np.shape(u)[0]) for u, _ in factors)
        ranks = [int(np.shape(u)[1]) for u, _ in factors]
        layer = cls(vocab_size, dim, cutoffs, ranks, permutation=permutation, origin=origin, **kwargs)
        layer.set_arrays(table_0, factors)
        return layer

    def set_arrays(self, table_0: np.ndarray, factors) -> None:
        if not self.built:
            self.build()
        self.table.assign(np.asarray(table_0, np.float32).reshape(self.table.shape))
        for u_var, vt_var, (u, vt), rank in zip(self.us, self.vts, factors, self.ranks):
            u, vt = np.asarray(u, np.float32), np.asarray(vt, np.float32)
            if u.shape[1] > rank:  # rank lowered to the cluster size: U·Vᵀ has rank <= n_i, so this is exact
                u, vt = low_rank_factorization(u @ vt, rank)
            u_var.assign(u.reshape(u_var.shape))
            vt_var.assign(vt.reshape(vt_var.shape))

    # -- plain-array export (for the custom-op exporter) --
    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays = {
            "dim": np.int32(self.dim),
            "boundaries": np.asarray(self.boundaries, np.int32),
            "ranks": np.asarray(self.ranks, np.int32),
            "table_0": np.asarray(self.table.numpy()),
        }
        for i, (u, vt) in enumerate(zip(self.us, self.vts), start=1):
            arrays[f"u_{i}"], arrays[f"vt_{i}"] = np.asarray(u.numpy()), np.asarray(vt.numpy())
        if self.permutation is not None:
            arrays["permutation"] = self.permutation.copy()
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], **kwargs) -> "ClusteredLowRankEmbedding":
        boundaries = [int(b) for b in arrays["boundaries"]]
        layer = cls(
            boundaries[-1],
            int(arrays["dim"]),
            boundaries[1:-1],
            [int(r) for r in arrays["ranks"]],
            permutation=arrays.get("permutation"),
            **kwargs,
        )
        layer.set_arrays(
            arrays["table_0"], [(arrays[f"u_{i}"], arrays[f"vt_{i}"]) for i in range(1, layer.num_clusters)]
        )
        return layer

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            dim=self.dim,
            cutoffs=self.cutoffs,
            ranks=list(self.ranks),
            permutation=None if self.permutation is None else self.permutation.tolist(),
            origin=self.origin,
        )
        return config

    # -- accounting --
    def cluster_params(self) -> list[int]:
        """Stored weights per cluster: n_0·d for the dense one, r_i·(n_i + d) for the others."""
        sizes = self.cluster_sizes
        return [sizes[0] * self.dim] + [r * (n + self.dim) for n, r in zip(sizes[1:], self.ranks)]

    def stored_params(self) -> int:
        """Every weight the device stores (the paper's "Emb Params")."""
        return sum(self.cluster_params())

    def stored_bytes(self, bits: int = 8) -> int:
        """Flash bytes of this embedding in the export, rows stored at `bits` (`stored_embedding_bytes`)."""
        return stored_embedding_bytes(self.cluster_sizes, self.ranks, self.dim, bits)

    def describe(self, bits: int = 8) -> dict:
        """JSON-able summary: clusters as id ranges of the permuted vocabulary, ranks, parameters, and the
        stored bytes with the rows at `bits`."""
        ranks = [self.dim, *self.ranks]
        clusters = [
            {"ids": [a, b], "tokens": b - a, "rank": r, "dense": i == 0, "params": p}
            for i, (a, b, r, p) in enumerate(
                zip(self.boundaries[:-1], self.boundaries[1:], ranks, self.cluster_params())
            )
        ]
        dense = self.vocab_size * self.dim
        return {
            "origin": self.origin,
            "vocab_size": self.vocab_size,
            "dim": self.dim,
            "cutoffs": self.cutoffs,
            "ranks": list(self.ranks),
            "clusters": clusters,
            "params": self.stored_params(),
            "dense_params": dense,
            "compression": round(dense / max(1, self.stored_params()), 3),
            "bytes": self.stored_bytes(bits),  # the word-embedding tables as exported (`stored_embedding_bytes`)
            "storage_bits": bits,
            "int8_bytes": self.stored_bytes(8),  # export's report: the whole embedding op's constants
            "permuted": self.permutation is not None,
        }

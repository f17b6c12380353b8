"""Embedding compression (paper §3.2): the NAS search spaces that choose the clustered low-rank
embedding's clusters and ranks, the two-stage search, the size budget, and the baselines. The
embedding layer itself and the factorizations live beside the model (model/clustered_embedding.py,
model/lowrank.py); the trainer it uses is train/."""

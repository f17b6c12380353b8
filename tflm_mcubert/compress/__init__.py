"""Embedding compression (paper §3.2): the NAS search spaces that choose the clustered low-rank
embedding's clusters and ranks, the two-stage search and its workflow (search.py), the size budget,
the baselines and vocabulary pruning. The embedding layer itself and the factorizations live beside the
model (model/clustered_embedding.py, model/lowrank.py); the trainer, and the steps the search shares
with finetune and distill, are train/."""

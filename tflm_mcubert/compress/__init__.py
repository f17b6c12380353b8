"""Embedding compression (paper §3.2): low-rank factorization, the clustered low-rank embedding the
device runs, the NAS search spaces that choose its clusters and ranks, and the baselines."""

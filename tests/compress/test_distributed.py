"""The search under MirroredStrategy over two logical CPU devices finds the clustering the default
strategy finds. Logical devices must be configured before TensorFlow initialises, so this runs in a
fresh interpreter."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    import keras
    import numpy as np
    sys.path.insert(0, sys.argv[2])
    from conftest import random_split
    from tflm_mcubert.compress import nas
    from tflm_mcubert.train.distill import Objective
    from tflm_mcubert.train.trainer import RunDirectory, Trainer, enable_determinism, make_strategy
    from tflm_mcubert.model.bert import BertModel
    from tflm_mcubert.model.config import BertConfig

    config = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=2)
    split = random_split(60, size=48, seed=7, min_len=6, max_len=6)
    teacher_logits = np.random.default_rng(8).normal(size=(48, 2)).astype(np.float32)
    result = {}
    for name in ("default", "mirrored"):
        strategy = make_strategy(name)
        enable_determinism(0)
        with strategy.scope():
            model = BertModel(config)
        trainer = Trainer(RunDirectory(f"{sys.argv[1]}/{name}", {}, resume=False), strategy, batch_size=8, seed=0,
                          progress=False)
        job = nas.SearchJob(trainer, strategy, model, split, Objective(kd_weight=0.5), teacher_logits, batch_size=8)
        outcome = nas.run_search(job, nas.SearchOptions(mode="clustering-only", div=2.0, lambda_=2.0, lr=1e-2,
                                                        arch_lr=0.05, epochs=1.0, finetune_epochs=0.2))
        result[name] = {"replicas": strategy.num_replicas_in_sync,
                        "permutation": outcome.embedding.permutation.tolist(), "cutoffs": outcome.embedding.cutoffs,
                        "classifier": np.asarray(outcome.model.classifier.kernel.numpy()).tolist()}
    print(json.dumps(result))
""")


def test_mirrored_search_finds_the_default_strategy_clustering(tmp_path):
    here = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), str(here)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    default, mirrored = result["default"], result["mirrored"]
    assert (default["replicas"], mirrored["replicas"]) == (1, 2)
    # Same global-batch gradient, summed in another order: the discrete clustering is identical, the
    # weights agree to float32 rounding.
    assert mirrored["cutoffs"] == default["cutoffs"] and len(set(default["cutoffs"])) > 1
    assert mirrored["permutation"] == default["permutation"]
    assert (
        max(abs(a - b) for ra, rb in zip(default["classifier"], mirrored["classifier"]) for a, b in zip(ra, rb)) < 1e-4
    )

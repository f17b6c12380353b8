"""Training: the resumable trainer, batching of encoded tasks, and knowledge distillation.

    trainer.py   Trainer, stages, run directories that resume, accuracy / predictions
    batches.py   encoded splits -> padded training and evaluation batches
    distill.py   KD objectives and the bert-tiny / bert-mini students made from a teacher

Used by `finetune`, `distill` and the embedding search (compress/), which only adds its own losses.
"""

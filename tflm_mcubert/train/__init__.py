"""Training: the resumable trainer, batching of encoded tasks, and knowledge distillation.

    trainer.py   Trainer, stages, run directories that resume, accuracy / predictions
    batches.py   encoded splits -> padded training and evaluation batches
    distill.py   KD objectives and the bert-tiny / bert-mini students made from a teacher
    augment.py   distill --augment / --unlabeled: edited copies of training sentences, unlabeled text read
    teacher_labels.py  those texts labelled by the teacher, logits cached in the run chunk by chunk
    workflows.py the `finetune` and `distill` workflows, and the steps the embedding search shares with them

The embedding search (compress/) uses the trainer and the workflows' steps, and only adds its own losses.
"""

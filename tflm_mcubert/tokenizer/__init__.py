"""The on-device tokenizer: BERT's normalizer, pre-tokenizer and WordPiece as a blob the firmware reads
(vocab_blob, unicode_table), its Python reference (reference) and the C build for this machine (host)."""

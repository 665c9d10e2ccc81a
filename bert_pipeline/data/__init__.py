"""Data: pinned sources and their fetching, corpus cleaning and splitting, sentence splitting, WordPiece training,
pre-training instances (NSP/SOP pairs), MLM masking and the collator, Arrow shards, and the task sets."""

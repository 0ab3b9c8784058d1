"""The text task's model: the causal LM (`causal_lm`), its tokenizer and encodings (`encoding`, `pretraining`), its
losses and its training loop (`train`)."""

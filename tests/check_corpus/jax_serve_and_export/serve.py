"""Scoring text with a jitted model: the tokenizer pads to the longest request, then the function pads again by
hand to the model's sequence length and walks fixed windows, so the jitted function sees one shape. The batch
scorer below it does not: each batch's longest text becomes a new shape."""
import jax
import numpy as np

SEQ_LEN = 1024


def make_scorer(params, apply_fn, tokenizer):
    forward = jax.jit(lambda tokens, mask: apply_fn(params, tokens, mask))

    def score_windows(text):
        inputs = tokenizer(text, padding="longest", truncation=False, return_tensors="np")
        tokens, mask = inputs["input_ids"], inputs["attention_mask"]
        if tokens.shape[1] % SEQ_LEN:
            extra = SEQ_LEN - tokens.shape[1] % SEQ_LEN
            tokens = np.concatenate([tokens, np.full((tokens.shape[0], extra), tokenizer.pad_token_id)], axis=1)
            mask = np.concatenate([mask, np.zeros((mask.shape[0], extra), mask.dtype)], axis=1)
        total = 0.0
        for start in range(0, tokens.shape[1], SEQ_LEN):
            total += float(forward(tokens[:, start:start + SEQ_LEN], mask[:, start:start + SEQ_LEN]).sum())
        return total

    def score_batch(texts):
        inputs = tokenizer(texts, padding="longest", return_tensors="np")
        return forward(inputs["input_ids"], inputs["attention_mask"])

    return score_windows, score_batch

"""Scores generated captions against images with a reference model, once the training is over."""
import torch


def clip_score(model, processor, images, captions) -> float:
    inputs = processor(text=captions, images=images, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**inputs).logits_per_image.diag().mean().item()


def for_scoring(model):
    return model.eval().half()

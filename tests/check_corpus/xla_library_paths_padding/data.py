"""The captioning data: images with their captions, batched by the collate function the loader is given."""
import torch


class CaptionCollator:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __call__(self, examples):
        images = torch.stack([e["image"] for e in examples])
        captions = self.tokenizer([e["caption"] for e in examples], padding="longest", return_tensors="pt")
        return images, captions.input_ids

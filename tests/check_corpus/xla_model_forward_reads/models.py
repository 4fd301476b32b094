"""Two models whose forward reads values from the device: a small patch encoder of our own and a masked-LM head
derived from a Hugging Face model. Both run inside the PyTorch/XLA step of train.py (model(**batch))."""
import torch
import torch.nn as nn
from transformers import BertForMaskedLM


class PatchDropEncoder(nn.Module):
    def __init__(self, n_patches: int = 196, dim: int = 384, mask_ratio: float = 0.75) -> None:
        super().__init__()
        self.n_patches = n_patches
        self.mask_ratio = mask_ratio
        self.longest_seen = 0
        self.view_seed = 0
        self.embed = nn.Linear(768, dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, patches, lengths, labels, mask_ratio: float = 0.75):
        self.longest_seen = max(self.longest_seen, lengths.max().item())
        keep = int(self.n_patches * (1 - mask_ratio))
        self.view_seed = torch.randint(1, 10, (1,)).item()
        order = torch.argsort(torch.rand(patches.shape[0], self.n_patches, device=patches.device), dim=1)
        kept = torch.gather(self.embed(patches), 1, order[:, :keep, None].expand(-1, -1, 384))
        logits = self.head(kept.mean(dim=1))
        return nn.functional.cross_entropy(logits, labels)


class TaggedMaskedLM(BertForMaskedLM):
    pad_id = 0

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        if attention_mask is not None:
            attention_mask = attention_mask.long()
        labels[labels == self.pad_id] = -100
        tag_counts = (input_ids == 103).sum(dim=1).tolist()
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)
        out["tags"] = tag_counts
        return out

"""A captioner whose prompt and answer are joined per example, by lengths read on the host."""
import torch
from torch import nn


class Captioner(nn.Module):
    def __init__(self, width: int = 64, vocab: int = 100) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)

    def join(self, prompts, prompt_mask, answers, use_cache=None):
        lengths = prompt_mask.sum(dim=1).detach().cpu()
        joined = []
        for i in range(prompts.shape[0]):
            length = lengths[i].item()
            joined.append(torch.cat([prompts[i][:length], answers[i], prompts[i][length:]]))
        cache = () if use_cache else None
        return torch.stack(joined), cache

    def forward(self, batch):
        tokens, _ = self.join(self.embed(batch["prompt"]), batch["prompt_mask"], self.embed(batch["answer"]),
                              use_cache=batch.get("use_cache"))
        logits = self.head(tokens)
        return {"loss": nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())}

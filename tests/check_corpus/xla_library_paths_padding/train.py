"""Fine-tunes a captioner on one TPU core; scores it once at the end."""
import torch
import torch_xla.core.xla_model as xm
from torch.utils.data import DataLoader

from data import CaptionCollator
from scoring import clip_score, for_scoring


def train(model, tokenizer, dataset, scorer, processor, steps: int = 100):
    device = xm.xla_device()
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(dataset, batch_size=16, collate_fn=CaptionCollator(tokenizer))
    for images, ids in loader:
        loss = model(images.to(device), ids.to(device)).loss
        loss.backward()
        xm.optimizer_step(optimizer)
        optimizer.zero_grad()
    print("clip score", clip_score(for_scoring(scorer), processor, dataset.sample_images(), model.caption(dataset.sample_images())))


if __name__ == "__main__":
    train(*build_everything())

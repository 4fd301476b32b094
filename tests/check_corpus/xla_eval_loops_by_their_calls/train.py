"""Two encoders trained to agree on paired clips and captions, on one TPU core, with a held-out pass now and then."""
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

from encoders import CaptionEncoder, ClipEncoder
from pairs import loaders

device = xm.xla_device()
clip_encoder = ClipEncoder(dim=256).to(device)
caption_encoder = CaptionEncoder(vocab=8000, dim=256).to(device)
opt = torch.optim.AdamW([*clip_encoder.parameters(), *caption_encoder.parameters()], lr=3e-4)
train_loader, held_out_loader = loaders(batch_size=32)


def agreement_loss(clips, captions):
    logits = clip_encoder(clips) @ caption_encoder(captions).T
    return F.cross_entropy(logits, torch.arange(len(logits), device=logits.device))


step = 0
for epoch in range(20):
    running = 0.0
    for clips, captions in train_loader:
        clips, captions = clips.to(device), captions.to(device)
        loss = agreement_loss(clips, captions)
        opt.zero_grad()
        loss.backward()
        opt.step()
        xm.mark_step()
        running += loss.item()
        step += 1
        if step % 500 == 0:
            for clips, captions in pl.MpDeviceLoader(held_out_loader, device):
                xm.master_print(f"held-out loss {agreement_loss(clips, captions):.3f}")

    with torch.no_grad():
        held_out = 0.0
        for clips, captions in held_out_loader:
            clips, captions = clips.to(device), captions.to(device)
            held_out += F.cosine_similarity(clip_encoder(clips), caption_encoder(captions)).mean().item()
    print(f"epoch {epoch}: train {running / len(train_loader):.4f} held-out {held_out / len(held_out_loader):.4f}")

"""Predictions of a PyTorch/XLA model, kept in float16 on disk to halve the file; a helper for the GPU export."""
import torch
import torch_xla.core.xla_model as xm


def apply_half(t):
    return t.half()


def predict(model, loader, out_path: str) -> None:
    device = xm.xla_device()
    model = model.to(device).eval()
    kept = []
    with torch.no_grad():
        for images in loader:
            preds = model(images.to(device))
            xm.mark_step()
            kept.append(preds)
    torch.save([p.detach().to(torch.float16).cpu() for p in kept], out_path)

# The first port, kept for reference; nothing imports it any more.
import torch_xla.core.xla_model as xm


def fit(model, loader, optimizer):
    for batch in loader:
        loss = model(batch).mean()
        loss.backward()
        xm.optimizer_step(optimizer)
        print("loss", loss.item())

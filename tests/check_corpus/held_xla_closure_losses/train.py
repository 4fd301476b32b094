"""PyTorch/XLA: logging through step closures done right, and a list of losses done wrong."""
import torch
import torch_xla
import torch_xla.core.xla_model as xm


def log_loss(step, loss):
    print(f"step {step} loss {loss.item():.4f}")


def train(model, loader, optimizer, max_steps):
    device = torch_xla.device()
    losses = []
    step = 0
    for inputs, labels in loader:
        inputs, labels = inputs.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        xm.optimizer_step(optimizer)
        xm.add_step_closure(log_loss, args=(step, loss))
        losses.append(loss.item())
        if torch.isnan(loss):
            break
        step += 1
        if step >= max_steps:
            break
    return sum(losses) / max(len(losses), 1)

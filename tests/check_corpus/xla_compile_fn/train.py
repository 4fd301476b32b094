"""A step under torch_xla.compile (PyTorch/XLA 2.x eager mode with a compiled step)."""
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm

torch_xla.experimental.eager_mode(True)
device = torch_xla.device()
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss(reduction="none")


@torch_xla.compile
def train_step(x, y, weights):
    optimizer.zero_grad()
    losses = loss_fn(model(x), y)
    valid = weights > 0
    loss = losses[valid].mean()
    if loss > 10.0:
        loss = loss * 0.1
    loss.backward()
    optimizer.step()
    return loss


def eval_step(x, y):
    preds = model(x).argmax(-1)
    return (preds == y).float().mean()


compiled_eval = torch_xla.compile(eval_step)


def main(steps=100):
    for step in range(steps):
        x = torch.randn(32, 16, device=device)
        y = torch.randint(0, 4, (32,), device=device)
        w = torch.ones(32, device=device)
        loss = train_step(x, y, w)
        if step % 20 == 0:
            xm.master_print(f"step {step} loss {loss.item():.3f}")
    accuracy = compiled_eval(x, y)
    print(f"accuracy {accuracy.item():.2f}")


if __name__ == "__main__":
    main()

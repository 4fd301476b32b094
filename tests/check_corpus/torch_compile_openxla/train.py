"""Dynamo on XLA: torch.compile(backend="openxla") around the step function."""
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm

device = xm.xla_device()
embed = torch.nn.Embedding(100, 16).to(device)
head = torch.nn.Linear(16, 100).to(device)
params = list(embed.parameters()) + list(head.parameters())
optimizer = torch.optim.SGD(params, lr=0.05)


def step_fn(tokens, labels):
    optimizer.zero_grad()
    logits = head(embed(tokens))
    keep = labels != -100
    loss = F.cross_entropy(logits[keep], labels[keep])
    loss.backward()
    optimizer.step()
    return loss


def eval_fn(tokens, labels):
    logits = head(embed(tokens))
    mask = (labels != -100).float()
    nll = F.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none")
    return (nll * mask).sum() / mask.sum()


compiled_step = torch.compile(step_fn, backend="openxla")
compiled_eval = torch.compile(eval_fn, backend="openxla")

for step in range(50):
    tokens = torch.randint(0, 100, (4, 12)).to(device)
    labels = torch.where(torch.rand(4, 12) < 0.2, -100, tokens.cpu()).to(device)
    loss = compiled_step(tokens, labels)
    if step % 10 == 0:
        print("step", step, "eval", compiled_eval(tokens, labels).item())

"""A user's port of a small GPT-2 trainer to PyTorch/XLA: the step ends with xm.mark_step(), but the loss is
formatted into text every iteration (reading a device tensor's value cuts the graph and waits for the TPU), and
the evaluation loop, which has no step end of its own, reads every batch's loss."""
import math
import sys

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm

from model import GPT, GPTConfig

device = xm.xla_device()
config = GPTConfig(block_size=256, vocab_size=50304, n_layer=6, n_head=6, n_embd=384)
model = GPT(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
data = torch.randint(0, config.vocab_size, (100_000,))
max_iters, eval_every, eval_iters, log_every = 2000, 250, 20, 10


def get_batch(batch_size=16):
    starts = torch.randint(len(data) - config.block_size - 1, (batch_size,))
    x = torch.stack([data[s:s + config.block_size] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + config.block_size] for s in starts])
    return x.to(device), y.to(device)


@torch.no_grad()
def evaluate():
    model.eval()
    total = torch.zeros((), device=device)
    for k in range(eval_iters):
        x, y = get_batch()
        logits, loss = model(x, y)
        print(f"eval batch {k}: loss {loss:0.3f}")
        total += loss
    model.train()
    return total / eval_iters


for it in range(max_iters):
    x, y = get_batch()
    logits, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    xm.mark_step()
    print(f"iter {it}: loss {loss:0.3f}")
    sys.stdout.write(format(loss, ".4f") + "\n")
    last = "loss=" + str(loss)
    lr = optimizer.param_groups[0]["lr"]
    sys.stdout.write(format(lr, ".2e") + " " + str(device) + "\n")
    if it % log_every == 0:
        print(f"iter {it}: loss {loss.item():0.3f}, perplexity {math.exp(loss.item()):.1f}")
    if it % eval_every == 0:
        val = evaluate()
        xm.master_print(f"validation loss {val.item():.4f}")

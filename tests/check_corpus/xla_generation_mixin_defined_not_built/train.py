"""Fine-tunes the tagger on synthetic batches. models.py also keeps the captioning project's model, which this
training never builds."""
import torch
import torch_xla.core.xla_model as xm

from models import Tagger
from synthetic import Batches

device = xm.xla_device()
model = Tagger(vocab=512, tags=9).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
batches = Batches(seed=0, batch=16, length=64).generate(200)

for step, (tokens, tags) in enumerate(batches):
    tokens, tags = tokens.to(device), tags.to(device)
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tags.flatten())
    loss.backward()
    xm.optimizer_step(optimizer)
    optimizer.zero_grad()
    if step % 50 == 0:
        xm.add_step_closure(print, args=(step, loss))

"""Sampling from a model on PyTorch/XLA: `main` loads the weights block by block (reporting progress with Python
numbers), ends a step once, and calls `sample`, whose loop ends a step per token. Only the loop is a step: the
loading runs once. Stopping at the end-of-text token reads the sampled token from the device every token."""
import torch
import torch_xla.core.xla_model as xm

from model import TinyLM


def say(message):
    if xm.is_master_ordinal():
        print(message, flush=True)


def load_blocks(model, state, device):
    for index, block in enumerate(model.blocks):
        say(f"loading block {index} of {len(model.blocks)}")
        part = {name: state[f"blocks.{index}.{name}"] for name, _ in block.named_parameters()}
        if any(p.is_meta for p in block.parameters()):
            block.to_empty(device=device)
        block.load_state_dict(part)
    return model.to(device)


def sample(model, prompt, steps, eos_id):
    tokens = prompt
    xm.mark_step()
    for _ in range(steps):
        logits = model(tokens)[:, -1]
        next_token = torch.multinomial(torch.softmax(logits, dim=-1), 1)
        tokens = torch.cat([tokens, next_token], dim=1)
        xm.mark_step()
        if next_token == eos_id:
            break
    return tokens


def main(path, prompt_ids, steps=64, eos_id=0):
    device = xm.xla_device()
    model = load_blocks(TinyLM(), torch.load(path), device)
    xm.mark_step()
    say(f"weights loaded from {path}")
    out = sample(model, torch.tensor([prompt_ids], device=device), steps, eos_id)
    say(out.cpu().tolist())

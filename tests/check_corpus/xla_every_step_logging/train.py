"""A PyTorch/XLA fine-tune whose log interval is one step, and an evaluation that decodes on the device."""
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from transformers import AutoModelForCausalLM, AutoTokenizer

LOG_EVERY = 1
SAVE_EVERY = 500


def train(model, loader, optimizer):
    for step, batch in enumerate(loader):
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        xm.optimizer_step(optimizer)
        if step % LOG_EVERY == 0:
            xm.master_print(f"step {step} loss {loss.item():.4f}")
        if step % SAVE_EVERY == 0:
            xm.master_print(f"step {step} checkpoint, loss {loss.item():.4f}")


def evaluate(model, tokenizer, vae, loader):
    texts = []
    for batch in loader:
        generated = model(batch["input_ids"]).logits.argmax(-1)
        texts.extend(tokenizer.batch_decode(generated, skip_special_tokens=True))
        images = vae.decode(generated.float())
        xm.mark_step()
    return texts, images


def main():
    device = xm.xla_device()
    tokenizer = AutoTokenizer.from_pretrained("gpt2")
    model = AutoModelForCausalLM.from_pretrained("gpt2").to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    data = [{"input_ids": torch.randint(0, 50000, (64,)), "labels": torch.randint(0, 50000, (64,))}] * 16
    loader = pl.MpDeviceLoader(torch.utils.data.DataLoader(data, batch_size=4), device)
    train(model, loader, optimizer)
    evaluate(model, tokenizer, None, loader)


if __name__ == "__main__":
    main()

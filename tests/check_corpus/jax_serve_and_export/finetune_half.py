"""A PyTorch fine-tuning script of the same project, run on the TPU: it casts the model to float16 to save memory."""
import torch


def finetune(model, loader, steps):
    model = model.to(dtype=torch.float16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _, (x, y) in zip(range(steps), loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.save(model.state_dict(), "finetuned.pt")

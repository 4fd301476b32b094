import torch
import torch_xla.core.xla_model as xm


def fit(model, loader, args):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        for batch in loader:
            optimizer.zero_grad()
            loss = model(batch).pow(2).mean()
            loss.backward()
            if args.log_grad_norm:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                print(f"grad norm {norm.item():.3f}")
            xm.optimizer_step(optimizer)
            if args.trace_batches:
                print("batch mean", batch.mean().item())
        xm.master_print(f"epoch {epoch} done")

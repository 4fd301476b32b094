"""A user's own BERT-style pretraining loop on PyTorch/XLA: a step budget, not epochs."""
import math
import time

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.runtime as xr
from torch.utils.tensorboard import SummaryWriter
from transformers import AutoModelForMaskedLM, get_linear_schedule_with_warmup

from data import build_dataset, collate


def train(args):
    device = xm.xla_device()
    model = AutoModelForMaskedLM.from_pretrained(args.model_name).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    scheduler = get_linear_schedule_with_warmup(optimizer, args.warmup_steps, args.max_steps)
    loader = torch.utils.data.DataLoader(build_dataset(args), batch_size=args.batch_size, collate_fn=collate,
                                         drop_last=True)
    device_loader = pl.MpDeviceLoader(loader, device)
    writer = SummaryWriter(args.logdir) if xm.is_master_ordinal() else None
    global_step = 0
    epoch = 0
    tr_loss = 0.0
    start = time.time()
    while global_step < args.max_steps:
        epoch += 1
        for batch in device_loader:
            outputs = model(**batch)
            loss = outputs.loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            xm.optimizer_step(optimizer)
            scheduler.step()
            optimizer.zero_grad()
            tr_loss += loss.item()
            global_step += 1
            if global_step % args.log_every == 0:
                elapsed = time.time() - start
                xm.master_print(f"step {global_step} epoch {epoch} loss {tr_loss / args.log_every:.4f} "
                                f"{elapsed:.1f}s")
                if writer is not None:
                    writer.add_scalar("lr", scheduler.get_last_lr()[0], global_step)
                tr_loss = 0.0
            if global_step >= args.max_steps:
                break
        if epoch > args.max_epochs and math.isfinite(tr_loss):
            break
    if xr.global_ordinal() == 0:
        model.save_pretrained(args.output_dir)

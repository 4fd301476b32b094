"""Per-step logging through strings: every format of a tensor reads it from the device."""
import logging
import sys

import torch
import torch_xla
import torch_xla.core.xla_model as xm
from tqdm import tqdm

logger = logging.getLogger(__name__)


def train(model, loader, optimizer, scheduler, num_epochs, log_every=50):
    device = torch_xla.device()
    model.to(device)
    for epoch in range(num_epochs):
        progress = tqdm(loader, desc=f"epoch {epoch}", disable=not xm.is_master_ordinal())
        for step, batch in enumerate(progress):
            batch = {k: v.to(device) for k, v in batch.items()}
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            xm.mark_step()
            progress.set_description(f"loss {loss:.3f}")
            logger.info("step %d loss %.4f" % (step, loss))
            sys.stdout.write("lr {:.2e} loss {:.3f}\n".format(scheduler.get_last_lr()[0], loss))
            logger.debug("step %d of epoch %d", step, epoch)
            if step % log_every == 0:
                logger.info(f"epoch {epoch} step {step} loss {loss.item():.4f}")

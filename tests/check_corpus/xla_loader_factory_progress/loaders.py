import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


class Counting:
    """Counts what it yields, for the progress line."""

    def __init__(self, iterable, total):
        self.iterable, self.total, self.n = iterable, total, 0

    def __iter__(self):
        for item in self.iterable:
            self.n += 1
            yield item


def device_batches(batches):
    """Every core's batches on its XLA device; the graph queued so far is run first, so that no step spans two
    loaders."""
    xm.mark_step()
    device = xm.xla_device()
    return Counting(pl.ParallelLoader(batches, [device]).per_device_loader(device), total=len(batches))


def with_progress(iterable, prefix):
    print(prefix)
    return iterable

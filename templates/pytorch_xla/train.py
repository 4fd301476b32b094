"""A small GPT-2-style causal language model for PyTorch/XLA on Cloud TPUs, with a plain-PyTorch CPU fallback.

On a TPU VM (PJRT_DEVICE=TPU, which tpuops sets):
- `xmp.spawn` starts one process per local TPU device; on a multi-host slice every host runs this script
  and PJRT joins them into one world (no address to configure).
- Each process trains on its own shard of the data; `xm.optimizer_step` all-reduces the gradients.
- Autocast to bfloat16 on the TPU: every TPU generation tpuops supports (v2 and later) multiplies
  bfloat16 natively, and it halves activation memory; master weights and the loss stay float32.
- Fixed shapes: text is concatenated and cut into blocks of --block-size tokens (as Hugging Face's
  run_clm does), and the last partial batch is dropped, so XLA compiles the step once. A shape change
  means a recompilation, which costs minutes on a TPU.

Without torch_xla (a laptop, CI): plain PyTorch on the CPU; with TPUOPS_NUM_WORKERS > 1 and
TPUOPS_COORDINATOR set (the local simulator), the workers form a torch.distributed gloo group and
average gradients with DistributedDataParallel, as the hosts of a slice would.

TensorBoard scalars (loss, learning_rate, tokens_per_sec) go to TPUOPS_LOGDIR (local, or gs:// with
gcsfs installed); a checkpoint every --checkpoint-every steps beside it, restored when TPUOPS_RESUME=1.

CPU try-out: python train.py --data ../../examples/data/quickstart.txt --steps 30 --logdir /tmp/pt/logs
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# Read before importing torch_xla, which sets PJRT_DEVICE=CPU when it is unset.
PJRT_DEVICE = os.environ.get("PJRT_DEVICE")

try:  # torch_xla is there on TPU VM images (and `pip install torch_xla[tpu]`), not on a laptop
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.xla_multiprocessing as xmp
    import torch_xla.runtime as xr
except ImportError:
    xm = pl = xmp = xr = None

VOCAB = 256  # byte-level tokens: no tokenizer download; use your own tokenizer for real runs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", required=True, help="UTF-8 text files (local, or gs:// with gcsfs)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=16, help="per device (per process)")
    parser.add_argument("--block-size", type=int, default=128, help="tokens per example; keep it a multiple of 64")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--checkpoint-dir", default=None, help="default: $TPUOPS_LOGDIR/../checkpoints")
    parser.add_argument("--logdir", default=os.environ.get("TPUOPS_LOGDIR", "logs"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu", action="store_true", help="ignore torch_xla even where it is installed")
    args = parser.parse_args(argv)
    if os.environ.get("TPUOPS_MAX_STEPS"):  # `tpuops check` runs a few steps (its preflight sets this)
        args.steps = min(args.steps, int(os.environ["TPUOPS_MAX_STEPS"]))
    if os.environ.get("TPUOPS_PREFLIGHT") == "1":
        shrink_for_preflight(args)
    return args


# `tpuops check` runs this same code on the CPU of a laptop (TPUOPS_PREFLIGHT=1): sizes capped to a toy
# configuration of the same structure, so that a pod-sized configuration still fits there.
PREFLIGHT_SIZES = {"dim": 64, "layers": 2, "heads": 2, "block_size": 64, "batch_size": 8}


def shrink_for_preflight(args: argparse.Namespace) -> None:
    """Cap the model and batch sizes for the preflight; TPUOPS_PREFLIGHT_FULL_SIZE=1 (a spec's `check: {env:
    ...}`) keeps them as given."""
    if os.environ.get("TPUOPS_PREFLIGHT_FULL_SIZE") == "1":
        return
    capped = {name: min(getattr(args, name), most) for name, most in PREFLIGHT_SIZES.items()}
    if capped["dim"] % capped["heads"]:
        capped["heads"] = 1
    changed = {name: value for name, value in capped.items() if value != getattr(args, name)}
    for name, value in capped.items():
        setattr(args, name, value)
    if changed:
        print(f"preflight (TPUOPS_PREFLIGHT=1): toy sizes {changed}", flush=True)


# ---------------------------------------------------------------------------------------------- files


def _fs_open(path: str, mode: str) -> Any:
    """Local files, or gs:// (and any fsspec URL) through fsspec/gcsfs."""
    if "://" in path:
        import fsspec

        return fsspec.open(path, mode).open()
    return open(path, mode)  # noqa: SIM115 (the caller closes it)


def read_tokens(paths: list[str]) -> torch.Tensor:
    chunks = []
    for path in paths:
        with _fs_open(path, "rb") as f:
            chunks.append(torch.frombuffer(bytearray(f.read()), dtype=torch.uint8))
    return torch.cat(chunks).long()


def save_checkpoint(directory: str, step: int, state: dict[str, Any], world: World) -> None:
    buffer = io.BytesIO()
    if world.xla:
        # Every process joins xm.save (it copies device tensors to the host in step); only rank 0 writes.
        xm.save(state, buffer, global_master=True)
    elif world.rank == 0:
        torch.save(state, buffer)
    if world.rank != 0:
        return
    path = f"{directory.rstrip('/')}/step-{step:08d}.pt"
    if "://" in path:
        with _fs_open(path, "wb") as f:  # an object store write is atomic by itself
            f.write(buffer.getvalue())
        return
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(buffer.getvalue())
    os.replace(tmp, path)  # a preemption mid-write leaves the previous checkpoint intact


def latest_checkpoint(directory: str) -> str | None:
    if "://" in directory:
        import fsspec

        fs, _, (root,) = fsspec.get_fs_token_paths(directory)
        names = fs.glob(f"{root.rstrip('/')}/step-*.pt")
        return f"{directory.split('://')[0]}://{max(names)}" if names else None
    if not os.path.isdir(directory):
        return None
    names = sorted(n for n in os.listdir(directory) if n.startswith("step-") and n.endswith(".pt"))
    return os.path.join(directory, names[-1]) if names else None


def default_checkpoint_dir(logdir: str) -> str:
    # Beside the logs, not inside: TensorBoard scans its logdir recursively.
    parent = logdir.rstrip("/").rsplit("/", 1)[0] if "/" in logdir.rstrip("/") else "."
    return f"{parent}/checkpoints"


# ---------------------------------------------------------------------------------------------- model


class GPT(nn.Module):
    """Token and position embeddings, pre-norm causal Transformer blocks, tied output embedding (as GPT-2)."""

    def __init__(self, dim: int, layers: int, heads: int, block_size: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, dim)
        self.positions = nn.Embedding(block_size, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)  # fmt: skip
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        # The causal mask is a fixed-size buffer: built once, the same shape every step (XLA compiles once).
        self.register_buffer("causal", torch.triu(torch.full((block_size, block_size), float("-inf")), 1))
        for embedding in (self.tokens, self.positions):  # GPT-2's init: small, or tied logits start huge
            nn.init.normal_(embedding.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        x = self.tokens(tokens) + self.positions(torch.arange(length, device=tokens.device))
        # is_causal=True: without it torch compares the mask with a causal one on the host every step, which
        # under XLA cuts the graph and waits for the device (`tpuops check` reports it as XLA103).
        x = self.blocks(x, mask=self.causal[:length, :length], is_causal=True)
        return self.norm(x) @ self.tokens.weight.T


# ---------------------------------------------------------------------------------------------- training


@dataclass
class World:
    rank: int  # this process among all processes of the run (every host, every device)
    size: int
    device: torch.device
    xla: bool


def learning_rate(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * progress)))


def batches(tokens: torch.Tensor, args: argparse.Namespace, world: World, start_step: int):
    """This process's batches: blocks of block_size + 1 tokens, seeded by (seed, rank, step) to resume exactly."""
    starts_max = len(tokens) - args.block_size - 1
    step = start_step
    while True:
        generator = torch.Generator().manual_seed(args.seed * 1_000_003 + world.rank * 10_007 + step)
        starts = torch.randint(0, starts_max, (args.batch_size,), generator=generator)
        block = torch.stack([tokens[s : s + args.block_size + 1] for s in starts.tolist()])
        yield block[:, :-1], block[:, 1:]
        step += 1


def log(world: World, message: str) -> None:
    print(f"[torch w{os.environ.get('TPUOPS_WORKER_ID', '0')} r{world.rank}] {message}", flush=True)


def train(world: World, args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)  # the same initial weights in every process
    model = GPT(args.dim, args.layers, args.heads, args.block_size).to(world.device)
    if world.xla:
        xm.broadcast_master_param(model)  # every device starts from rank 0's weights
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    checkpoint_dir = args.checkpoint_dir or default_checkpoint_dir(args.logdir)
    step = maybe_resume(world, model, optimizer, checkpoint_dir)
    wrapped = model
    if not world.xla and world.size > 1:
        wrapped = nn.parallel.DistributedDataParallel(model)  # averages gradients over the gloo group
    tokens = read_tokens(args.data)
    loader = batches(tokens, args, world, step)
    if world.xla:
        # Copies the next batches to the TPU in background threads while the current step runs.
        loader = iter(pl.MpDeviceLoader(loader, world.device))
    writer = make_writer(args.logdir) if world.rank == 0 else None
    if world.rank == 0:
        log(world, f"{world.size} process(es), device {world.device}, {len(tokens):,} tokens, "
                   f"{sum(p.numel() for p in model.parameters()):,} parameters")  # fmt: skip
    started, seen = time.perf_counter(), 0
    while step < args.steps:
        inputs, labels = (t.to(world.device) for t in next(loader))  # a no-op for batches already on the TPU
        lr = learning_rate(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = train_step(wrapped, optimizer, inputs, labels, world)
        step += 1
        seen += inputs.numel() * world.size
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            # .item() waits for the device: only on logging steps, so the TPU is not stalled every step.
            value = loss.item()
            rate = seen / max(time.perf_counter() - started, 1e-9)
            if writer:
                writer.add_scalar("loss", value, step)
                writer.add_scalar("learning_rate", lr, step)
                writer.add_scalar("tokens_per_sec", rate, step)
                writer.flush()
                log(world, f"step {step}/{args.steps} loss {value:.4f} lr {lr:.2e} tokens/s {rate:,.0f}")
            started, seen = time.perf_counter(), 0  # the rate over the last interval, not since the start
        if step % args.checkpoint_every == 0 or step == args.steps:
            state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
            save_checkpoint(checkpoint_dir, step, state, world)
    if writer:
        writer.close()
    log(world, f"done at step {step}")


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, labels: torch.Tensor,
               world: World) -> torch.Tensor:  # fmt: skip
    optimizer.zero_grad(set_to_none=True)
    if world.xla:
        with torch.autocast("xla", dtype=torch.bfloat16):
            logits = model(inputs)
    else:
        logits = model(inputs)
    loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), labels.reshape(-1))
    loss.backward()
    if world.xla:
        xm.reduce_gradients(optimizer)  # all-reduce (mean) of the gradients over every TPU device
    # Clip the averaged gradients (DDP has averaged them during backward): the same update everywhere.
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if world.xla:
        xm.mark_step()  # cut the lazy graph here: one compiled program per step
    return loss.detach()


def maybe_resume(world: World, model: nn.Module, optimizer: torch.optim.Optimizer, directory: str) -> int:
    if os.environ.get("TPUOPS_RESUME") != "1":
        return 0
    path = latest_checkpoint(directory)
    if path is None:
        log(world, f"TPUOPS_RESUME=1 but no checkpoint in {directory}: starting from step 0")
        return 0
    with _fs_open(path, "rb") as f:
        state = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    restart = os.environ.get("TPUOPS_RESTART")
    log(world, f"resumed from step {state['step']} ({path})" + (f", restart {restart}" if restart else ""))
    return int(state["step"])


def make_writer(logdir: str) -> Any:
    if "://" not in logdir:
        # TensorBoard's own file layer is enough for a local directory; without this it imports all of
        # TensorFlow when that is installed (seconds). For gs:// it goes through TF or fsspec/gcsfs.
        import types

        sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(logdir, flush_secs=10)


# ---------------------------------------------------------------------------------------------- entry points


def xla_worker(index: int, args: argparse.Namespace) -> None:
    """One process per TPU device, started by xmp.spawn."""
    world = World(xr.global_ordinal(), xr.world_size(), xm.xla_device(), xla=True)
    train(world, args)


def cpu_main(args: argparse.Namespace) -> None:
    rank = int(os.environ.get("TPUOPS_WORKER_ID", "0"))
    size = int(os.environ.get("TPUOPS_NUM_WORKERS", "1"))
    coordinator = os.environ.get("TPUOPS_COORDINATOR")
    if size > 1:
        if not coordinator:
            raise SystemExit("TPUOPS_NUM_WORKERS > 1 needs TPUOPS_COORDINATOR (worker 0's host:port)")
        import datetime

        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://{coordinator}", rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=300))  # fmt: skip
    try:
        train(World(rank, size, torch.device("cpu"), xla=False), args)
    finally:
        if size > 1:
            torch.distributed.destroy_process_group()


def use_xla(args: argparse.Namespace) -> bool:
    if xmp is None or args.cpu or not PJRT_DEVICE:
        return False
    # Several CPU workers (the local simulator) average over gloo: PJRT on the CPU does not join hosts.
    return PJRT_DEVICE != "CPU" or int(os.environ.get("TPUOPS_NUM_WORKERS", "1")) <= 1


def main() -> int:
    args = parse_args()
    if use_xla(args):
        xmp.spawn(xla_worker, args=(args,))  # one process per local TPU device
    else:
        cpu_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

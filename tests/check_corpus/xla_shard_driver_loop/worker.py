"""A volunteer worker: fetch a shard, train on it, send the result back, again and again."""
import json
import urllib.request
from pathlib import Path

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl


def fetch_shard(url: str, cache: Path) -> Path:
    target = cache / url.rsplit("/", 1)[-1]
    if target.exists():
        print(f"using cached shard {target}")
        return target
    with urllib.request.urlopen(url) as response:
        target.write_bytes(response.read())
    print(f"fetched {target.stat().st_size / 1e6:.1f} MB to {target}")
    return target


def train_shard(model, optimizer, shard: str, device) -> float:
    batches = torch.load(fetch_shard(shard, Path("/tmp/shards")))
    total = 0.0
    for batch in pl.MpDeviceLoader(batches, device):
        optimizer.zero_grad()
        loss = model(batch).pow(2).mean()
        loss.backward()
        xm.optimizer_step(optimizer)
        total += loss.item()
    return total / max(1, len(batches))


def report(server: str, shard: str, mean_loss: float) -> None:
    body = json.dumps({"shard": str(shard), "loss": mean_loss}).encode()
    urllib.request.urlopen(server, data=body)


def main(server: str, shards: list[str]) -> None:
    device = xm.xla_device()
    model = torch.nn.Linear(64, 64).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for shard in shards:
        mean_loss = train_shard(model, optimizer, shard, device)
        if mean_loss > 10.0:
            print(f"shard {shard} diverged: {mean_loss:.2f}")
        report(server, shard, mean_loss)


if __name__ == "__main__":
    main("http://127.0.0.1:8080/result", ["http://127.0.0.1:8080/shard-0.pt"])

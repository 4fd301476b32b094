"""Cross-validation on eight TPU cores: for every fold, a fitting phase spawns the training processes, then a
report phase summarises on the host what they wrote."""

import json
import sys

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_multiprocessing as xmp

from pieces import Classifier, fold_loader

PHASES = ("fit", "report")
FOLDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def fit(index: int, fold: int) -> None:
    device = xm.xla_device()
    model = Classifier().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    running = 0.0
    for features, targets in pl.MpDeviceLoader(fold_loader(fold, "train"), device):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(features), targets)
        loss.backward()
        xm.optimizer_step(optimizer)
        running += loss.item()
    model.eval()
    guesses, truths = [], []
    with torch.no_grad():
        for features, targets in pl.MpDeviceLoader(fold_loader(fold, "dev"), device):
            guesses.extend(model(features).argmax(-1).to("cpu").numpy())
            truths.extend(targets.to(device="cpu").tolist())
    weights = {name: tensor.to("cpu") for name, tensor in model.state_dict().items()}
    xm.save(weights, f"fold{fold}-{index}.pt")
    with open(f"fold{fold}-{index}.json", "w") as out:
        json.dump({"guesses": [int(g) for g in guesses], "truths": truths, "loss": running}, out)


def report(fold: int) -> None:
    with open(f"fold{fold}-0.json") as found:
        outcome = json.load(found)
    hits = torch.tensor(outcome["guesses"]).to("cpu") == torch.tensor(outcome["truths"])
    print(f"fold {fold}: accuracy {hits.float().mean().item():.3f}")


def main() -> None:
    for fold in range(FOLDS):
        for phase in PHASES:
            if phase == "report":
                report(fold)
            else:
                xmp.spawn(fit, args=(fold,), nprocs=8)


if __name__ == "__main__":
    main()

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader

from batching import FixedTagCollator, TagCollator, collate_reports

PAD = 0
HEAD = 8


def fit(model: torch.nn.Module, reports: list, sentences: list, fixed: bool) -> None:
    device = xm.xla_device()
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    collate = FixedTagCollator(PAD) if fixed else TagCollator(PAD)
    for ids, tags in pl.MpDeviceLoader(DataLoader(sentences, batch_size=32, collate_fn=collate), device):
        optimizer.zero_grad()
        scores = model(ids)
        valid = tags != -100
        head = valid[:, :HEAD]
        loss = F.cross_entropy(scores[valid], tags[valid])
        loss = loss + F.mse_loss(scores[:, :HEAD].mean(-1)[head], tags[:, :HEAD][head].float())
        loss = loss + scores[valid.unsqueeze(-1).expand_as(scores)].pow(2).mean() * 1e-4
        first = tags[:, :HEAD]
        loss = loss + 1e-3 * (scores.mean(-1)[:, :HEAD] * head * first.float()).mean()
        loss.backward()
        xm.optimizer_step(optimizer)
    for images, report_ids in pl.MpDeviceLoader(DataLoader(reports, batch_size=8, collate_fn=collate_reports),
                                                device):
        optimizer.zero_grad()
        loss = model.report_loss(images, report_ids)
        loss.backward()
        xm.optimizer_step(optimizer)


if __name__ == "__main__":
    from torchvision.models import resnet18

    fit(resnet18(), reports=[], sentences=[], fixed=False)

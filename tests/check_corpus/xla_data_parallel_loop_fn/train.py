"""Segmentation on every core of a TPU with torch_xla's first multi-core API, `DataParallel`: it builds a model per
core and calls a loop function with each core's device loader."""
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.data_parallel as dp

from segmenter import Segmenter, make_trainer, tiles

devices = xm.get_xla_supported_devices()
model_parallel = dp.DataParallel(lambda: Segmenter(classes=6), device_ids=devices)


def train_loop_fn(model, loader, device, context):
    optimizer = context.getattr_or("optimizer", lambda: torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    train, history = make_trainer(model, optimizer), []
    for step, (images, masks) in enumerate(loader):
        metrics = train(images, masks)
        history.append(metrics)
        print(f"[{device}] step {step}: {metrics}")


def valid_loop_fn(model, loader, device, context):
    scores = []
    for images, masks in loader:
        predicted = model.predict_tiles(images).argmax(1)
        scores.append((predicted == masks).float().mean().cpu().numpy())
    return sum(scores) / len(scores)


train_loader, valid_loader = tiles(batch_size=16)
for epoch in range(30):
    model_parallel(train_loop_fn, train_loader)
    print(f"epoch {epoch}: pixel accuracy per core {model_parallel(valid_loop_fn, valid_loader)}")

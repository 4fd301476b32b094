import torch
from torch.utils.data import DataLoader


class Detector(torch.nn.Module):
    def __init__(self, anchors: int = 1024) -> None:
        super().__init__()
        self.anchors = anchors
        self.backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=4), torch.nn.ReLU(), torch.nn.Flatten())
        self.head = torch.nn.LazyLinear(anchors * 5)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.head(self.backbone(images)).view(images.shape[0], self.anchors, 5)
        return out[..., :4], out[..., 4]


def coco_loader(split: str) -> DataLoader:
    raise NotImplementedError(f"point this at your COCO {split} images")

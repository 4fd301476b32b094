import torch


class TinyViT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 32, 8, stride=8)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, images):
        return self.head(self.patch(images).flatten(2).mean(-1))

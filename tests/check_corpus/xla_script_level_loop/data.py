import torch


def make_loaders():
    images = torch.randn(64, 3, 32, 32)
    labels = torch.randint(0, 10, (64,))
    dataset = torch.utils.data.TensorDataset(images, labels)
    return (torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=True),
            torch.utils.data.DataLoader(dataset, batch_size=8))

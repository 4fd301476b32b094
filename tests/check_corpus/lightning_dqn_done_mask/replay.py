import torch


class ReplayDataset(torch.utils.data.IterableDataset):
    """Transitions drawn at random from a filled buffer; `dones` is a boolean per transition."""

    def __init__(self, capacity):
        self.states = torch.randn(capacity, 8)
        self.actions = torch.randint(0, 4, (capacity,))
        self.rewards = torch.randn(capacity)
        self.dones = torch.rand(capacity) < 0.02
        self.next_states = torch.randn(capacity, 8)

    def __iter__(self):
        while True:
            i = torch.randint(0, len(self.states), ()).item()
            yield self.states[i], self.actions[i], self.rewards[i], self.dones[i], self.next_states[i]

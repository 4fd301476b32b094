"""Deep Q-learning on a replay buffer with Lightning on a TPU: the target network's values of finished episodes
are zeroed before the temporal-difference target is built."""
import copy

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from replay import ReplayDataset


class QLearner(L.LightningModule):
    def __init__(self, observations=8, actions=4, gamma=0.99, sync_every=500):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(observations, 128), nn.ReLU(), nn.Linear(128, actions))
        self.target_net = copy.deepcopy(self.net)
        self.gamma, self.sync_every = gamma, sync_every

    def td_loss(self, batch):
        states, actions, rewards, dones, next_states = batch
        chosen = self.net(states).gather(1, actions.long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_values = self.target_net(next_states).max(dim=1).values
            next_values[dones] = 0.0
        return F.mse_loss(chosen, rewards + self.gamma * next_values)

    def training_step(self, batch, batch_idx):
        loss = self.td_loss(batch)
        if self.global_step % self.sync_every == 0:
            self.target_net.load_state_dict(self.net.state_dict())
        self.log("td_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.net.parameters(), lr=1e-3)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(ReplayDataset(capacity=50_000), batch_size=64)


if __name__ == "__main__":
    L.Trainer(accelerator="tpu", devices=8, max_steps=20_000).fit(QLearner())

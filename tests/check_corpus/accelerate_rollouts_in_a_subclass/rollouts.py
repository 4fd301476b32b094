"""A policy-gradient trainer: rollouts scored by a reward function, then one update on them."""
import torch

from base_trainer import PolicyTrainerBase


class RolloutTrainer(PolicyTrainerBase):
    def __init__(self, model, prompts, reward_fn):
        super().__init__(model, prompts)
        self.reward_fn = reward_fn

    def collect(self, count):
        rollouts, mean_rewards = [], []
        while len(rollouts) < count:
            prompt_ids = next(self.prompts).to(self.accelerator.device)
            samples = self.sample(prompt_ids)
            rewards = self.reward_fn(samples)
            mean_rewards.append(rewards.mean().item())
            rollouts.extend(zip(samples, rewards))
        return rollouts, sum(mean_rewards) / len(mean_rewards)

    def update(self, rollouts):
        samples = torch.stack([s for s, _ in rollouts])
        rewards = torch.stack([r for _, r in rollouts])
        logits = self.model(samples).logits
        log_probs = logits.log_softmax(-1).gather(-1, samples.unsqueeze(-1)).squeeze(-1).sum(-1)
        loss = -(log_probs * (rewards - rewards.mean())).mean()
        self.accelerator.backward(loss)
        self.optimizer.step()
        self.optimizer.zero_grad()

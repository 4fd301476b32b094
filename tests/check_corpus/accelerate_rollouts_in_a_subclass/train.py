import itertools

import torch
from transformers import AutoModelForCausalLM

from rollouts import RolloutTrainer


def length_reward(samples):
    return (samples != 0).float().sum(-1) / samples.shape[-1]


prompts = itertools.cycle([torch.randint(1, 50000, (8, 16)) for _ in range(64)])
trainer = RolloutTrainer(AutoModelForCausalLM.from_pretrained("gpt2"), prompts, length_reward)
for iteration in range(100):
    rollouts, mean_reward = trainer.collect(64)
    trainer.update(rollouts)
    trainer.accelerator.print(f"iteration {iteration}: mean reward {mean_reward:.3f}")

"""What every trainer of the project shares: Accelerate set up once, and sampling from the policy."""
import torch
from accelerate import Accelerator


class PolicyTrainerBase:
    def __init__(self, model, prompts, lr=1e-5):
        self.accelerator = Accelerator()
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.prompts = prompts

    def sample(self, prompt_ids):
        with torch.no_grad():
            return self.accelerator.unwrap_model(self.model).generate(prompt_ids, max_new_tokens=32, do_sample=True)

"""Token-by-token decoding for listening tests, shared by the fine-tuning script and a demo app."""
import torch


class Speaker:
    def __init__(self, model, device, eos_id=2, max_tokens=256):
        self.model, self.device = model, device
        self.eos_id, self.max_tokens = eos_id, max_tokens

    @torch.no_grad()
    def speak(self, prompt_ids):
        tokens = prompt_ids.to(self.device)
        finished = torch.zeros(tokens.shape[0], dtype=torch.bool, device=self.device)
        step = 0
        while step < self.max_tokens:
            logits = self.model.decoder.next_logits(tokens)
            next_ids = logits.argmax(-1)
            finished |= next_ids == self.eos_id
            tokens = torch.cat([tokens, next_ids[:, None]], dim=1)
            if finished.all():
                break
            step += 1
        return tokens

import torch
import torch_xla.core.xla_model as xm


class GreedyDecoding:
    """Greedy generation for a model that returns next-token logits."""

    def generate(self, prompt, max_new_tokens, eos_id):
        tokens = prompt
        for _ in range(max_new_tokens):
            next_token = self(tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
            xm.mark_step()
            if (next_token == eos_id).all().item():
                break
        return tokens

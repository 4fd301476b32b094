"""Entry script for the TPU: the only module that names XLA; the rest of the code is given the device."""
import torch_xla.core.xla_model as xm

from agent import Agent
from scoring import score_model

device = xm.xla_device()
agent = Agent("value-net", device, lr=1e-3)
agent.fit(epochs=3)
print(f"held-out accuracy: {score_model(agent.model, agent.held_out, device):.3f}")

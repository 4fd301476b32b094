"""charlm's model (a one-hidden-layer MLP over a character window) and its Adam optimizer, in numpy.

Kept apart from train.py, which holds the data, checkpoints, scalars and the training loop; train.py sets the
BLAS thread variables before this module loads numpy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

PARAM_NAMES = ("emb", "w1", "b1", "w2", "b2")


@dataclass(frozen=True)
class Config:
    vocab: str  # the characters, in id order; workers must agree on it
    context: int = 8
    embed: int = 24
    hidden: int = 384

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------- model


def init_params(cfg: Config, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    vocab, fan_in = len(cfg.vocab), cfg.context * cfg.embed
    return {
        "emb": rng.normal(0, 1.0, (vocab, cfg.embed)).astype(np.float32),
        "w1": (rng.normal(0, 1.0, (fan_in, cfg.hidden)) / np.sqrt(fan_in)).astype(np.float32),
        "b1": np.zeros(cfg.hidden, np.float32),
        "w2": (rng.normal(0, 1.0, (cfg.hidden, vocab)) * 0.01).astype(np.float32),
        "b2": np.zeros(vocab, np.float32),
    }


def forward(params: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    emb = params["emb"][x].reshape(len(x), -1)
    hidden = np.tanh(emb @ params["w1"] + params["b1"])
    logits = hidden @ params["w2"] + params["b2"]
    return logits, {"x": x, "emb": emb, "hidden": hidden}


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def loss_and_grads(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """Mean cross-entropy and its gradients, by hand (numpy has no autodiff)."""
    logits, cache = forward(params, x)
    probs = softmax(logits)
    batch = len(y)
    loss = float(-np.log(probs[np.arange(batch), y] + 1e-9).mean())
    dlogits = probs
    dlogits[np.arange(batch), y] -= 1.0
    dlogits /= batch
    hidden = cache["hidden"]
    dhidden = (dlogits @ params["w2"].T) * (1.0 - hidden**2)
    demb = (dhidden @ params["w1"].T).reshape(*x.shape, -1)
    grad_emb = np.zeros_like(params["emb"])
    np.add.at(grad_emb, x, demb)  # several positions may use the same character
    grads = {
        "emb": grad_emb,
        "w1": cache["emb"].T @ dhidden,
        "b1": dhidden.sum(axis=0),
        "w2": hidden.T @ dlogits,
        "b2": dlogits.sum(axis=0),
    }
    return loss, grads


def flatten(tree: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([tree[name].ravel() for name in PARAM_NAMES]).astype(np.float32)


def unflatten(vector: np.ndarray, like: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out, offset = {}, 0
    for name in PARAM_NAMES:
        size = like[name].size
        out[name] = vector[offset : offset + size].reshape(like[name].shape)
        offset += size
    return out


# ---------------------------------------------------------------------------------------------- optimizer


@dataclass
class State:
    step: int
    params: dict[str, np.ndarray]
    m: dict[str, np.ndarray]  # Adam's first moment
    v: dict[str, np.ndarray]  # Adam's second moment


def new_state(cfg: Config, seed: int) -> State:
    params = init_params(cfg, seed)
    zeros = {name: np.zeros_like(p) for name, p in params.items()}
    return State(0, params, zeros, {name: z.copy() for name, z in zeros.items()})


def learning_rate(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warmup, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + np.cos(np.pi * progress)))


def adam_update(state: State, grads: dict[str, np.ndarray], lr: float, clip: float = 1.0) -> None:
    norm = float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values())))
    scale = min(1.0, clip / (norm + 1e-6))
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    t = state.step + 1
    for name in PARAM_NAMES:
        g = grads[name] * scale
        state.m[name] = beta1 * state.m[name] + (1 - beta1) * g
        state.v[name] = beta2 * state.v[name] + (1 - beta2) * g * g
        m_hat = state.m[name] / (1 - beta1**t)
        v_hat = state.v[name] / (1 - beta2**t)
        state.params[name] = (state.params[name] - lr * m_hat / (np.sqrt(v_hat) + eps)).astype(np.float32)
    state.step = t

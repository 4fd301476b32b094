"""What the training script reports when it ends."""


def summarize(history: list[float]) -> str:
    return f"{len(history)} epochs, best {min(history):.4f}"

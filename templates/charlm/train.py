"""charlm: a small character-level language model, data-parallel over tpuops workers, numpy only.

The quickstart trainer (`tpuops run examples/quickstart.yaml`). It is deliberately plain so that the
contract between tpuops and any trainer is easy to see:

- tpuops sets TPUOPS_WORKER_ID, TPUOPS_NUM_WORKERS, TPUOPS_COORDINATOR (worker 0's host:port),
  TPUOPS_RUN_ID, TPUOPS_LOGDIR and, after a preemption, TPUOPS_RESUME=1 and TPUOPS_RESTART=<n>.
- Every worker trains on its own shard of the text; gradients are averaged every step (collective.py),
  so all workers hold the same parameters, as on the hosts of a TPU pod slice.
- Worker 0 writes TensorBoard scalars to TPUOPS_LOGDIR and a checkpoint every --checkpoint-every steps;
  with TPUOPS_RESUME=1 it restores the latest checkpoint and sends it to the others.

The model: the previous --context characters, embedded, concatenated, one tanh hidden layer, softmax over
the vocabulary (Bengio et al. 2003). Adam, warmup then cosine decay, gradient clipping.

Run alone: python train.py --data ../../examples/data/quickstart.txt --steps 300
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import time
import types
from dataclasses import asdict
from pathlib import Path

# One BLAS thread per worker, set before numpy loads: the matrices are tiny, and several workers on one
# machine (the local simulator) each spinning a thread per core made a step 10x slower when measured.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

try:
    import numpy as np
except ImportError:  # typically: python3 is not the Python tpuops was installed into
    sys.exit(f"charlm: numpy is missing in {sys.executable}; use the Python (venv) where tpuops is installed")
from collective import Group, PeerError  # noqa: E402
from model import (  # noqa: E402
    PARAM_NAMES,
    Config,
    State,
    adam_update,
    flatten,
    forward,
    learning_rate,
    loss_and_grads,
    new_state,
    softmax,
    unflatten,
)

# ---------------------------------------------------------------------------------------------- config


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="data/quickstart.txt", help="UTF-8 text file (see find_data)")
    parser.add_argument("--steps", type=int, default=1000, help="total optimizer steps (a resumed run continues)")
    parser.add_argument("--batch-size", type=int, default=128, help="examples per worker per step")
    parser.add_argument("--context", type=int, default=8)
    parser.add_argument("--embed", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=100, help="print a line every K steps")
    parser.add_argument("--checkpoint-every", type=int, default=200)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("TPUOPS_CHECKPOINT_DIR"),
                        help="default: $TPUOPS_CHECKPOINT_DIR, else $TPUOPS_LOGDIR/../checkpoints")
    parser.add_argument("--logdir", default=os.environ.get("TPUOPS_LOGDIR"), help="default: $TPUOPS_LOGDIR")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for another worker")
    parser.add_argument("--sample", type=int, default=200, help="characters to sample at the end (worker 0)")
    # For rehearsing failures (tpuops run/watch tests): worker --fail-worker exits with 1 at --fail-at-step.
    parser.add_argument("--fail-at-step", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--fail-worker", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if os.environ.get("TPUOPS_MAX_STEPS"):  # `tpuops check` runs a few steps (its preflight sets this)
        args.steps = min(args.steps, int(os.environ["TPUOPS_MAX_STEPS"]))
    return args


# ---------------------------------------------------------------------------------------------- data


def find_data(name: str) -> Path:
    """The text file: as given, else under the working directory's parents or $HOME.

    tpuops pushes the code to ~/tpuops/NAME/code and a `data:` entry with a relative destination next to
    it, so `--data data/quickstart.txt` is found whichever of those directories it landed in.
    """
    path = Path(name).expanduser()
    if path.is_absolute():
        candidates = [path]
    else:
        cwd = Path.cwd()
        candidates = [cwd / path, *(parent / path for parent in cwd.parents), Path.home() / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(c) for c in candidates[:4]) + (" ..." if len(candidates) > 4 else "")
    raise SystemExit(f"charlm: data file {name} not found (looked in {searched}); pass --data PATH")


def load_text(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if len(text) < 1000:
        raise SystemExit(f"charlm: {path} has only {len(text)} characters; give it some real text")
    return text


def shard(ids: np.ndarray, worker_id: int, num_workers: int, context: int) -> np.ndarray:
    """This worker's contiguous slice of the text (with `context` characters of overlap)."""
    size = len(ids) // num_workers
    start = worker_id * size
    return ids[max(0, start - context) : start + size]


def sample_batch(ids: np.ndarray, context: int, batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    starts = rng.integers(0, len(ids) - context - 1, size=batch)
    windows = starts[:, None] + np.arange(context + 1)[None, :]
    chunk = ids[windows]
    return chunk[:, :-1], chunk[:, -1]


# ---------------------------------------------------------------------------------------------- checkpoints


def state_to_bytes(state: State, cfg: Config) -> bytes:
    arrays = {
        f"{kind}.{name}": tree[name]
        for kind, tree in (("p", state.params), ("m", state.m), ("v", state.v))
        for name in PARAM_NAMES
    }
    buffer = io.BytesIO()
    np.savez(buffer, step=np.int64(state.step), config=np.array(json.dumps(asdict(cfg))), **arrays)
    return buffer.getvalue()


def state_from_bytes(data: bytes, cfg: Config) -> State:
    with np.load(io.BytesIO(data)) as archive:
        saved = Config(**json.loads(str(archive["config"])))
        if saved != cfg:
            raise SystemExit(f"charlm: checkpoint was made with {saved}, this run has {cfg}: use another directory")
        trees = [{name: archive[f"{kind}.{name}"] for name in PARAM_NAMES} for kind in ("p", "m", "v")]
        return State(int(archive["step"]), *trees)


def _gfile() -> types.ModuleType:
    """TensorBoard's file layer: local paths, and gs:// where gcsfs is installed."""
    from tensorboard.compat.tensorflow_stub.io import gfile

    return gfile


def checkpoint_path(directory: str) -> str:
    return directory.rstrip("/") + "/charlm-latest.npz"


def save_checkpoint(directory: str, data: bytes) -> None:
    path = checkpoint_path(directory)
    if "://" in directory:
        _gfile().makedirs(directory)
        with _gfile().GFile(path, "wb") as f:  # an object store write is atomic by itself
            f.write(data)
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    Path(tmp).write_bytes(data)
    os.replace(tmp, path)  # a preemption mid-write leaves the previous checkpoint intact


def load_checkpoint(directory: str) -> bytes | None:
    path = checkpoint_path(directory)
    if "://" in directory:
        if not _gfile().exists(path):
            return None
        with _gfile().GFile(path, "rb") as f:
            return f.read()
    return Path(path).read_bytes() if Path(path).is_file() else None


def default_checkpoint_dir(logdir: str | None) -> str:
    if not logdir:
        return "checkpoints"
    # Beside the TensorBoard logs, not inside them: TensorBoard scans its logdir recursively.
    parent = logdir.rstrip("/").rsplit("/", 1)[0] if "/" in logdir.rstrip("/") else "."
    return f"{parent}/checkpoints"


# ---------------------------------------------------------------------------------------------- scalars


class Scalars:
    """TensorBoard scalars with TensorBoard's own event writer (no TensorFlow needed)."""

    def __init__(self, logdir: str) -> None:
        # Use TensorBoard's TF stub even where TensorFlow is installed: importing TF costs seconds.
        sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            sys.exit(f"charlm: tensorboard is missing in {sys.executable}; `pip install tensorboard` there")

        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        self._writer = EventFileWriter(logdir, flush_secs=5)

    def write(self, step: int, values: dict[str, float]) -> None:
        summary = self._summary_pb2.Summary(
            value=[self._summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()]
        )
        self._writer.add_event(self._event_pb2.Event(wall_time=time.time(), step=step, summary=summary))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


# ---------------------------------------------------------------------------------------------- training


def sample_text(params: dict[str, np.ndarray], cfg: Config, prompt: str, length: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    index = {ch: i for i, ch in enumerate(cfg.vocab)}
    ids = [index.get(ch, 0) for ch in prompt.rjust(cfg.context)[-cfg.context :]]
    out = []
    for _ in range(length):
        logits, _ = forward(params, np.array([ids[-cfg.context :]]))
        probs = softmax(logits / 0.8)[0].astype(np.float64)
        nxt = int(rng.choice(len(probs), p=probs / probs.sum()))
        ids.append(nxt)
        out.append(cfg.vocab[nxt])
    return prompt + "".join(out)


def param_digest(params: dict[str, np.ndarray]) -> str:
    return hashlib.sha256(flatten(params).tobytes()).hexdigest()[:16]


def log(worker_id: int, message: str) -> None:
    # Flush every line: the output goes to a log file that `tpuops logs` tails. tpuops prefixes every line
    # with its worker ([w0]); only a run outside tpuops needs to say which worker speaks.
    prefix = "" if os.environ.get("TPUOPS_RUN_ID") else f"[w{worker_id}] "
    print(f"{prefix}{message}", flush=True)


def train(args: argparse.Namespace) -> int:
    worker_id = int(os.environ.get("TPUOPS_WORKER_ID", "0"))
    num_workers = int(os.environ.get("TPUOPS_NUM_WORKERS", "1"))
    resume = os.environ.get("TPUOPS_RESUME") == "1"
    restart = os.environ.get("TPUOPS_RESTART")
    text = load_text(find_data(args.data))
    cfg = Config(vocab="".join(sorted(set(text))), context=args.context, embed=args.embed, hidden=args.hidden)
    char_id = {ch: i for i, ch in enumerate(cfg.vocab)}
    ids = np.fromiter((char_id[ch] for ch in text), dtype=np.int32, count=len(text))
    held_out = ids[int(len(ids) * 0.95) :]  # the last 5% is never trained on: worker 0 reports eval_loss on it
    mine = shard(ids[: int(len(ids) * 0.95)], worker_id, num_workers, cfg.context)
    checkpoint_dir = args.checkpoint_dir or default_checkpoint_dir(args.logdir)
    log(
        worker_id,
        f"worker {worker_id}/{num_workers}, {len(mine):,} of {len(ids):,} characters, "
        f"vocab {len(cfg.vocab)}, resume={resume}" + (f", restart {restart}" if restart else ""),
    )

    group = Group.connect(
        worker_id,
        num_workers,
        os.environ.get("TPUOPS_COORDINATOR"),
        os.environ.get("TPUOPS_RUN_ID", "local"),
        timeout=args.timeout,
    )
    try:
        state = start_state(group, cfg, args, checkpoint_dir, resume)
        scalars = Scalars(args.logdir) if worker_id == 0 and args.logdir else None
        try:
            run_steps(group, state, cfg, args, mine, held_out, scalars, checkpoint_dir)
        finally:
            if scalars:
                scalars.close()
    finally:
        group.close()
    if worker_id == 0 and args.sample:
        log(worker_id, "sample: " + repr(sample_text(state.params, cfg, "The ", args.sample, args.seed)))
    log(worker_id, f"done at step {state.step}, params {param_digest(state.params)}")
    return 0


def start_state(group: Group, cfg: Config, args: argparse.Namespace, checkpoint_dir: str, resume: bool) -> State:
    """Worker 0 decides (fresh or restored) and sends the state to all: every worker starts identical."""
    data = b""
    if group.worker_id == 0:
        saved = load_checkpoint(checkpoint_dir) if resume else None
        if resume and saved is None:
            log(0, f"TPUOPS_RESUME=1 but no checkpoint in {checkpoint_dir}: starting from step 0")
        state = state_from_bytes(saved, cfg) if saved else new_state(cfg, args.seed)
        if saved:
            log(0, f"resumed from step {state.step} ({checkpoint_path(checkpoint_dir)})")
        data = state_to_bytes(state, cfg)
    try:
        return state_from_bytes(group.broadcast(data), cfg)
    except SystemExit as err:  # the others' text differs from worker 0's
        raise PeerError(f"worker {group.worker_id} does not match worker 0: {err}") from None


def run_steps(
    group: Group,
    state: State,
    cfg: Config,
    args: argparse.Namespace,
    ids: np.ndarray,
    held_out: np.ndarray,
    scalars: Scalars | None,
    checkpoint_dir: str,
) -> None:
    worker_id = group.worker_id
    tokens_per_step = args.batch_size * group.num_workers
    window_start, window_steps = time.perf_counter(), 0
    while state.step < args.steps:
        # Seeded by (seed, worker, step): a resumed run sees the batches it would have seen.
        rng = np.random.default_rng([args.seed, worker_id, state.step])
        x, y = sample_batch(ids, cfg.context, args.batch_size, rng)
        loss, grads = loss_and_grads(state.params, x, y)
        reduced = group.allreduce_mean(np.append(flatten(grads), np.float32(loss)))
        mean_grads, mean_loss = unflatten(reduced[:-1], state.params), float(reduced[-1])
        lr = learning_rate(state.step, args.lr, args.warmup, args.steps)
        adam_update(state, mean_grads, lr)
        window_steps += 1
        if state.step == args.fail_at_step and worker_id == args.fail_worker:
            log(worker_id, f"failing on purpose at step {state.step} (--fail-at-step)")
            raise SystemExit(1)
        elapsed = time.perf_counter() - window_start
        tokens_per_sec = tokens_per_step * window_steps / max(elapsed, 1e-9)
        if scalars:
            scalars.write(state.step, {"loss": mean_loss, "learning_rate": lr, "tokens_per_sec": tokens_per_sec})
        if state.step == 1 or state.step % args.log_every == 0 or state.step == args.steps:
            line = f"step {state.step}/{args.steps} loss {mean_loss:.4f} lr {lr:.2e} tokens/s {tokens_per_sec:,.0f}"
            if worker_id == 0:
                eval_loss = evaluate(state.params, held_out, cfg)
                if scalars:
                    scalars.write(state.step, {"eval_loss": eval_loss})
                    scalars.flush()
                line += f" eval_loss {eval_loss:.4f}"
            if worker_id == 0 or state.step in (1, args.steps):  # the others only show that they run
                log(worker_id, line)
            window_start, window_steps = time.perf_counter(), 0
        if worker_id == 0 and (state.step % args.checkpoint_every == 0 or state.step == args.steps):
            save_checkpoint(checkpoint_dir, state_to_bytes(state, cfg))


def evaluate(params: dict[str, np.ndarray], ids: np.ndarray, cfg: Config, examples: int = 1024) -> float:
    rng = np.random.default_rng(12345)  # the same held-out examples every time: comparable values
    x, y = sample_batch(ids, cfg.context, examples, rng)
    probs = softmax(forward(params, x)[0])
    return float(-np.log(probs[np.arange(len(y)), y] + 1e-9).mean())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return train(args)
    except PeerError as err:
        print(f"charlm: {err}", file=sys.stderr, flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(main())

"""A small causal Transformer language model in plain JAX, data-parallel over every device of a TPU slice.

- Multi-host slices: every host runs this script; `jax.distributed.initialize()` joins them into one
  program. tpuops passes TPUOPS_COORDINATOR / TPUOPS_NUM_WORKERS / TPUOPS_WORKER_ID, used here when set
  (on a Cloud TPU, initialize() could also find them by itself; the local simulator needs them).
- One mesh over all devices of all hosts; the batch is sharded over it, the parameters are replicated,
  and `jax.jit` inserts the gradient all-reduce. The same code runs on 1 CPU, on a v3-8 and on a v4-32.
- Multislice (TPUOPS_NUM_SLICES > 1): the mesh gets an outer "slice" axis (over the data-center network) and
  an inner "data" axis (within a slice), and the batch is sharded over both: data-parallel across slices, the
  gradients reduced within each slice over ICI before they cross between slices.
- Each host feeds only its own slice of the global batch (`make_array_from_process_local_data`).
- bfloat16 matmuls on TPU (native on every TPU generation), float32 master weights; float32 on CPU.
- Fixed shapes (blocks of --block-size tokens, a fixed batch): XLA compiles the step once.
- Process 0 writes TensorBoard scalars (loss, learning_rate, tokens_per_sec) to TPUOPS_LOGDIR and a
  checkpoint every --checkpoint-every steps beside it; with TPUOPS_RESUME=1 every host restores it.

Only jax and numpy are needed (plus tensorboard for the scalars, gcsfs for gs:// paths): no flax or
optax, so the template shows every step and installs in seconds.

CPU try-out: python train.py --data ../../examples/data/quickstart.txt --steps 30 --logdir /tmp/jax/logs
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
import time
import types
from typing import Any

import numpy as np

VOCAB = 256  # byte-level tokens: no tokenizer download


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", required=True, help="UTF-8 text files (local, or gs:// with gcsfs)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32, help="global batch, a multiple of the device count")
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--checkpoint-dir", default=None, help="default: $TPUOPS_LOGDIR/../checkpoints")
    parser.add_argument("--logdir", default=os.environ.get("TPUOPS_LOGDIR", "logs"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if os.environ.get("TPUOPS_MAX_STEPS"):  # `tpuops check` runs a few steps (its preflight sets this)
        args.steps = min(args.steps, int(os.environ["TPUOPS_MAX_STEPS"]))
    if os.environ.get("TPUOPS_PREFLIGHT") == "1":
        shrink_for_preflight(args)
    return args


# `tpuops check` runs this same code on the CPU of a laptop (TPUOPS_PREFLIGHT=1): sizes capped to a toy
# configuration of the same structure, so that a pod-sized configuration still fits there.
PREFLIGHT_SIZES = {"dim": 64, "layers": 2, "heads": 2, "block_size": 64, "batch_size": 8}


def shrink_for_preflight(args: argparse.Namespace) -> None:
    """Cap the model and batch sizes for the preflight; TPUOPS_PREFLIGHT_FULL_SIZE=1 (a spec's `check: {env:
    ...}`) keeps them as given."""
    if os.environ.get("TPUOPS_PREFLIGHT_FULL_SIZE") == "1":
        return
    capped = {name: min(getattr(args, name), most) for name, most in PREFLIGHT_SIZES.items()}
    if capped["dim"] % capped["heads"]:
        capped["heads"] = 1
    changed = {name: value for name, value in capped.items() if value != getattr(args, name)}
    for name, value in capped.items():
        setattr(args, name, value)
    if changed:
        print(f"preflight (TPUOPS_PREFLIGHT=1): toy sizes {changed}", flush=True)


# ---------------------------------------------------------------------------------------------- distributed


def init_distributed() -> None:
    """Join the other hosts (before any other JAX call). Single process: nothing to do."""
    import jax

    num = int(os.environ.get("TPUOPS_NUM_WORKERS", "1"))
    if num <= 1:
        return
    # CPU processes (the local simulator) exchange gradients over gloo; this only concerns the CPU backend.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    coordinator = os.environ.get("TPUOPS_COORDINATOR")
    if coordinator:
        jax.distributed.initialize(coordinator, num_processes=num, process_id=int(os.environ["TPUOPS_WORKER_ID"]))
    else:
        jax.distributed.initialize()  # a Cloud TPU slice describes itself through its metadata


# ---------------------------------------------------------------------------------------------- files


def _fs_open(path: str, mode: str) -> Any:
    if "://" in path:
        import fsspec

        return fsspec.open(path, mode).open()
    return open(path, mode)  # noqa: SIM115 (the caller closes it)


def read_tokens(paths: list[str]) -> np.ndarray:
    chunks = []
    for path in paths:
        with _fs_open(path, "rb") as f:
            chunks.append(np.frombuffer(f.read(), dtype=np.uint8))
    return np.concatenate(chunks).astype(np.int32)


def default_checkpoint_dir(logdir: str) -> str:
    # Beside the logs, not inside: TensorBoard scans its logdir recursively.
    parent = logdir.rstrip("/").rsplit("/", 1)[0] if "/" in logdir.rstrip("/") else "."
    return f"{parent}/checkpoints"


def save_checkpoint(directory: str, step: int, tree: dict[str, np.ndarray]) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, step=np.int64(step), **tree)
    path = f"{directory.rstrip('/')}/latest.npz"
    if "://" in path:
        with _fs_open(path, "wb") as f:  # an object store write is atomic by itself
            f.write(buffer.getvalue())
        return
    os.makedirs(directory, exist_ok=True)
    with open(f"{path}.tmp", "wb") as f:
        f.write(buffer.getvalue())
    os.replace(f"{path}.tmp", path)  # a preemption mid-write leaves the previous checkpoint intact


def load_checkpoint(directory: str) -> dict[str, np.ndarray] | None:
    path = f"{directory.rstrip('/')}/latest.npz"
    if "://" in path:
        import fsspec

        if not fsspec.core.url_to_fs(path)[0].exists(path):
            return None
    elif not os.path.isfile(path):
        return None
    with _fs_open(path, "rb") as f, np.load(io.BytesIO(f.read())) as archive:
        return {key: archive[key] for key in archive.files}


# ---------------------------------------------------------------------------------------------- model


def init_params(key: Any, args: argparse.Namespace) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    dim, keys = args.dim, iter(jax.random.split(key, 4 + 4 * args.layers))

    def normal(shape: tuple[int, ...], std: float = 0.02) -> Any:
        return std * jax.random.normal(next(keys), shape, jnp.float32)

    params = {"tok": normal((VOCAB, dim)), "pos": normal((args.block_size, dim)),
              "lnf_g": jnp.ones(dim), "lnf_b": jnp.zeros(dim)}  # fmt: skip
    for i in range(args.layers):
        params |= {
            f"b{i}_ln1_g": jnp.ones(dim), f"b{i}_ln1_b": jnp.zeros(dim),
            f"b{i}_qkv": normal((dim, 3 * dim)), f"b{i}_out": normal((dim, dim)),
            f"b{i}_ln2_g": jnp.ones(dim), f"b{i}_ln2_b": jnp.zeros(dim),
            f"b{i}_up": normal((dim, 4 * dim)), f"b{i}_down": normal((4 * dim, dim)),
        }  # fmt: skip
    return params


def forward(params: dict[str, Any], tokens: Any, layers: int, heads: int, dtype: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def norm(x: Any, g: Any, b: Any) -> Any:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g + b

    def mm(x: Any, w: Any) -> Any:  # bfloat16 on TPU, accumulate in float32
        return jnp.matmul(x.astype(dtype), w.astype(dtype), preferred_element_type=jnp.float32)

    batch, length = tokens.shape
    x = params["tok"][tokens] + params["pos"][:length]
    causal = jnp.tril(jnp.ones((length, length), bool))
    for i in range(layers):
        h = norm(x, params[f"b{i}_ln1_g"], params[f"b{i}_ln1_b"])
        q, k, v = jnp.split(mm(h, params[f"b{i}_qkv"]), 3, axis=-1)
        q, k, v = (t.reshape(batch, length, heads, -1) for t in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        attn = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        x = x + mm(jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(batch, length, -1), params[f"b{i}_out"])
        h = norm(x, params[f"b{i}_ln2_g"], params[f"b{i}_ln2_b"])
        x = x + mm(jax.nn.gelu(mm(h, params[f"b{i}_up"])), params[f"b{i}_down"])
    return mm(norm(x, params["lnf_g"], params["lnf_b"]), params["tok"].T)  # tied output embedding


def learning_rate(step: Any, args: argparse.Namespace) -> Any:
    import jax.numpy as jnp

    warm = args.lr * (step + 1) / args.warmup
    progress = jnp.clip((step - args.warmup) / max(1, args.steps - args.warmup), 0.0, 1.0)
    return jnp.where(step < args.warmup, warm, args.lr * (0.1 + 0.45 * (1 + jnp.cos(jnp.pi * progress))))


def make_train_step(args: argparse.Namespace, dtype: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def loss_fn(params: dict[str, Any], inputs: Any, labels: Any) -> Any:
        logits = forward(params, inputs, args.layers, args.heads, dtype)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        return -jnp.take_along_axis(logp, labels[..., None], axis=-1).mean()

    def step_fn(state: dict[str, Any], batch: Any) -> tuple[dict[str, Any], Any, Any]:
        """One AdamW step. The batch is sharded over devices; jit adds the all-reduce of the gradients."""
        inputs, labels = batch[:, :-1], batch[:, 1:]
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], inputs, labels)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(grads)))
        grads = jax.tree.map(lambda g: g * jnp.minimum(1.0, 1.0 / (norm + 1e-6)), grads)
        t = state["step"] + 1
        lr = learning_rate(state["step"], args)
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, state["m"], grads)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, state["v"], grads)

        def update(p: Any, m: Any, v: Any) -> Any:
            m_hat, v_hat = m / (1 - 0.9**t), v / (1 - 0.999**t)
            return p - lr * (m_hat / (jnp.sqrt(v_hat) + 1e-8) + 0.01 * p * (p.ndim > 1))

        params = jax.tree.map(update, state["params"], m, v)
        return {"params": params, "m": m, "v": v, "step": t}, loss, lr

    return step_fn


# ---------------------------------------------------------------------------------------------- training


class Scalars:
    """TensorBoard scalars through TensorBoard's own writer (no TensorFlow needed)."""

    def __init__(self, logdir: str) -> None:
        if "://" not in logdir:  # TensorBoard's stub file layer: skips importing TF where it is installed
            sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.event_pb2, self.summary_pb2 = event_pb2, summary_pb2
        self.writer = EventFileWriter(logdir, flush_secs=10)

    def write(self, step: int, values: dict[str, float]) -> None:
        value = [self.summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        summary = self.summary_pb2.Summary(value=value)
        self.writer.add_event(self.event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def log(message: str) -> None:
    print(f"[jax w{os.environ.get('TPUOPS_WORKER_ID', '0')}] {message}", flush=True)


def data_mesh(devices: list[Any], processes: int) -> tuple[Any, Any]:
    """The mesh the batch is sharded over, and its batch axes: ("slice", "data") with Multislice, else "data"."""
    from jax.sharding import Mesh

    slices = int(os.environ.get("TPUOPS_NUM_SLICES", "1"))
    if slices <= 1:
        return Mesh(np.array(devices), ("data",)), "data"
    if len(devices) % slices:
        raise SystemExit(f"{len(devices)} devices do not split into TPUOPS_NUM_SLICES={slices} slices")

    def slice_of(device: Any) -> int:
        known = getattr(device, "slice_index", None)  # a TPU device knows its slice
        # elsewhere (CPU), from the host: tpuops numbers hosts slice by slice
        return known if known is not None else device.process_index * slices // processes

    ordered = sorted(devices, key=lambda device: (slice_of(device), device.id))
    return Mesh(np.array(ordered).reshape(slices, -1), ("slice", "data")), ("slice", "data")


def train(args: argparse.Namespace) -> int:
    init_distributed()
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    devices = jax.devices()
    if args.batch_size % len(devices):
        raise SystemExit(f"--batch-size {args.batch_size} must be a multiple of the {len(devices)} devices")
    mesh, batch_axes = data_mesh(devices, jax.process_count())
    replicated, sharded = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec(batch_axes))
    dtype = jnp.bfloat16 if jax.default_backend() == "tpu" else jnp.float32
    process, processes = jax.process_index(), jax.process_count()
    local_batch = args.batch_size // processes

    params = init_params(jax.random.PRNGKey(args.seed), args)  # same seed: identical on every host
    state = {"params": params, "m": jax.tree.map(jnp.zeros_like, params),
             "v": jax.tree.map(jnp.zeros_like, params), "step": jnp.int32(0)}  # fmt: skip
    checkpoint_dir = args.checkpoint_dir or default_checkpoint_dir(args.logdir)
    state = maybe_resume(state, checkpoint_dir)
    state = jax.device_put(state, replicated)
    step_fn = jax.jit(make_train_step(args, dtype), donate_argnums=0)

    tokens = read_tokens(args.data)
    scalars = Scalars(args.logdir) if process == 0 else None
    log(f"process {process}/{processes}, {len(devices)} {jax.default_backend()} device(s), mesh "
        f"{' x '.join(f'{axis}={size}' for axis, size in mesh.shape.items())}, {len(tokens):,} tokens, "
        f"{sum(p.size for p in jax.tree.leaves(params)):,} parameters")  # fmt: skip
    step, started, seen = int(state["step"]), time.perf_counter(), 0
    while step < args.steps:
        local = local_blocks(tokens, args, local_batch, process, step)
        batch = jax.make_array_from_process_local_data(sharded, local)
        state, loss, lr = step_fn(state, batch)
        step += 1
        seen += args.batch_size * args.block_size
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            value, rate = float(loss), seen / max(time.perf_counter() - started, 1e-9)  # float() waits for the TPU
            if scalars:
                scalars.write(step, {"loss": value, "learning_rate": float(lr), "tokens_per_sec": rate})
            log(f"step {step}/{args.steps} loss {value:.4f} lr {float(lr):.2e} tokens/s {rate:,.0f}")
            started, seen = time.perf_counter(), 0  # the rate over the last interval, not since the start
        if step % args.checkpoint_every == 0 or step == args.steps:
            host = jax.tree.map(np.asarray, state)  # replicated: every host has the whole state
            if process == 0:
                save_checkpoint(checkpoint_dir, step, flatten(host))
    if scalars:
        scalars.close()
    log(f"done at step {step}")
    return 0


def local_blocks(tokens: np.ndarray, args: argparse.Namespace, batch: int, process: int, step: int) -> np.ndarray:
    """This host's part of the global batch, seeded by (seed, host, step): a resumed run sees the same data."""
    rng = np.random.default_rng([args.seed, process, step])
    starts = rng.integers(0, len(tokens) - args.block_size - 1, size=batch)
    return tokens[starts[:, None] + np.arange(args.block_size + 1)[None, :]]


def flatten(state: dict[str, Any]) -> dict[str, np.ndarray]:
    out = {f"{kind}.{name}": value for kind in ("params", "m", "v") for name, value in state[kind].items()}
    return out | {"step_count": np.asarray(state["step"])}


def maybe_resume(state: dict[str, Any], directory: str) -> dict[str, Any]:
    if os.environ.get("TPUOPS_RESUME") != "1":
        return state
    saved = load_checkpoint(directory)
    if saved is None:
        log(f"TPUOPS_RESUME=1 but no checkpoint in {directory}: starting from step 0")
        return state
    restored = {kind: {name: saved[f"{kind}.{name}"] for name in state[kind]} for kind in ("params", "m", "v")}
    restored["step"] = np.int32(saved["step_count"])
    restart = os.environ.get("TPUOPS_RESTART")
    log(f"resumed from step {int(saved['step'])} ({directory})" + (f", restart {restart}" if restart else ""))
    return restored


if __name__ == "__main__":
    sys.exit(train(parse_args()))

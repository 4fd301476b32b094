"""A small BERT-style masked language model in TensorFlow/Keras that follows the TPU advice.

One script for a Cloud TPU (TPU VM, or a legacy TPU Node driven from a client VM) and for CPU/GPU:

- TPUStrategy when a TPU is there (TPU_NAME: `local` on a TPU VM, the Node's name on a legacy Node;
  tpuops sets it), the default strategy otherwise.
- Model, optimizer, checkpoint and dataset are created inside `strategy.scope()`, so that every
  variable is placed (and replicated) on the TPU cores instead of the host CPU.
- Batches are padded to a multiple of 64 tokens: XLA compiles one program per input shape, and padding
  to the longest example of each batch would give dozens of shapes (minutes of compilation each on a
  TPU); multiples of 64 give max_len / 64 of them. The batch dimension is fixed (drop_remainder).
- The masked loss multiplies by a 0/1 weight instead of selecting with tf.boolean_mask: boolean
  indexing makes the shape depend on the data, which XLA cannot compile.
- `--check-xla` compiles the training step with jit_compile=True on CPU/GPU, so that an op XLA cannot
  handle fails here in seconds instead of on the TPU after setup (on a TPU XLA is always on).
- TensorBoard scalars (loss, learning_rate, tokens_per_sec) to TPUOPS_LOGDIR, local or gs://; a
  checkpoint every --checkpoint-every steps beside it, restored when TPUOPS_RESUME=1.

Data: UTF-8 text files, one example per line (local or gs://; a legacy Node's TPU host reads only gs://),
tokenized as bytes inside tf.data. Byte-level tokens keep the template free of tokenizer downloads;
for real runs, swap in your tokenizer (or TFRecords of token ids) in `encode_line`.

CPU try-out: python train.py --data ../../examples/data/quickstart.txt --steps 30 --logdir /tmp/tf/logs
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _idle_unless_worker_0() -> None:
    """TensorFlow drives every host of a slice from one client (TPUClusterResolver), so other workers idle.

    Decided before `import tensorflow`: importing it on a TPU host already claims the TPU.
    """
    worker, workers = int(os.environ.get("TPUOPS_WORKER_ID", "0")), int(os.environ.get("TPUOPS_NUM_WORKERS", "1"))
    if worker != 0 and __name__ == "__main__":
        print(f"[tf w{worker}] worker {worker}/{workers}: TensorFlow runs the whole slice from worker 0; "
              "nothing to do here", flush=True)  # fmt: skip
        sys.exit(0)


_idle_unless_worker_0()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

PAD, MASK, CLS = 256, 257, 258  # byte values are 0..255; three special tokens follow them
VOCAB = 384  # 259 tokens padded up to a multiple of 128: the TPU's matrix units work in 128-wide tiles
PAD_MULTIPLE = 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", required=True, help="text files or glob patterns, local or gs://")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32, help="global batch (split over the TPU cores)")
    parser.add_argument("--max-len", type=int, default=128, help="tokens per example, a multiple of 64")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--mask-rate", type=float, default=0.15)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--checkpoint-dir", default=None, help="default: $TPUOPS_LOGDIR/../checkpoints")
    parser.add_argument("--logdir", default=os.environ.get("TPUOPS_LOGDIR", "logs"))
    parser.add_argument("--tpu", default=os.environ.get("TPU_NAME"), help="default: $TPU_NAME; none: CPU/GPU")
    parser.add_argument("--check-xla", action="store_true", default=os.environ.get("TPUOPS_PREFLIGHT") == "1",
                        help="jit_compile the step on CPU/GPU (on by default under `tpuops check`)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.max_len % PAD_MULTIPLE:
        parser.error(f"--max-len must be a multiple of {PAD_MULTIPLE}")
    if os.environ.get("TPUOPS_MAX_STEPS"):  # `tpuops check` runs a few steps (its preflight sets this)
        args.steps = min(args.steps, int(os.environ["TPUOPS_MAX_STEPS"]))
    if os.environ.get("TPUOPS_PREFLIGHT") == "1":
        shrink_for_preflight(args)
    return args


# `tpuops check` runs this same code on the CPU of a laptop (TPUOPS_PREFLIGHT=1): sizes capped to a toy
# configuration of the same structure, so that a pod-sized configuration still fits there.
PREFLIGHT_SIZES = {"dim": 64, "layers": 2, "heads": 2, "max_len": 64, "batch_size": 8}


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


def log(message: str) -> None:
    print(f"[tf w{os.environ.get('TPUOPS_WORKER_ID', '0')}] {message}", flush=True)


# ---------------------------------------------------------------------------------------------- strategy


def make_strategy(tpu: str | None) -> tuple[tf.distribute.Strategy, bool]:
    """TPUStrategy when TPU_NAME names a TPU, else the default (CPU or one GPU) strategy."""
    if not tpu:
        return tf.distribute.get_strategy(), False
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    if tpu != "local":
        # A legacy TPU Node (or a multi-host slice) is reached over gRPC from this VM.
        tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver), True


# ---------------------------------------------------------------------------------------------- data


def text_files(patterns: list[str]) -> list[str]:
    paths = sorted(path for pattern in patterns for path in tf.io.gfile.glob(pattern))
    if not paths:
        raise SystemExit(f"tensorflow template: no file matches {patterns}")
    return paths


def encode_line(line: tf.Tensor, max_len: int) -> tf.Tensor:
    """One line of text -> [CLS] + its UTF-8 bytes, at most max_len tokens. Lengths vary, as real data's do."""
    tokens = tf.cast(tf.io.decode_raw(line, tf.uint8), tf.int32)[: max_len - 1]
    return tf.concat([[CLS], tokens], axis=0)


def pad_to_multiple(tokens: tf.Tensor, multiple: int = PAD_MULTIPLE) -> tf.Tensor:
    """Pad the time axis of a [batch, time] batch up to the next multiple (same idea as HF pad_to_multiple_of)."""
    length = tf.shape(tokens)[1]
    target = (length + multiple - 1) // multiple * multiple
    return tf.pad(tokens, [[0, 0], [0, target - length]], constant_values=PAD)


def mask_tokens(tokens: tf.Tensor, rate: float) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """BERT masking: inputs with some tokens replaced by [MASK], the originals, and a 0/1 loss weight."""
    maskable = tf.logical_and(tokens != PAD, tokens != CLS)
    chosen = tf.logical_and(tf.random.uniform(tf.shape(tokens)) < rate, maskable)
    inputs = tf.where(chosen, tf.cast(MASK, tokens.dtype), tokens)
    return inputs, tokens, tf.cast(chosen, tf.float32)


def make_dataset(paths: list[str], batch_size: int, max_len: int, rate: float, seed: int) -> tf.data.Dataset:
    """A tf.data pipeline from the text files: on a legacy Node it runs on the TPU host, reading gs://."""
    data = tf.data.TextLineDataset(paths).filter(lambda line: tf.strings.length(line) > 8)
    data = data.map(lambda line: encode_line(line, max_len)).repeat().shuffle(10_000, seed=seed)
    # padded_batch pads to the longest example of the batch; drop_remainder fixes the batch dimension.
    data = data.padded_batch(batch_size, padded_shapes=[None], padding_values=PAD, drop_remainder=True)
    data = data.map(pad_to_multiple).map(lambda tokens: mask_tokens(tokens, rate))
    return data.prefetch(tf.data.AUTOTUNE)


# ---------------------------------------------------------------------------------------------- model


class MaskedLM(tf.keras.Model):
    """Token + position embeddings, a few pre-norm Transformer encoder blocks, logits over the vocabulary."""

    def __init__(self, dim: int, layers: int, heads: int, max_len: int) -> None:
        super().__init__()
        keras = tf.keras
        self.tokens = keras.layers.Embedding(VOCAB, dim)
        self.positions = keras.layers.Embedding(max_len, dim)
        self.blocks = [
            (
                keras.layers.LayerNormalization(),
                keras.layers.MultiHeadAttention(heads, dim // heads),
                keras.layers.LayerNormalization(),
                keras.layers.Dense(4 * dim, activation="gelu"),
                keras.layers.Dense(dim),
            )
            for _ in range(layers)
        ]
        self.final_norm = keras.layers.LayerNormalization()
        self.out = keras.layers.Dense(VOCAB)

    def call(self, tokens: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = self.tokens(tokens) + self.positions(tf.range(tf.shape(tokens)[1]))[None]
        attend = (tokens != PAD)[:, None, :]  # [batch, 1, time]: padding is never attended to
        for norm1, attention, norm2, up, down in self.blocks:
            h = norm1(x)
            x = x + attention(h, h, attention_mask=attend, training=training)
            x = x + down(up(norm2(x)))
        return self.out(self.final_norm(x))


def build_model(args: argparse.Namespace) -> MaskedLM:
    model = MaskedLM(args.dim, args.layers, args.heads, args.max_len)
    model(tf.fill([1, PAD_MULTIPLE], CLS))  # create the variables now, inside the caller's strategy.scope()
    return model


class WarmupCosine(tf.keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, peak: float, warmup: int, total: int) -> None:
        self.peak, self.warmup, self.total = peak, warmup, total

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        step = tf.cast(step, tf.float32)
        warm = self.peak * (step + 1.0) / self.warmup
        progress = tf.minimum(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        cosine = self.peak * (0.1 + 0.45 * (1.0 + tf.cos(np.pi * progress)))
        return tf.where(step < self.warmup, warm, cosine)

    def get_config(self) -> dict[str, float]:
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total}


def masked_loss(labels: tf.Tensor, logits: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    """Mean cross-entropy over the masked positions: a multiply by the 0/1 weights, no boolean indexing."""
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=tf.cast(logits, tf.float32))
    return tf.reduce_sum(per_token * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


# ---------------------------------------------------------------------------------------------- training


def default_checkpoint_dir(logdir: str) -> str:
    # Beside the logs, not inside: TensorBoard scans its logdir recursively.
    parent = logdir.rstrip("/").rsplit("/", 1)[0] if "/" in logdir.rstrip("/") else "."
    return f"{parent}/checkpoints"


def train(args: argparse.Namespace) -> int:
    tf.keras.utils.set_random_seed(args.seed)
    strategy, on_tpu = make_strategy(args.tpu)
    jit = args.check_xla and not on_tpu  # on a TPU everything is compiled by XLA anyway
    log(f"strategy {type(strategy).__name__}, {strategy.num_replicas_in_sync} replica(s), jit_compile={jit}")

    with strategy.scope():  # variables created here live on (and are mirrored across) the TPU cores
        paths = text_files(args.data)
        dataset = strategy.experimental_distribute_dataset(
            make_dataset(paths, args.batch_size, args.max_len, args.mask_rate, args.seed)
        )
        model = build_model(args)
        schedule = WarmupCosine(args.lr, args.warmup, args.steps)
        optimizer = tf.keras.optimizers.AdamW(schedule, weight_decay=0.01, clipnorm=1.0)
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    manager = tf.train.CheckpointManager(
        checkpoint, args.checkpoint_dir or default_checkpoint_dir(args.logdir), max_to_keep=2
    )
    restore(manager, step)
    log(f"{len(paths)} file(s), {model.count_params():,} parameters")

    @tf.function(jit_compile=jit)
    def replica_step(inputs: tf.Tensor, labels: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = masked_loss(labels, model(inputs, training=True), weights)
            # Gradients are summed over replicas: scale so that the update is their mean.
            scaled = loss / strategy.num_replicas_in_sync
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(batch: tuple[tf.Tensor, tf.Tensor, tf.Tensor]) -> tf.Tensor:
        losses = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    writer = tf.summary.create_file_writer(args.logdir)
    iterator = iter(dataset)
    current = int(step.numpy())  # a Python counter: reading the TPU variable every step would stall it
    started, tokens = time.perf_counter(), 0
    while current < args.steps:
        batch = next(iterator)
        loss = train_step(batch)  # returns at once; the value is fetched only on logging steps
        current += 1
        tokens += args.batch_size * int(strategy.experimental_local_results(batch[0])[0].shape[1])
        if current == 1 or current % args.log_every == 0 or current == args.steps:
            value, rate = float(loss), tokens / max(time.perf_counter() - started, 1e-9)
            with writer.as_default(step=current):
                tf.summary.scalar("loss", value)
                tf.summary.scalar("learning_rate", float(schedule(current - 1)))
                tf.summary.scalar("tokens_per_sec", rate)
            writer.flush()
            log(f"step {current}/{args.steps} loss {value:.4f} tokens/s {rate:,.0f}")
            started, tokens = time.perf_counter(), 0  # the rate over the last interval, not since the start
        if current % args.checkpoint_every == 0 or current == args.steps:
            step.assign(current)
            manager.save(checkpoint_number=current)
    writer.close()
    log(f"done at step {current}")
    return 0


def restore(manager: tf.train.CheckpointManager, step: tf.Variable) -> None:
    if os.environ.get("TPUOPS_RESUME") != "1":
        return
    if manager.latest_checkpoint is None:
        log(f"TPUOPS_RESUME=1 but no checkpoint in {manager.directory}: starting from step 0")
        return
    manager.checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    restart = os.environ.get("TPUOPS_RESTART")
    log(
        f"resumed from step {int(step.numpy())} ({manager.latest_checkpoint})"
        + (f", restart {restart}" if restart else "")
    )


if __name__ == "__main__":
    sys.exit(train(parse_args()))

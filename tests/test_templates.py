"""The trainer templates train for real on CPU: loss goes down, scalars are written, a resumed run continues.

charlm (the quickstart trainer) needs only numpy and tensorboard and always runs, including 2 workers
averaging gradients over loopback. The framework templates are marked heavy and skip when their
framework is not installed (CI installs them: see .ci/run).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import require_module

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"
CORPUS = ROOT / "examples" / "data" / "quickstart.txt"
TIMEOUT = 240  # seconds for one trainer process: generous for 2 busy cores, never reached when healthy


# ---------------------------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def trainer_env(logdir: Path, worker_id: int = 0, num_workers: int = 1, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPUOPS_")}
    env.update(
        TPUOPS_RUN_ID="test-run",
        TPUOPS_CLUSTER="test",
        TPUOPS_WORKER_ID=str(worker_id),
        TPUOPS_NUM_WORKERS=str(num_workers),
        TPUOPS_LOGDIR=str(logdir),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return proc


def tfrecords(path: Path):
    """The records of a TFRecord file (length, CRC, data, CRC), read without TensorFlow."""
    data = path.read_bytes()
    offset = 0
    while offset + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        start = offset + 12
        if start + length + 4 > len(data):
            break  # a record still being written
        yield data[start : start + length]
        offset = start + length + 4


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from every event file under logdir, with TensorBoard's protos.

    Scalars come as `simple_value` (TensorBoard's writer, tf.keras callbacks in TF1 style) or as a
    0-d float tensor (tf.summary.scalar in TF2); both are read.
    """
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(logdir.rglob("*tfevents*")):
        for record in tfrecords(path):
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    number = value.simple_value
                elif value.HasField("tensor"):
                    number = float(tensor_util.make_ndarray(value.tensor).reshape(-1)[0])
                else:
                    continue
                scalars.setdefault(value.tag, []).append((event.step, number))
    for points in scalars.values():
        points.sort()
    return scalars


def assert_loss_went_down(points: list[tuple[int, float]], margin: float = 0.2) -> None:
    values = [v for _, v in points]
    assert len(values) >= 6, points
    first, last = sum(values[:3]) / 3, sum(values[-3:]) / 3
    assert last < first - margin, f"loss did not go down: first {first:.3f}, last {last:.3f}"


# ---------------------------------------------------------------------------------------------- charlm

CHARLM = TEMPLATES / "charlm" / "train.py"


def charlm_args(steps: int, *extra: str) -> list[str]:
    return [str(CHARLM), "--data", str(CORPUS), "--steps", str(steps), "--log-every", "20",
            "--checkpoint-every", "40", "--sample", "40", *extra]  # fmt: skip


def test_charlm_trains_writes_scalars_and_resumes(tmp_path: Path) -> None:
    logdir = tmp_path / "run" / "logs"
    first = run(charlm_args(120), trainer_env(logdir), cwd=tmp_path)
    assert "done at step 120" in first.stdout
    scalars = read_scalars(logdir)
    assert {"loss", "learning_rate", "tokens_per_sec", "eval_loss"} <= set(scalars)
    assert [step for step, _ in scalars["loss"]] == list(range(1, 121))
    assert_loss_went_down(scalars["loss"])
    assert scalars["eval_loss"][-1][1] < scalars["eval_loss"][0][1]
    # Checkpoints go beside the logs, not inside them (TensorBoard scans its logdir).
    assert (tmp_path / "run" / "checkpoints" / "charlm-latest.npz").is_file()

    second_logs = tmp_path / "run" / "logs2"
    env = trainer_env(second_logs, TPUOPS_RESUME="1", TPUOPS_RESTART="1")
    args = charlm_args(160, "--checkpoint-dir", str(tmp_path / "run" / "checkpoints"))
    second = run(args, env, cwd=tmp_path)
    assert "resumed from step 120" in second.stdout
    assert "restart 1" in second.stdout
    resumed = read_scalars(second_logs)["loss"]
    assert [step for step, _ in resumed] == list(range(121, 161))
    # It continues from the trained model, not from scratch.
    assert resumed[0][1] < scalars["loss"][0][1] - 0.5


def test_charlm_resume_without_checkpoint_starts_fresh(tmp_path: Path) -> None:
    proc = run(charlm_args(3, "--sample", "0"), trainer_env(tmp_path / "logs", TPUOPS_RESUME="1"), cwd=tmp_path)
    assert "no checkpoint" in proc.stdout
    assert "done at step 3" in proc.stdout


def test_charlm_two_workers_average_gradients(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    coordinator = f"127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen(
            [sys.executable, *charlm_args(80)],
            env=trainer_env(logdir, worker_id, 2, TPUOPS_COORDINATOR=coordinator),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for worker_id in (1, 0)  # the non-coordinator first: it must wait for worker 0
    ]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    digests = [re.search(r"done at step 80, params ([0-9a-f]+)", out) for out in outputs]
    assert all(digests), outputs
    assert digests[0].group(1) == digests[1].group(1), "workers ended with different parameters"
    assert "worker 1/2" in outputs[0] and "worker 0/2" in outputs[1]
    # Each worker trained on its own half of the text.
    shards = [int(re.search(r"worker \d/2, ([\d,]+) of", out).group(1).replace(",", "")) for out in outputs]
    assert all(size < CORPUS.stat().st_size * 0.6 for size in shards)
    # Only worker 0 writes scalars: one event file, one loss point per step.
    assert len(list(logdir.glob("*tfevents*"))) == 1
    loss = read_scalars(logdir)["loss"]
    assert [step for step, _ in loss] == list(range(1, 81))
    assert_loss_went_down(loss)


def test_charlm_reports_an_unreachable_coordinator(tmp_path: Path) -> None:
    # The port stays bound (not listening) for the whole test: connections are refused, and no other test's
    # server can take it meanwhile (a free port given back could be, and once was).
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        env = trainer_env(tmp_path / "logs", 1, 2, TPUOPS_COORDINATOR=f"127.0.0.1:{held.getsockname()[1]}")
        proc = subprocess.run(
            [sys.executable, *charlm_args(5), "--timeout", "2"], env=env, cwd=tmp_path,
            capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
    assert proc.returncode == 3
    assert "could not reach the coordinator" in proc.stderr
    assert "within 2s" in proc.stderr


def test_charlm_says_when_what_answers_is_not_the_coordinator(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(TIMEOUT)

        def answer_garbage() -> None:
            with contextlib.suppress(OSError), server.accept()[0] as conn:
                conn.sendall(b"\xff" * 64)  # a length prefix no handshake message has
                conn.recv(1)

        answering = threading.Thread(target=answer_garbage, daemon=True)
        answering.start()
        env = trainer_env(tmp_path / "logs", 1, 2, TPUOPS_COORDINATOR=f"127.0.0.1:{server.getsockname()[1]}")
        proc = subprocess.run(
            [sys.executable, *charlm_args(5), "--timeout", "30"], env=env, cwd=tmp_path,
            capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        answering.join(timeout=10)
    assert proc.returncode == 3, proc.stderr
    assert "is not worker 0 of this run" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_charlm_coordinator_names_the_missing_worker(tmp_path: Path) -> None:
    env = trainer_env(tmp_path / "logs", 0, 3, TPUOPS_COORDINATOR=f"127.0.0.1:{free_port()}")
    proc = subprocess.run(
        [sys.executable, *charlm_args(5), "--timeout", "2"], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 3
    assert "missing workers: [1, 2]" in proc.stderr


def test_charlm_a_dying_worker_is_named_by_the_others(tmp_path: Path) -> None:
    coordinator = f"127.0.0.1:{free_port()}"
    procs = {
        worker_id: subprocess.Popen(
            [sys.executable, *charlm_args(200, "--fail-at-step", "10", "--fail-worker", "1")],
            env=trainer_env(tmp_path / "logs", worker_id, 2, TPUOPS_COORDINATOR=coordinator),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for worker_id in (0, 1)
    }
    try:
        results = {worker_id: (proc.communicate(timeout=TIMEOUT), proc.returncode) for worker_id, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    (out1, _), code1 = results[1]
    (_, err0), code0 = results[0]
    assert code1 == 1 and "failing on purpose at step 10" in out1
    assert code0 == 3 and "lost worker 1" in err0


def test_charlm_collective_send_times_out_on_a_peer_that_stopped_reading() -> None:
    """A peer that is alive but stuck must not hang the others forever: sends time out too."""
    sys.path.insert(0, str(TEMPLATES / "charlm"))
    try:
        import collective
    finally:
        sys.path.remove(str(TEMPLATES / "charlm"))
    from multiprocessing.connection import Client, Listener

    key = collective.authkey_for("test")
    with Listener(("127.0.0.1", 0), authkey=key) as listener:
        accepted = []
        thread = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
        thread.start()
        client = Client(listener.address, authkey=key)
        thread.join(timeout=10)
        group = collective.Group(1, 2, {0: collective._set_send_timeout(client, 0.5)}, timeout=0.5)
        with pytest.raises(collective.PeerError, match="took nothing"):
            for _ in range(1000):  # the peer never reads: the socket buffers fill, then the send times out
                group._send(0, b"x" * 1_000_000)
        client.close()
        accepted[0].close()


# ---------------------------------------------------------------------------------------------- examples

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def test_the_examples_are_all_there() -> None:
    names = {path.name for path in EXAMPLES}
    assert {"quickstart.yaml", "bert-trc-v3-8.yaml", "gpt2-pytorch-v3-8.yaml", "tf-legacy-node.yaml",
            "jax-v4-32.yaml", "jax-multislice.yaml"} <= names  # fmt: skip


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_passes_plan(example: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tpuops", "plan", str(example)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "TPUOPS_HOME": "/nonexistent-tpuops-home"})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_points_at_a_template_that_takes_its_flags(example: Path) -> None:
    from tpuops.spec import load_spec

    spec = load_spec(example)
    code = (example.parent / spec.code.path).resolve()
    assert code.parent == TEMPLATES, f"{example.name}: code.path should point into templates/"
    trainer = code / "train.py"
    assert trainer.is_file() and (code / "requirements.txt").is_file()
    for item in spec.data:
        assert (example.parent / item.from_).exists(), f"{example.name}: data {item.from_} is not shipped"
    source = trainer.read_text()
    for flag in re.findall(r"(--[a-z][-a-z]*)", spec.trainer.command):
        assert f'"{flag}"' in source, f"{example.name}: {trainer.relative_to(ROOT)} has no option {flag}"


# ---------------------------------------------------------------------------------------------- frameworks
# Small models and few steps: each test is two short runs (train, then resume) on the CPU.

SMALL = ["--dim", "64", "--layers", "1", "--heads", "2", "--batch-size", "8", "--log-every", "4"]


def framework_run(trainer: Path, tmp_path: Path, steps: int, logs: str, *extra: str, **env: str):
    args = [str(trainer), "--data", str(CORPUS), "--steps", str(steps), "--checkpoint-every", "10", *SMALL, *extra]
    return run(args, trainer_env(tmp_path / "run" / logs, **env), cwd=tmp_path)


def check_train_then_resume(
    trainer: Path, tmp_path: Path, first_extra: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> str:
    env = env or {}
    first = framework_run(trainer, tmp_path, 20, "logs", *first_extra, **env)
    assert "done at step 20" in first.stdout, first.stdout
    scalars = read_scalars(tmp_path / "run" / "logs")
    assert {"loss", "learning_rate", "tokens_per_sec"} <= set(scalars), scalars.keys()
    assert_loss_went_down(scalars["loss"], margin=0.3)

    second = framework_run(trainer, tmp_path, 26, "logs2", "--checkpoint-dir", str(tmp_path / "run" / "checkpoints"),
                           TPUOPS_RESUME="1", TPUOPS_RESTART="1", **env)  # fmt: skip
    assert "resumed from step 20" in second.stdout, second.stdout
    assert "done at step 26" in second.stdout
    resumed = read_scalars(tmp_path / "run" / "logs2")["loss"]
    assert resumed[0][0] > 20, resumed
    assert resumed[0][1] < scalars["loss"][0][1] - 0.3, "the resumed run started from scratch"
    return first.stdout


@pytest.mark.heavy
def test_tensorflow_template_trains_with_xla_and_resumes(tmp_path: Path) -> None:
    require_module("tensorflow")
    check_train_then_resume(TEMPLATES / "tensorflow" / "train.py", tmp_path, ("--check-xla",))


@pytest.mark.heavy
def test_tensorflow_template_pads_batches_to_multiples_of_64(tmp_path: Path) -> None:
    require_module("tensorflow")
    code = f"""
import sys; sys.path.insert(0, {str(TEMPLATES / "tensorflow")!r})
import train
lengths = {{int(train.encode_line(line, 128).shape[0]) for line in open({str(CORPUS)!r}, "rb")}}
assert min(lengths) < 64 < max(lengths), lengths  # real variety, so the padding matters
shapes = set()
for inputs, labels, weights in train.make_dataset([{str(CORPUS)!r}], 8, 128, 0.15, 0).take(40):
    shapes.add(int(inputs.shape[1]))
    assert float(weights.numpy().sum()) > 0
    assert bool(((weights.numpy() == 0) | (labels.numpy() != train.PAD)).all())  # padding never in the loss
print(sorted(shapes))
"""
    proc = run(["-c", code], trainer_env(tmp_path / "logs"), cwd=tmp_path)
    shapes = eval(proc.stdout.strip().splitlines()[-1])
    assert set(shapes) <= {64, 128} and shapes, shapes


@pytest.mark.heavy
def test_tensorflow_template_idles_on_workers_other_than_0(tmp_path: Path) -> None:
    require_module("tensorflow")
    env = trainer_env(tmp_path / "logs", 1, 4)
    proc = run([str(TEMPLATES / "tensorflow" / "train.py"), "--data", str(CORPUS)], env, cwd=tmp_path)
    assert "nothing to do here" in proc.stdout
    assert not (tmp_path / "logs").exists()


@pytest.mark.heavy
def test_pytorch_template_trains_on_cpu_and_resumes(tmp_path: Path) -> None:
    require_module("torch")
    check_train_then_resume(TEMPLATES / "pytorch_xla" / "train.py", tmp_path)


@pytest.mark.heavy
def test_jax_template_trains_on_two_devices_and_resumes(tmp_path: Path) -> None:
    require_module("jax")
    # Two CPU devices: the batch is really sharded and the gradients all-reduced, as over TPU cores.
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    output = check_train_then_resume(TEMPLATES / "jax" / "train.py", tmp_path, env=env)
    assert "2 cpu device(s)" in output


def run_workers(args: list[str], tmp_path: Path, workers: int = 2, **extra: str) -> list[str]:
    """Start `workers` processes of one run on loopback, wait for all (bounded), return their stdout."""
    coordinator = f"127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen([sys.executable, *args], cwd=tmp_path, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=trainer_env(tmp_path / "logs", worker_id, workers, TPUOPS_COORDINATOR=coordinator,
                                         **extra))
        for worker_id in range(workers)
    ]  # fmt: skip
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err[-3000:]}"
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return outputs


def final_loss(output: str) -> str:
    return re.findall(r"step \d+/\d+ loss (\S+)", output)[-1]


@pytest.mark.heavy
def test_jax_template_two_processes_join_with_jax_distributed(tmp_path: Path) -> None:
    require_module("jax")
    args = [str(TEMPLATES / "jax" / "train.py"), "--data", str(CORPUS), "--steps", "10", *SMALL]
    outputs = run_workers(args, tmp_path)
    assert "process 0/2" in outputs[0] and "process 1/2" in outputs[1]
    # One program over both processes: the loss (a global mean) is the same number on both.
    assert final_loss(outputs[0]) == final_loss(outputs[1])


@pytest.mark.heavy
def test_jax_template_is_data_parallel_across_slices(tmp_path: Path) -> None:
    """Two slices of one host each (as tpuops numbers Multislice hosts): a (slice, data) mesh, the batch sharded
    over both axes, and the same training as one slice of two hosts: the loss matches."""
    require_module("jax")
    args = [str(TEMPLATES / "jax" / "train.py"), "--data", str(CORPUS), "--steps", "10", *SMALL]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one_slice = run_workers(args, tmp_path / "one")
    two_slices = run_workers(args, tmp_path / "two", TPUOPS_NUM_SLICES="2")
    assert "mesh data=2" in one_slice[0]
    assert all("mesh slice=2 x data=1" in output for output in two_slices)
    assert final_loss(two_slices[0]) == final_loss(two_slices[1])
    assert float(final_loss(two_slices[0])) == pytest.approx(float(final_loss(one_slice[0])), rel=1e-4)


@pytest.mark.heavy
def test_pytorch_template_two_workers_average_gradients_over_gloo(tmp_path: Path) -> None:
    require_module("torch")
    args = [str(TEMPLATES / "pytorch_xla" / "train.py"), "--data", str(CORPUS), "--steps", "10", *SMALL]
    outputs = run_workers(args, tmp_path)
    assert "2 process(es)" in outputs[0]
    assert "done at step 10" in outputs[1]

"""`tpuops check` lint half: each rule fires on its pattern and stays quiet on the near miss next to it.

The sources are parsed, never imported: none of these tests needs a framework installed.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

from tpuops.check.lint import lint_module, lint_tree
from tpuops.check.project import Module, Project
from tpuops.check.pyvalues import python_valued_functions

ROOT = Path(__file__).resolve().parent.parent

JAX_HEAD = "import jax\nimport jax.numpy as jnp\n\n"
TORCH_HEAD = "import torch\nimport torch_xla.core.xla_model as xm\n\n"


def module(source: str) -> str:
    """A case's source: an optional unindented import head, then an indented body."""
    for head in (JAX_HEAD, TORCH_HEAD):
        if source.startswith(head):
            return head + textwrap.dedent(source[len(head):])
    return textwrap.dedent(source)


def rules_in(source: str, legacy_node: bool = False) -> list[tuple[str, int]]:
    source = module(source)
    findings, _ = lint_module(ast.parse(source), source, "train.py", legacy_node)
    return [(f.rule, f.line) for f in findings]


# (rule, true positive, near miss): each source is a whole module.
CASES = [
    ("XLA001", JAX_HEAD + """
        @jax.jit
        def step(x):
            loss = jnp.mean(x)
            if loss > 0:
                return x
            return -x
        """, JAX_HEAD + """
        @jax.jit
        def step(x):
            if x.shape[0] > 1:  # shapes are static under jit
                return jnp.mean(x)
            return x
        """),
    ("XLA001", TORCH_HEAD + """
        def train_step(model, batch, target):
            loss = torch.nn.functional.mse_loss(model(batch), target)
            while loss.abs() > 1:
                loss = loss / 2
            xm.mark_step()
        """, TORCH_HEAD + """
        def train_step(model, batch, target, clip):
            loss = torch.nn.functional.mse_loss(model(batch), target)
            if clip:
                loss = loss.clamp(0, 1)
            xm.mark_step()
        """),
    ("XLA001", JAX_HEAD + """
        @jax.jit
        def step(x, training):
            return x * 2 if training else x  # `training` is traced: jit cannot branch on it
        """, JAX_HEAD + """
        from functools import partial

        @partial(jax.jit, static_argnames="training")
        def step(x, training):
            return x * 2 if training else x
        """),
    ("XLA002", JAX_HEAD + """
        def loss_fn(x):
            keep = x > 0
            return x[keep].sum()

        step = jax.jit(loss_fn)
        """, JAX_HEAD + """
        def loss_fn(x):
            keep = x > 0
            return jnp.where(keep, x, 0).sum()

        step = jax.jit(loss_fn)
        """),
    ("XLA002", TORCH_HEAD + """
        def train_step(x):
            idx = torch.nonzero(x)
            xm.mark_step()
            return idx
        """, TORCH_HEAD + """
        def train_step(x):
            y = torch.where(x > 0, x, 0)
            xm.mark_step()
            return y
        """),
    ("XLA002", TORCH_HEAD + """
        def evaluate(model, loader):
            for inputs in loader:
                scores = model(inputs)
                hits = (scores > 0.5).any(dim=1)  # a reduction over one axis keeps a mask over the others
                picks = scores.argmax(dim=1)
                picks[~hits] = -1
                xm.mark_step()
        """, TORCH_HEAD + """
        def evaluate(model, loader, class_ids):
            for inputs in loader:
                labels = torch.tensor(class_ids)  # made on the host
                kinds = torch.unique(labels)  # on the host: no device shape
                scores = model(inputs)[:, :len(kinds)]
                xm.mark_step()
        """),
    ("XLA002", TORCH_HEAD + """
        def decode(model, loader):
            for tokens_BxT, padding_mask_BxT in loader:  # a mask by its name, behind its shape suffix
                logits_BxTxV = model(tokens_BxT)
                logits_BxTxV[padding_mask_BxT] = 0.0
                xm.mark_step()
        """, TORCH_HEAD + """
        def decode(model, loader):
            for tokens_BxT, positions_BxT in loader:
                logits_BxTxV = model(tokens_BxT)
                picked_BxTxV = logits_BxTxV[positions_BxT]
                xm.mark_step()
        """),
    ("XLA002", TORCH_HEAD + """
        def evaluate(model, loader):
            kept = torch.zeros(0, device=xm.xla_device())
            for batch in loader:
                kept = torch.cat([kept, model(batch).argmax(-1)])  # grows each batch: a new shape each time
                xm.mark_step()
            return kept
        """, TORCH_HEAD + """
        def evaluate(model, loader):
            for batch in loader:
                features = model(batch)
                features = torch.cat([features, batch], dim=-1)  # bound afresh each batch: one shape
                xm.mark_step()
        """),
    ("XLA002", TORCH_HEAD + """
        def match(model, loader):
            for batch in loader:
                cost = model(batch)
                keep = cost.min(dim=0).values > 0.5
                kept = cost[:, keep]  # a mask on one axis: as many columns as it holds
                xm.mark_step()
        """, TORCH_HEAD + """
        def match(model, loader):
            for batch in loader:
                cost = model(batch)
                best = cost.argmin(dim=1)
                picked = cost[:, best]  # integer indices: one column per row, a fixed shape
                xm.mark_step()
        """),
    ("XLA002", TORCH_HEAD + """
        def train(model, loader):
            for tokens, lengths in loader:
                longest = lengths.max()  # a tensor: read to the host to size the mask
                mask = torch.arange(longest, device=tokens.device)[None, :] < lengths[:, None]
                model(tokens[:, :128], mask[:, :128]).backward()
                xm.mark_step()
        """, TORCH_HEAD + """
        def train(model, loader):
            for tokens, lengths in loader:
                width = tokens.size(1)  # a Python int: one shape for every batch of this width
                mask = torch.arange(width, device=tokens.device)[None, :] < lengths[:, None]
                model(tokens, mask).backward()
                xm.mark_step()
        """),
    ("XLA003", TORCH_HEAD + """
        def train_step(model, batch):
            loss = model(batch).mean()
            print(f"loss {loss.item()}")  # .item(): XLA003 whatever `loss` is
            xm.mark_step()
        """, TORCH_HEAD + """
        def train_step(model, batch, lr):
            loss = model(batch).mean()
            print(f"lr {float(lr)}")
            xm.mark_step()
            return loss.detach()
        """),
    ("XLA003", TORCH_HEAD + """
        def grad_norms(model):
            norms = []
            for name, weight in model.named_parameters():  # the model's weights: tensors on its device
                norms.append(weight.grad.norm().item())
            return norms

        def train(model, loader, optimizer):
            for batch in loader:
                model(batch).backward()
                grad_norms(model)
                xm.optimizer_step(optimizer)
        """, TORCH_HEAD + """
        def weight_count(model):
            return sum(weight.numel() for weight in model.parameters())

        def train(model, loader, optimizer):
            for batch in loader:
                model(batch).backward()
                print(f"{weight_count(model)} weights")
                xm.optimizer_step(optimizer)
        """),
    ("XLA003", TORCH_HEAD + """
        import torchvision

        def evaluate(model, loader):
            for step, images in enumerate(loader):
                torchvision.utils.save_image(model(images), f"pred_{step}.png")  # a PNG of a device tensor
                xm.mark_step()
        """, TORCH_HEAD + """
        import torchvision

        def evaluate(model, loader):
            for step, images in enumerate(loader):
                model(images)
                torchvision.utils.save_image(torch.rand(3, 64, 64), f"noise_{step}.png")  # made on the host
                xm.mark_step()
        """),
    ("XLA003", TORCH_HEAD + """
        def train(model, loader, optimizer, writer, args):
            for i, batch in enumerate(loader):
                model(batch).backward()
                if (i + 1) % args.accu_steps == 0:  # every optimizer step, not a logging schedule
                    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    writer.add_scalar("grad_norm", norm, i)
                    xm.optimizer_step(optimizer)
        """, TORCH_HEAD + """
        def train(model, loader, optimizer, writer, nans_seen):
            for i, batch in enumerate(loader):
                loss = model(batch)
                loss.backward()
                nan_count = nans_seen[i]  # counted on the host by the data pipeline
                if nan_count == 0:
                    xm.optimizer_step(optimizer)
                else:  # only when training went wrong
                    writer.add_scalar("skipped_loss", loss, i)
                    optimizer.zero_grad()
                xm.mark_step()
        """),
    ("XLA003", TORCH_HEAD + """
        def sample_spread(generator, noise_batches):
            spreads = []
            for z in noise_batches:  # a GAN's generator runs on the device each batch: an evaluation loop
                spreads.append(generator(z).std().item())
            return spreads
        """, TORCH_HEAD + """
        def sample_spread(augment, noise_batches):
            spreads = []
            for z in noise_batches:  # no model runs here: host-side preprocessing
                spreads.append(augment(z).std().item())
            return spreads
        """),
    ("XLA003", JAX_HEAD + """
        @jax.jit
        def step(x):
            total = jnp.sum(x)
            print(float(total))
            return total
        """, JAX_HEAD + """
        @jax.jit
        def step(x):
            total = jnp.sum(x)
            return total

        def loop(x):
            return float(step(x))  # outside the compiled step: once per call, by choice
        """),
    ("XLA004", """
        def encode(tokenizer, texts):
            return tokenizer(texts, padding="longest", truncation=True)
        """, """
        def encode(tokenizer, texts):
            return tokenizer(texts, padding="max_length", max_length=128, truncation=True)
        """),
    ("XLA004", """
        from transformers import DataCollatorWithPadding
        collate = DataCollatorWithPadding(tokenizer)
        """, """
        from transformers import DataCollatorWithPadding
        collate = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=64)
        """),
    ("XLA005", """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        """, """
        import tensorflow as tf
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")  # says float16 in a comment only
        """),
    ("XLA005", """
        import torch
        with torch.autocast("xla", dtype=torch.float16):
            pass
        """, """
        import torch
        with torch.autocast("xla", dtype=torch.bfloat16):
            pass
        """),
    ("XLA003", """
        from ignite.engine import Engine

        def train_step(engine, batch):
            loss = model(batch).mean()
            loss.backward()
            return {"loss": loss.item()}

        trainer = Engine(train_step)
        """, """
        from ignite.engine import Engine

        def train_step(engine, batch):
            loss = model(batch).mean()
            loss.backward()
            return {"loss": loss.detach()}  # Ignite's metrics read it when they are written

        trainer = Engine(train_step)
        """),
    ("XLA003", """
        import torch
        import torch_xla.core.xla_model as xm

        def train(model, train_iter, steps):
            LOSS_FN = torch.nn.BCEWithLogitsLoss().to(dtype=torch.float32)
            for step in range(steps):
                ids, labels = next(train_iter)
                loss = LOSS_FN(model(ids), labels)
                loss.backward()
                xm.mark_step()
                history = float(loss)
        """, """
        import torch
        import torch_xla.core.xla_model as xm

        def train(model, train_iter, steps):
            LOSS_FN = torch.nn.BCEWithLogitsLoss().to(dtype=torch.float32)
            for step in range(steps):
                ids, labels = next(train_iter)
                loss = LOSS_FN(model(ids), labels)
                loss.backward()
                xm.mark_step()
                history = float(steps)
        """),
    ("XLA005", """
        import argparse
        from accelerate import Accelerator
        parser = argparse.ArgumentParser()
        parser.add_argument("--mixed_precision", default="fp16")
        args = parser.parse_args()
        accelerator = Accelerator(mixed_precision=args.mixed_precision)
        """, """
        import argparse
        from accelerate import Accelerator
        parser = argparse.ArgumentParser()
        parser.add_argument("--mixed_precision", default="bf16")
        args = parser.parse_args()
        accelerator = Accelerator(mixed_precision=args.mixed_precision)
        """),
    ("XLA005", """
        import jax.numpy as jnp
        from transformers import FlaxCLIPModel
        model = FlaxCLIPModel.from_pretrained("clip", dtype=jnp.float16)
        """, """
        import jax.numpy as jnp
        from transformers import AutoProcessor, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained("clip", dtype=jnp.float16)  # a tokenizer computes nothing
        processor = AutoProcessor.from_pretrained("clip", dtype=jnp.float16)
        """),
    # The kinds of issue 25, each with the near miss public trainers write next to it:
    ("XLA003", TORCH_HEAD + """
        def train(model, loader, optimizer):
            total = 0.0
            for step, (data, target) in enumerate(loader):
                loss = model(data, target)
                loss.backward()
                xm.optimizer_step(optimizer)
                total += loss.item()  # after the step ended: still a device round trip every step
        """, TORCH_HEAD + """
        def log(step, loss):
            print(step, loss.item())

        def train(model, loader, optimizer, max_steps):
            global_step = 0
            while global_step < max_steps:
                for step, (data, target) in enumerate(loader):
                    loss = model(data, target)
                    loss.backward()
                    xm.optimizer_step(optimizer)
                    xm.add_step_closure(log, args=(step, loss))
                    global_step += 1
                    if xm.is_master_ordinal() and step % 100 == 0:
                        print(f"loss {loss.item():.3f}")
        """),
    ("XLA003", TORCH_HEAD + """
        def train(model, loader, optimizer, logger):
            for step, batch in enumerate(loader):
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                xm.mark_step()
                logger.info("step %d loss %.4f" % (step, loss))
        """, TORCH_HEAD + """
        def train(model, loader, optimizer, logger):
            for step, batch in enumerate(loader):
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                xm.mark_step()
                logger.info("step %d of %d" % (step, len(loader)))
        """),
    ("XLA004", """
        from dataclasses import dataclass, field

        @dataclass
        class DataArguments:
            padding: str = field(default="longest")

        def encode(tokenizer, texts, data_args: DataArguments):
            return tokenizer(texts, padding=data_args.padding)
        """, """
        from itertools import chain
        from transformers import DataCollatorForLanguageModeling

        def group_texts(examples, block_size=512):
            joined = list(chain(*examples["input_ids"]))
            return {"input_ids": [joined[i: i + block_size] for i in range(0, len(joined), block_size)]}

        collate = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
        """),
    ("XLA005", """
        from transformers import TrainingArguments
        args = TrainingArguments(output_dir="out", fp16=True)
        """, """
        import argparse
        import torch
        from transformers import TrainingArguments
        DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
        parser = argparse.ArgumentParser()
        parser.add_argument("--fp16", action="store_true")
        options = parser.parse_args()
        args = TrainingArguments(output_dir="out", fp16=options.fp16)
        if options.fp16:
            torch.set_default_dtype(torch.float16)
        if torch.cuda.is_available():  # a branch a TPU never takes
            model = model.half()
        """),
    ("XLA005", """
        import jax.numpy as jnp
        import numpy as np
        params = jnp.asarray(weights, dtype=np.float16)
        """, """
        import numpy as np
        import tensorflow as tf
        counts = np.zeros(1024, dtype=np.float16)  # host arrays: storage, nothing computes on the TPU in them
        averaged = (logits / counts[:, None]).astype(np.float16)

        def setup_gpu():  # named for the GPU: where it runs
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
        """),
    ("XLA004", """
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")
        def collate(texts):
            return tokenizer(texts, padding=True, return_tensors="pt")
        """, """
        import keras
        def conv_block(x, filters, padding=False):
            return keras.layers.Conv2D(filters, 3, padding="same" if padding else "valid")(x)
        def backbone(x):
            return conv_block(x, 64, padding=True)  # a feature map's padding, not a batch's
        """),
    ("XLA005", """
        import lightning
        trainer = lightning.Trainer(accelerator="tpu", devices=8, precision="16-mixed")
        """, """
        import lightning
        trainer = lightning.Trainer(accelerator="tpu", devices=8, precision="bf16-true")
        old_style = lightning.Trainer(accelerator="tpu", devices=8, precision=16)  # Lightning 1: bfloat16 on TPUs
        """),
]


@pytest.mark.parametrize(("rule", "positive", "near_miss"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_fires_on_its_pattern_and_not_on_the_near_miss(rule: str, positive: str, near_miss: str) -> None:
    assert rule in [r for r, _ in rules_in(positive)]
    assert rules_in(near_miss) == []


def test_node_rules_fire_only_for_a_legacy_node_spec() -> None:
    source = """
        import tensorflow as tf
        data = tf.data.Dataset.from_generator(gen, output_signature=sig)
        lines = tf.data.TextLineDataset("data/train.txt")
        """
    assert [r for r, _ in rules_in(source, legacy_node=True)] == ["XLA006", "XLA007"]
    assert rules_in(source, legacy_node=False) == []
    near_miss = """
        import tensorflow as tf
        lines = tf.data.TextLineDataset("gs://bucket/train.txt")
        records = tf.data.TFRecordDataset(files)
        """
    assert rules_in(near_miss, legacy_node=True) == []


def test_findings_name_file_line_and_the_step() -> None:
    source = JAX_HEAD + textwrap.dedent("""
        def make_step():
            def step_fn(state, batch):
                return state, batch.sum().item()
            return step_fn

        step = jax.jit(make_step())
        """)
    findings, _ = lint_module(ast.parse(source), source, "pkg/train.py")
    assert [(f.rule, f.file, f.line) for f in findings] == [("XLA003", "pkg/train.py", 7)]
    assert "step_fn" in findings[0].message and findings[0].hint


def test_ignore_comment_silences_that_rule_on_that_line_only() -> None:
    source = JAX_HEAD + textwrap.dedent("""
        @jax.jit
        def step(x):
            a = x.sum().item()  # tpuops: ignore[XLA003]
            b = x.sum().item()  # tpuops: ignore[XLA001]
            return a + b
        """)
    findings, ignored = lint_module(ast.parse(source), source, "train.py")
    assert [(f.rule, f.line) for f in findings] == [("XLA003", 8)]
    assert ignored == 1


def test_the_templates_lint_clean() -> None:
    for template in ("jax", "pytorch_xla", "tensorflow", "charlm"):
        result = lint_tree(ROOT / "templates" / template)
        assert result.files >= 1
        assert result.findings == (), template


def test_lint_honours_code_exclude_and_tpuopsignore(tmp_path: Path) -> None:
    bad = "import torch\nx = torch.zeros(2, dtype=torch.float16)\n"
    for name in ("train.py", "scratch/old.py", "vendor/lib.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(bad)
    (tmp_path / ".tpuopsignore").write_text("vendor/\n")
    result = lint_tree(tmp_path, exclude=["scratch/"])
    assert result.files == 1
    assert [(f.file, f.rule) for f in result.advice] == [("train.py", "XLA005")]  # float16: a note to confirm


def test_a_file_that_does_not_parse_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("def broken(:\n")
    result = lint_tree(tmp_path)
    assert [(f.rule, f.file, f.line) for f in result.findings] == [("XLA000", "train.py", 1)]
    # the grammar is the running Python's (3.12 parses f-strings 3.11 cannot): say which one read it
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"with Python {python}" in result.findings[0].message
    assert "the Python the trainer is written for" in result.findings[0].hint


def test_a_step_jitted_in_another_module_is_linted_where_it_is_defined(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(
        "import jax\nfrom . import steps\nfrom .steps import other\np = jax.jit(steps.f)\nq = jax.jit(other)\n")
    (tmp_path / "pkg" / "steps.py").write_text(
        "def f(x):\n    if x.sum() > 0:\n        return x\n    return -x\n\n\ndef other(x):\n    return x.item()\n")
    (tmp_path / "unrelated.py").write_text("def f(x):\n    if x.sum() > 0:\n        return x\n")  # never jitted
    result = lint_tree(tmp_path)
    # in a JAX step, a branch on a traced value and its host conversion fail at tracing: notes the run settles
    assert [(f.file, f.line, f.rule) for f in result.advice] == [("pkg/steps.py", 2, "XLA001"),
                                                                  ("pkg/steps.py", 8, "XLA003")]
    assert "JAX raises here while tracing the step" in result.advice[0].message
    assert [s["name"] for s in result.steps_found] == ["f", "other"]


def test_a_jax_loop_reading_its_steps_result_every_step_is_a_note_not_a_finding(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import jax
        import numpy as np

        p_step = jax.pmap(step_fn, axis_name="batch")

        def train(state, batches):
            losses = []
            for i, batch in enumerate(batches):
                state, loss = p_step(state, batch)
                losses.append(float(loss[0]))
                if i % 100 == 0:
                    print("loss", np.asarray(loss).mean())
            return state
        """))
    result = lint_tree(tmp_path)
    assert result.findings == ()
    [note] = result.advice
    assert (note.rule, note.file, note.line) == ("XLA003", "train.py", 11)
    assert "`float()` of `loss` (what `p_step` returned) every iteration" in note.message


def test_a_dataclass_built_from_its_own_fields_is_read_without_end(tmp_path: Path) -> None:
    """`Collator(padding=self.padding)` inside Collator: following what constructions pass for a field must stop
    (it recursed until Python gave up, and the whole lint with it)."""
    (tmp_path / "collate.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass

        @dataclass
        class Collator:
            padding: str = "longest"

            def copy(self):
                return Collator(padding=self.padding)

            def __call__(self, tokenizer, rows):
                return tokenizer.pad(rows, padding=self.padding)
        """))
    result = lint_tree(tmp_path)
    assert ("XLA004", 12) in [(f.rule, f.line) for f in result.advice]  # the pad, at the field's default


def test_files_that_never_run_on_the_tpu_give_no_findings_nor_notes(tmp_path: Path) -> None:
    """A unit test, archived code and a CUDA program are not what the TPU runs: nothing of theirs is reported,
    while the same code in the trainer is."""
    trainer = textwrap.dedent("""
        import jax
        import torch

        @jax.jit
        def step(state, batch):
            return state + batch, (state * batch).sum()

        def loop(state, batches):
            for batch in batches:
                state, loss = step(state, batch)
                print(float(loss))
        model = torch.nn.Linear(2, 2).half()
        """)
    for rel in ("train.py", "tests/test_train.py", "archived/old_train.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(trainer)
    (tmp_path / "serve_gpu.py").write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda().half()\n")
    result = lint_tree(tmp_path)
    assert result.findings == ()  # float16 and a JAX host loop's read: notes to confirm, in train.py only
    assert {n.file for n in result.advice} == {"train.py"}
    assert {n.rule for n in result.advice} == {"XLA003", "XLA005"}


def test_a_loop_calling_what_runs_step_loops_drives_them_and_is_no_step(tmp_path: Path) -> None:
    """A worker's shard loop hands each shard to `train_shard`, whose own loop ends the steps: the shard loop
    (and the downloads it calls) is not an evaluation loop; `download_model(url, model_path)` names a model, it
    is not one."""
    trainer = ROOT / "tests" / "check_corpus" / "xla_shard_driver_loop"
    result = lint_tree(trainer, commands=["python worker.py"])
    assert [s.as_dict()["name"] for s in result.steps] == ["loop at line 25"]
    (tmp_path / "fetch.py").write_text(textwrap.dedent("""
        import torch_xla.core.xla_model as xm

        def download_model(url, model_path):
            return model_path

        def fetch_all(urls, model_path):
            for url in urls:
                download_model(url, model_path)
        """))
    assert lint_tree(tmp_path).steps == ()


def test_a_parameter_annotated_as_a_path_is_never_a_tensor() -> None:
    source = module("""
        def keep(checkpoint: Path, where: str):
            if checkpoint.exists():
                print(f"kept {where}")

        for step, batch in enumerate(loader):
            loss = model(batch)
            xm.mark_step()
            keep(loss, loss)
        """)
    assert rules_in(source) == []


def test_what_a_helper_returns_from_item_sums_is_a_python_number() -> None:
    """`total = 0`, `total += loss.item()`, `seen += y.size(0)`, `total /= seen`, `return total, 100 * total /
    seen`: every value the returned names are bound to is a Python number, so what the helper returns is one (and
    formatting it reads nothing); one tensor among them, and it is not."""
    source = textwrap.dedent("""
        def evaluate(model, loader):
            total = 0
            seen = 0
            for x, y in loader:
                total += model(x, y).item()
                seen += y.size(0)
            total /= seen
            return total, 100.0 * total / seen

        def evaluate_on_device(model, loader):
            total = 0
            for x, y in loader:
                total += model(x, y)
            return total, 0
        """)
    project = Project([Module.of("train.py", ast.parse(source), source)])
    python = python_valued_functions(project)
    assert "evaluate" in python and "evaluate_on_device" not in python


def test_a_notebook_exported_as_a_script_is_read_around_its_shell_lines(tmp_path: Path) -> None:
    """`!pip install ...` makes the file unparsable (XLA000, at that line), and the rest is still linted."""
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import torch
        import torch_xla.core.xla_model as xm
        !pip install -q transformers
        %matplotlib inline

        def train(model, loader):
            for batch in loader:
                loss = model(batch)
                loss.backward()
                xm.mark_step()
                print(loss.item())
        """))
    result = lint_tree(tmp_path)
    assert [(f.rule, f.line) for f in result.findings] == [("XLA000", 4), ("XLA003", 12)]



def test_a_model_runs_through_its_parts_but_not_what_it_carries() -> None:
    """`self.model.decoder.next_logits(x)` runs the model (a part of it); `model.tokenizer.decode_ids(ids)` does
    not; and a model's method called for each level a sampler counts is no batch loop."""
    from tpuops.check.model_calls import runs_model

    def loop_runs_model(source: str, counted: bool = False) -> bool:
        tree = ast.parse(textwrap.dedent(source))
        loop = next(n for n in ast.walk(tree) if isinstance(n, ast.For | ast.While))
        return runs_model(loop.body, Module.of("train.py", tree, source), counted=counted)

    assert loop_runs_model("""
        while step < limit:
            logits = self.model.decoder.next_logits(tokens)
        """)
    assert not loop_runs_model("""
        for i, ids in enumerate(labels):
            text = model.tokenizer.decode_ids(ids)
        """)
    assert not loop_runs_model("""
        for level in range(10):
            noise = self.model.denoise(noise, level)
        """, counted=True)

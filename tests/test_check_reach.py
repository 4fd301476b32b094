"""The lint reads the code the trainer's command runs: the scripts the command names and what they import."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tpuops.check.callers import reached_names
from tpuops.check.entries import WORDS, read_command
from tpuops.check.lint import lint_tree
from tpuops.check.project import Module, Project
from tpuops.check.settings import Settings

HOST_READ_LOOP = """
import torch
import torch_xla.core.xla_model as xm

def train(model, loader, optimizer):
    for batch in loader:
        loss = model(batch).sum()
        loss.backward()
        xm.optimizer_step(optimizer)
        print(loss.item())


train(model, loader, optimizer)
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    return write(tmp_path / "code", {"train.py": "", "src/main.py": "", "pkg/train.py": "", "pkg/__init__.py": "",
                            "tool/__main__.py": "", "eval_tpu.py": "",
                            "scripts/run_tpu.sh": "#!/bin/bash\nexport A=1\n# python not_this.py \\\n"
                                                  "python3 -u train.py \\\n  --steps 10\npython eval_tpu.py\n",
                            "scripts/loop.sh": "bash scripts/loop.sh\n"})


@pytest.mark.parametrize(("command", "expected"), [
    ("python train.py --lr 1e-3", ("train.py",)),
    ("python3 -u src/main.py", ("src/main.py",)),
    ("XLA_USE_BF16=1 PJRT_DEVICE=TPU python -m pkg.train", ("pkg/train.py",)),
    ("python -m tool --x", ("tool/__main__.py",)),
    ("cd src && python main.py", ("src/main.py",)),
    ("cd src; python ../train.py", ("train.py",)),
    ("accelerate launch --config_file cfg.yaml train.py --bf16", ("train.py",)),
    ("torchrun --nproc_per_node 8 train.py", ("train.py",)),
    ("python -m torch_xla.distributed.xla_dist --tpu=$TPU -- python3 train.py", ("train.py",)),
    ("bash scripts/run_tpu.sh", ("train.py", "eval_tpu.py")),
    ("nohup ./scripts/loop.sh > log 2>&1 &", ()),  # calls itself: read a few levels, then stopped
    ("python train.py && python eval_tpu.py | tee log", ("train.py", "eval_tpu.py")),
    ("python -c 'import pkg'", ("pkg/__init__.py",)),
    ("python -c 'from pkg.train import main; main()'", ("pkg/train.py",)),
    ("python -c 'import os, json'", ()),
    ("python missing.py", ()),
    ("python /opt/train.py", ()),
    ("python ../outside.py", ()),
    ("cd .. && python scripts_code/pkg/train.py", ()),  # the code directory of this test is not named so
    ("cd src && cd .. && python train.py", ("train.py",)),
    ("python 'train.py", ()),  # an unclosed quote: read as far as it goes, never a crash
])
def test_the_scripts_a_command_runs(scripts: Path, command: str, expected: tuple[str, ...]) -> None:
    assert read_command(command, scripts).scripts == expected


def test_a_command_may_leave_the_code_directory_and_come_back(scripts: Path) -> None:
    """`cd .. && python code/train.py`, `cd .. && python -m code.pkg.train`: the code directory's own scripts."""
    assert read_command("cd .. && python code/train.py", scripts).scripts == ("train.py",)
    assert read_command("cd .. && python -m code.pkg.train", scripts).scripts == ("pkg/train.py",)


def test_only_the_code_the_command_runs_is_linted(tmp_path: Path) -> None:
    """The entry's imports are followed (absolute, relative, inside a function, a package's __init__, a module
    named in a string, a computed name under a known package: maybe, so what is found there is a note, and not
    its tests); the GPU twin and an unused experiment are not."""
    write(tmp_path, {
        "train_tpu.py": "from lib import loop\nloop.run()\n",
        "train_gpu.py": HOST_READ_LOOP,
        "experiments/old.py": HOST_READ_LOOP,
        "lib/__init__.py": HOST_READ_LOOP,
        "lib/loop.py": "from .steps import train\n\ndef run():\n    from lib import metrics\n    import importlib\n"
                       "    importlib.import_module('heads.' + NAME)\n    return 'registry.Model'\n",
        "lib/steps.py": HOST_READ_LOOP,
        "lib/metrics.py": HOST_READ_LOOP,
        "heads/linear.py": HOST_READ_LOOP,
        "heads/linear_test.py": HOST_READ_LOOP,
        "registry.py": HOST_READ_LOOP,
    })
    everything = {f.file for f in lint_tree(tmp_path).findings}
    assert everything == {"train_gpu.py", "experiments/old.py", "lib/__init__.py", "lib/steps.py",
                          "lib/metrics.py", "heads/linear.py", "registry.py"}
    result = lint_tree(tmp_path, commands=["python train_tpu.py"])
    assert {f.file for f in result.findings} == everything - {"train_gpu.py", "experiments/old.py", "heads/linear.py"}
    assert [n.file for n in result.advice] == ["heads/linear.py"]
    assert "(a guess: no script of the command imports heads/linear.py by a name" in result.advice[0].message
    assert result.scope.entries == ("train_tpu.py",)
    assert result.scope.left_out == ("experiments/old.py", "heads/linear_test.py", "train_gpu.py")
    assert result.scope.runs("heads/linear.py") and not result.scope.surely_runs("heads/linear.py")
    assert result.files == 7


def test_a_module_loaded_by_a_name_the_source_does_not_hold_means_every_file(tmp_path: Path) -> None:
    write(tmp_path, {"train.py": "import importlib\nimportlib.import_module(args.model)\n",
                     "other.py": HOST_READ_LOOP})
    result = lint_tree(tmp_path, commands=["python train.py"])
    assert result.findings == ()  # other.py runs only if it is the module named at run time: a note
    assert [(n.file, n.line) for n in result.advice] == [("other.py", 10)]
    assert result.advice[0].message.endswith("(a guess: no script of the command imports other.py by a name the "
                                             "source holds)")
    assert result.scope.files is None and "computed name (importlib.import_module)" in result.scope.why_every_file
    assert result.scope.sure == {"train.py"}


def test_a_launcher_script_imports_the_script_its_command_names_next(tmp_path: Path) -> None:
    """`python xla_spawn.py --num_cores 8 train.py`: the launcher imports the module named on its command line."""
    write(tmp_path, {"xla_spawn.py": "import importlib, sys\nmod = importlib.import_module(sys.argv[-1][:-3])\n",
                     "train.py": "import model\n", "model.py": HOST_READ_LOOP, "other.py": HOST_READ_LOOP})
    result = lint_tree(tmp_path, commands=["python xla_spawn.py --num_cores 8 train.py"])
    assert [f.file for f in result.findings] == ["model.py"]
    assert result.scope.left_out == ("other.py",)
    alone = lint_tree(tmp_path, commands=["python xla_spawn.py"])  # what it imports is not on its command line
    assert alone.scope.files is None


def test_objects_built_from_class_paths_in_config_files_mean_every_file(tmp_path: Path) -> None:
    """HyperPyYAML's `!new:pkg.model.Net`, Hydra's `_target_`: the config, not the source, says what runs."""
    write(tmp_path, {"train.py": "from hyperpyyaml import load_hyperpyyaml\nconf = load_hyperpyyaml(open(path))\n",
                     "pkg/model.py": HOST_READ_LOOP})
    result = lint_tree(tmp_path, commands=["python train.py --config conf/model.yaml"])
    assert [f.file for f in result.advice] == ["pkg/model.py"] and result.findings == ()
    assert result.scope.why_every_file == ("it builds objects from class paths in config files (load_hyperpyyaml), "
                                           "so any module may run")


def test_a_command_naming_no_script_of_ours_lints_every_file(tmp_path: Path) -> None:
    write(tmp_path, {"train.py": HOST_READ_LOOP})
    result = lint_tree(tmp_path, commands=["my-installed-trainer --steps 10"])
    assert [f.file for f in result.findings] == ["train.py"]
    assert result.scope.files is None and "an installed program" in result.scope.why_every_file


def test_an_import_found_nowhere_expected_reaches_every_module_of_that_name(tmp_path: Path) -> None:
    """The code may extend sys.path: `import helpers` from a script reaches any helpers.py."""
    write(tmp_path, {"run/train.py": "import sys\nsys.path.append('../common')\nimport helpers\n",
                     "common/helpers.py": HOST_READ_LOOP, "other/unused.py": HOST_READ_LOOP})
    result = lint_tree(tmp_path, commands=["python run/train.py"])
    assert [f.file for f in result.findings] == ["common/helpers.py"]


def test_imports_may_name_the_code_directory_as_their_package(tmp_path: Path) -> None:
    """code.path: voicekit, whose modules import `voicekit.models.net`: the code directory is that package."""
    write(tmp_path / "voicekit", {"bin/train.py": "from voicekit.models import net\n",
                                  "models/__init__.py": "", "models/net.py": HOST_READ_LOOP,
                                  "models/unused.py": HOST_READ_LOOP})
    result = lint_tree(tmp_path / "voicekit", commands=["cd .. && python -m voicekit.bin.train"])
    assert result.scope.entries == ("bin/train.py",)
    assert [f.file for f in result.findings] == ["models/net.py"]


def test_a_test_file_the_command_runs_is_linted_and_an_unparsable_unused_file_is_not_a_finding(
        tmp_path: Path) -> None:
    write(tmp_path, {"test_train_tpu.py": HOST_READ_LOOP, "py2_tool.py": "print 'old'\n"})
    assert [f.rule for f in lint_tree(tmp_path).findings] == ["XLA000"]  # no command: tests are not the trainer
    result = lint_tree(tmp_path, commands=["python test_train_tpu.py"])
    assert [(f.file, f.rule) for f in result.findings] == [("test_train_tpu.py", "XLA003")]
    broken = lint_tree(tmp_path, commands=["python test_train_tpu.py"] + ["python py2_tool.py"])
    assert ("py2_tool.py", "XLA000") in [(f.file, f.rule) for f in broken.findings]


def test_the_options_a_command_passes_are_read_by_the_names_the_code_uses(tmp_path: Path) -> None:
    write(tmp_path, {"train.py": "", "run.sh": "python train.py --padding max_length --lr=3e-4\n"})
    read = read_command("python train.py fit --fp16 --use-tpu=True --steps 10 -c x trainer.precision=bf16 --name run "
                        "&& bash run.sh", tmp_path)
    assert read.scripts == ("train.py",)
    assert read.options == {"fp16": {True}, "use_tpu": {True}, "steps": {10}, "precision": {"bf16"},
                            "name": {"run"}, "padding": {"max_length"}, "lr": {3e-4}, WORDS: {"fit"}}


SWITCHED = """
import argparse
import torch
import torch_xla.core.xla_model as xm

parser = argparse.ArgumentParser()
parser.add_argument("--debug", action="store_true")
parser.add_argument("--fp16", action="store_true")
args = parser.parse_args()
config = vars(args)

def train(model, loader, optimizer):
    if config["fp16"]:
        model = model.half()
    for batch in loader:
        loss = model(batch).sum()
        loss.backward()
        xm.optimizer_step(optimizer)
        if args.debug:
            print(loss.item())

train(model, loader, optimizer)
"""


@pytest.mark.parametrize(("commands", "expected", "noted"), [
    ([], [], []),  # the code's defaults: both switches off
    (["python train.py --lr 1e-3"], [], []),
    (["python train.py --debug"], [("XLA003", 20)], []),
    (["python train.py --fp16 --debug=false"], [], [("XLA005", 14)]),  # float16 on: a note (the run decides)
])
def test_a_switch_is_off_unless_the_command_turns_it_on(tmp_path: Path, commands: list[str],
                                                         expected: list[tuple[str, int]],
                                                         noted: list[tuple[str, int]]) -> None:
    write(tmp_path, {"train.py": SWITCHED})
    result = lint_tree(tmp_path, commands=commands)
    assert [(f.rule, f.line) for f in result.findings] == expected
    assert [(n.rule, n.line) for n in result.advice] == noted


@pytest.mark.parametrize(("commands", "expected"), [([], []), (["python train.py --debug"], [("XLA003", 20)])])
def test_a_switch_read_with_getattr_and_a_default_is_the_same_switch(tmp_path: Path, commands: list[str],
                                                                     expected: list[tuple[str, int]]) -> None:
    """`if getattr(args, "debug", False):` reads the option `--debug` where it is set, else the default."""
    write(tmp_path, {"train.py": SWITCHED.replace("if args.debug:", 'if getattr(args, "debug", False):')})
    result = lint_tree(tmp_path, commands=commands)
    assert [(f.rule, f.line) for f in result.findings] == expected and result.advice == ()


SUBCOMMANDS = {
    "main.py": """
import argparse

def train_cmd():
    from training.trainer import fit
    fit()

def chat_cmd():
    print("hello")

parser = argparse.ArgumentParser()
sub = parser.add_subparsers(dest="command")
sub.add_parser("train")
sub.add_parser("chat")
args = parser.parse_args()
if args.command == "train":
    train_cmd()
elif args.command == "chat":
    chat_cmd()
""",
    "training/__init__.py": "",
    "training/trainer.py": """
import torch
from core.accelerator import mark_step

def fit(model, loader, optimizer):
    for inputs, targets in loader:
        loss = model(inputs.to("cuda" if torch.cuda.is_available() else "cpu")).mean()
        loss.backward()
        optimizer.step()
        mark_step()
        print(loss.item())
""",
    "core/__init__.py": "",
    "core/accelerator.py": """
_xm = None

def load():
    global _xm
    import torch_xla.core.xla_model as xm
    _xm = xm

def mark_step():
    if _xm is not None:
        _xm.mark_step()
""",
}


@pytest.mark.parametrize(("command", "sure"), [("python main.py train", True), ("python main.py chat", False)])
def test_a_subcommand_the_command_names_picks_its_branch(tmp_path: Path, command: str, sure: bool) -> None:
    """`python main.py train` runs the `train` subcommand's branch: its trainer's per-step read is a finding
    (the trainer ends its steps through the project's `mark_step`, a lazily imported `_xm`, and mentions CUDA:
    still a PyTorch/XLA loop). Another subcommand leaves the read a note: nothing the command runs reaches it."""
    write(tmp_path, SUBCOMMANDS)
    result = lint_tree(tmp_path, commands=[command])
    found = [(f.file, f.rule, f.line) for f in result.findings]
    noted = [(f.file, f.rule, f.line) for f in result.advice]
    read = ("training/trainer.py", "XLA003", 11)
    assert (read in found, read in noted) == (sure, not sure)


def test_padding_is_a_note_that_says_why(tmp_path: Path) -> None:
    """Padding to the longest is a note wherever it is: whether it changes shapes is in the data (the run counts
    the compilations). A collate function only another script uses (an inference demo) runs in training only if
    something reaches it by a name the source does not hold: its note says that first."""
    write(tmp_path, {
        "train.py": "from text import collate, encode_prompt\nloader = DataLoader(data, collate_fn=collate)\n"
                    "prompt = encode_prompt(tokenizer, 'hi')\n",
        "text.py": "def collate(tokenizer, lines):\n    return tokenizer(lines, padding=True)\n\n\n"
                   "def collate_for_demo(tokenizer, lines):\n    return tokenizer(lines, padding=True)\n\n\n"
                   "def encode_prompt(tokenizer, line):\n    return tokenizer([line], padding=True)\n",
        "demo.py": "from text import collate_for_demo\nprint(collate_for_demo(tokenizer, ['hi']))\n",
    })
    result = lint_tree(tmp_path, commands=["python train.py"])
    data = "(a guess: padding to the longest changes the shape only if the examples' lengths differ; the run " \
        "counts the compilations)"
    assert result.findings == ()
    assert [(n.file, n.line) for n in result.advice] == [("text.py", 2), ("text.py", 6), ("text.py", 10)]
    assert result.advice[0].message.endswith(data) and result.advice[2].message.endswith(data)
    assert result.advice[1].message.endswith("(a guess: no code the command runs names collate_for_demo (a config "
                                             "or a registry may build it))")
    assert [(n.file, n.line) for n in lint_tree(tmp_path).advice] == [("text.py", 2), ("text.py", 6),
                                                                     ("text.py", 10)]


def test_a_step_in_a_class_only_a_config_or_a_registry_names_is_a_note(tmp_path: Path) -> None:
    """Hydra's `_target_: losses.FocalLoss` in a YAML file, `@registry.register_loss("focal")`: the source does
    not say which of the loss classes runs, so what the lint finds in the ones it never names is a note saying
    so; in the loss the trainer builds by name it is a note too (a branch in a forward, on a value only guessed
    to be a tensor). A script whose own code calls none of its functions is driven from outside (a notebook): its loop's
    read is a finding."""
    loss = ("import torch\n\n\nclass {name}(torch.nn.Module):\n    def forward(self, logits, target):\n"
            "        if target.sum() > 0:\n            return logits.mean()\n        return logits.sum()\n")
    write(tmp_path, {
        "train.py": "import torch_xla.core.xla_model as xm\nfrom losses import PlainLoss\n\n\n"
                    "def run(model, loader, optimizer):\n    criterion = PlainLoss()\n    for x, y in loader:\n"
                    "        criterion(model(x), y).backward()\n        xm.optimizer_step(optimizer)\n\n\n"
                    "if __name__ == '__main__':\n    run(model, loader, optimizer)\n",
        "losses.py": loss.format(name="PlainLoss") + "\n\n" + loss.format(name="FocalLoss").split("\n", 2)[2],
        "library.py": "import torch_xla.core.xla_model as xm\n\n\ndef fit(model, loader, optimizer):\n"
                      "    for x in loader:\n        model(x).sum().backward()\n        xm.optimizer_step(optimizer)\n"
                      "        print(model(x).sum().item())\n",
    })
    result = lint_tree(tmp_path, commands=["python train.py", "python library.py"])
    assert [(f.file, f.line) for f in result.findings] == [("library.py", 8)]
    assert [(n.file, n.line) for n in result.advice] == [("losses.py", 6), ("losses.py", 14)]
    assert "taken for a device tensor by its name" in result.advice[0].message  # a branch in a forward: a guess
    assert "no code the command runs names FocalLoss" in result.advice[1].message


def test_a_trainer_a_setting_picks_by_text_is_reached_but_not_surely(tmp_path) -> None:
    """`if config.cores == "multi": xmp.spawn(run_multi)` with the value unknown: both sides maybe run (notes);
    `if args.mode == "train":` with `--mode` defaulting to "train": only that side runs, the other reaches
    nothing; `from loops.a import run as run_a` reaches `run`; a docstring naming `run` does not."""
    (tmp_path / "loops").mkdir()
    (tmp_path / "run.py").write_text(textwrap.dedent('''
        """Runs the model; see run() in each loop."""
        import argparse
        from loops.a import run as run_a
        from loops.b import walk
        from loops.c import evaluate
        from loops.d import train

        def main(config):
            parser = argparse.ArgumentParser()
            parser.add_argument("--mode", default="train")
            args = parser.parse_args()
            if args.mode == "train":
                train(config)
            else:
                evaluate(config)
            if config.cores == "single":
                run_a(config)
            elif config.cores == "multi":
                walk(config)

        main(object())
        '''))
    for name, function in (("a", "run"), ("b", "walk"), ("c", "evaluate"), ("d", "train")):
        (tmp_path / "loops" / f"{name}.py").write_text(f"def {function}(config):\n    return config\n")
    source_modules = [Module.of(str(p.relative_to(tmp_path)), ast.parse(p.read_text()), p.read_text())
                      for p in sorted(tmp_path.rglob("*.py"))]
    project = Project(source_modules)
    reached = reached_names(project, ("run.py",), Settings.of(project))
    assert {"main", "train"} <= reached.surely and not {"run", "walk", "evaluate"} & reached.surely
    assert {"run", "walk"} <= reached.maybe and "evaluate" not in reached.maybe


def test_a_reached_class_reaches_through_its_hooks_and_named_methods_only() -> None:
    """A model's `forward` (called by PyTorch) reaches what it builds; its `set_beam_decoder`, which only an
    evaluation script calls, does not; nor does a class named in a text a value is compared with."""
    source = textwrap.dedent('''
        class Greedy:
            def forward(self, x):
                return x

        class Beam:
            def forward(self, x):
                return x

        class Model:
            def forward(self, x):
                if type(self.decoder).__name__ in ("Beam",):
                    return x
                return Greedy().forward(x)

            def set_beam_decoder(self):
                self.decoder = Beam()

        Model().forward(1)
        ''')
    project = Project([Module.of("train.py", ast.parse(source), source)])
    reached = reached_names(project, ("train.py",), Settings.of(project))
    assert {"Model", "Greedy"} <= reached.maybe and "Beam" not in reached.maybe

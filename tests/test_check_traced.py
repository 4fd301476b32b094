"""A finding is sure only in code the command's calls reach through names its imports resolve; code reached only
by its name (another module's function of the same name, a method nothing calls) gives a note."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from tpuops.check.lint import lint_tree
from tpuops.check.project import Module, Project
from tpuops.check.settings import Settings
from tpuops.check.settle import split_unreached
from tpuops.check.traced import traced

LOOP = """
import torch_xla.core.xla_model as xm


def {name}(model, loader, optimizer):
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        xm.optimizer_step(optimizer)
        print(loss.item())
"""

METHOD = """
    def {name}(self, model, loader, optimizer):
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            xm.optimizer_step(optimizer)
            print(loss.item())
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def sure_and_noted(root: Path, command: str) -> tuple[list[tuple[str | None, int | None]], list[str]]:
    result = lint_tree(root, commands=[command])
    return [(f.file, f.line) for f in result.findings], [f"{n.file}:{n.line}" for n in result.advice]


def test_of_two_functions_of_one_name_the_one_the_script_imports_is_sure(tmp_path: Path) -> None:
    """Every loop module defines `test()`; the script imports the one of loops/a.py, and only `summary` of
    loops/b.py: what the lint finds in loops/b.py's `test` is a note."""
    write(tmp_path, {
        "run.py": "from loops.a import test as test_a\nfrom loops.b import summary\n\n"
                  "test_a(model, loader, opt)\nsummary()\n",
        "loops/a.py": LOOP.format(name="test"),
        "loops/b.py": LOOP.format(name="test") + "\n\ndef summary():\n    return 'done'\n",
    })
    sure, noted = sure_and_noted(tmp_path, "python run.py")
    assert sure == [("loops/a.py", 10)]
    assert noted == ["loops/b.py:10"]
    advice = lint_tree(tmp_path, commands=["python run.py"]).advice[0].message
    assert "no call of the command's code that its imports resolve reaches test" in advice


def test_a_method_nothing_calls_is_a_note_and_a_script_driven_from_outside_runs_them_all(tmp_path: Path) -> None:
    """`Trainer.fit` is called; `Trainer.export_scores` is not (another script of the author's used it). A script
    whose own code calls none of its definitions (a notebook's cells, a library file) may run any method."""
    trainer = "class Trainer:\n" + "".join(METHOD.format(name=name) for name in ("fit", "export_scores"))
    write(tmp_path, {
        "train.py": "from trainer import Trainer\nTrainer().fit(model, loader, optimizer)\n",
        "trainer.py": "import torch_xla.core.xla_model as xm\n\n\n" + trainer,
    })
    lines = [i for i, text in enumerate((tmp_path / "trainer.py").read_text().splitlines(), 1) if ".item()" in text]
    sure, noted = sure_and_noted(tmp_path, "python train.py")
    assert sure == [("trainer.py", lines[0])]
    assert noted == [f"trainer.py:{lines[1]}"]
    assert "reaches Trainer.export_scores" in lint_tree(tmp_path, commands=["python train.py"]).advice[0].message
    sure, noted = sure_and_noted(tmp_path, "python trainer.py")
    assert sure == [("trainer.py", lines[0]), ("trainer.py", lines[1])] and noted == []


def test_a_module_handed_on_as_a_value_runs_the_functions_called_by_their_names(tmp_path: Path) -> None:
    """`steps = bert_steps` ... `steps.train(...)`: each module the code may hand on runs its `train`, not its
    `export`; `import src.steps.bert_steps` from a script run as `cd .. && python -m src.main` names
    steps/bert_steps.py of the code directory."""
    code = tmp_path / "src"
    write(code, {
        "main.py": "import src.steps.bert_steps as bert_steps\nimport src.steps.gpt_steps as gpt_steps\n\n\n"
                   "def pick(name):\n    return bert_steps if name == 'bert' else gpt_steps\n\n\n"
                   "pick(model_name).train(model, loader, optimizer)\n",
        "steps/__init__.py": "",
        "steps/bert_steps.py": LOOP.format(name="train") + LOOP.format(name="export").split("\n", 3)[3],
        "steps/gpt_steps.py": LOOP.format(name="train"),
    })
    sure, noted = sure_and_noted(code, "cd .. && python -m src.main")
    assert sure == [("steps/bert_steps.py", 10), ("steps/gpt_steps.py", 10)]
    assert noted == ["steps/bert_steps.py:17"]


def test_a_name_imported_in_two_functions_from_two_modules_may_mean_either(tmp_path: Path) -> None:
    """`from train_xla import run` in one function, `from train_gpu import run` in another: both are sure (the
    settings pick one at run time, and both are named by an import)."""
    write(tmp_path, {
        "main.py": "def main_xla():\n    from train_xla import run\n    run(model, loader, optimizer)\n\n\n"
                   "def main_other():\n    from train_other import run\n    run(model, loader, optimizer)\n\n\n"
                   "if __name__ == '__main__':\n    main_xla() if use_xla else main_other()\n",
        "train_xla.py": LOOP.format(name="run"),
        "train_other.py": LOOP.format(name="run"),
    })
    sure, noted = sure_and_noted(tmp_path, "python main.py")
    assert sure == [("train_other.py", 10), ("train_xla.py", 10)] and noted == []


def test_lightning_runs_its_test_hooks_only_when_asked_and_keras_in_fit_too() -> None:
    """`trainer.fit(model)` runs a LightningModule's `training_step`, not its `test_step` (`trainer.test` would);
    Keras runs a model's `test_step` in `fit` too, to validate."""
    lightning = "import lightning as L\n\n\nclass Net(L.LightningModule):\n    def training_step(self, b, i):\n" \
                "        return b\n\n    def test_step(self, b, i):\n        return b\n\n\n" \
                "L.Trainer().fit(Net())\n"
    keras = "import tensorflow as tf\n\n\nclass Net(tf.keras.Model):\n    def train_step(self, data):\n" \
            "        return {}\n\n    def test_step(self, data):\n        return {}\n\n\nNet().fit(data)\n"
    for source, tested in ((lightning, False), (keras, True), (lightning.replace(".fit(", ".test("), True)):
        project = Project([Module.of("train.py", ast.parse(source), source)])
        places = traced(project, ("train.py",), Settings.of(project))
        assert (("train.py", "Net.test_step") in places.surely) is tested, source


def test_what_only_a_module_the_command_may_not_load_names_is_a_note(tmp_path: Path) -> None:
    """A config builder (`build_from_cfg`) may load any module, so every file is linted; but the top-level code
    of a demo app no script imports does not run: the model class only it names gives a note."""
    write(tmp_path, {
        "train.py": "from mmcv import build_from_cfg\nfrom models import fit\n\n"
                    "fit(build_from_cfg(cfg), loader, optimizer)\n",
        "models.py": LOOP.format(name="fit") + LOOP.format(name="demo_loop").split("\n", 3)[3],
        "app.py": "from models import demo_loop\n\ndemo_loop(model, loader, optimizer)\n",
    })
    sure, noted = sure_and_noted(tmp_path, "python train.py")
    assert sure == [("models.py", 10)]
    assert noted == ["models.py:17"]


def test_a_mixin_reached_only_as_a_base_of_a_class_defined_on_import_is_a_listed_note(tmp_path: Path) -> None:
    """models.py defines `Seq2Seq(Generator)` besides the classifier the trainer uses: defining it makes no
    instance, so the generation loop `.generate(...)` names elsewhere is only guessed to run, as a note the report
    lists (a registry or a config may build Seq2Seq). Once the trainer builds a Seq2Seq, it is sure."""
    generator = "class Generator:\n" + METHOD.format(name="generate")
    write(tmp_path, {
        "train.py": "from models import Classifier\nfrom samplers import sampler\n\n"
                    "Classifier().fit(loader)\nsampler.generate(prompts)\n",
        "models.py": "from generation import Generator\n\n\nclass Classifier:\n    def fit(self, loader):\n"
                     "        return loader\n\n\nclass Seq2Seq(Generator):\n    pass\n",
        "generation.py": "import torch_xla.core.xla_model as xm\n\n\n" + generator,
        "samplers.py": "sampler = None\n",
    })
    line = next(i for i, text in enumerate((tmp_path / "generation.py").read_text().splitlines(), 1)
                if ".item()" in text)
    result = lint_tree(tmp_path, commands=["python train.py"])
    listed, unreached = split_unreached(result.advice, result.anchors)
    assert result.findings == () and [f"{n.file}:{n.line}" for n in listed] == [f"generation.py:{line}"]
    assert unreached == [] and "reaches Generator only through the base of a class defined on import" in \
        listed[0].message
    (tmp_path / "train.py").write_text("from models import Seq2Seq\n\nSeq2Seq().generate(prompts)\n")
    assert sure_and_noted(tmp_path, "python train.py") == ([("generation.py", line)], [])


def test_a_step_function_made_by_a_factory_and_called_per_batch_is_a_step_though_it_runs_step_loops() -> None:
    """`step = make_gan_step(...)` ... `step(real)` for each batch of a device loader: the function the factory
    returns is resolved, and though it runs a loop of discriminator steps, what follows them (both losses read
    with `.item()`) runs every batch; `evaluate`, a loop over a held-out loader run once per epoch, stays quiet."""
    case = Path(__file__).parent / "check_corpus" / "xla_gan_step_factory"
    result = lint_tree(case, commands=["python train.py"])
    assert [(n.file, n.line) for n in result.advice] == [("gan_steps.py", 21)] and result.findings == ()
    assert "gan_step is called by loop at line 19" in result.advice[0].message

"""What users read when the input is wrong: one line `tpuops: error: WHAT (hint: HOW)`, never Python's own
texts, never click's usage block; and the conventions of the ecosystem (--version, help order, completion)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import run_cli, write_spec
from tests.test_spec import GOOD
from tpuops import __version__

ONE_LINE = re.compile(r"^tpuops: error: .+ \(hint: .+\)$")


def only_error_line(result) -> str:  # noqa: ANN001
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert ONE_LINE.match(lines[0]), lines[0]
    assert "Traceback" not in result.stderr and "Errno" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "expected"), [
    (["plan"], "plan: missing argument 'SPEC'"),
    (["plan", "x.yaml", "--bogus"], "plan: no such option: --bogus"),
    (["logs", "--interval", "-1"], "logs: invalid value for '--interval'"),
    (["pland"], "no such command 'pland'"),
])
def test_usage_errors_are_one_line_exit_2(args: list[str], expected: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    assert expected in only_error_line(result)
    assert "Usage:" not in result.stderr and result.stdout == ""


def test_duplicate_keys_name_both_lines(tmp_path: Path) -> None:
    (tmp_path / "shards").mkdir()
    text = GOOD.replace("zone: europe-west4-a", "zone: europe-west4-a\nzone: us-central1-b")
    path = write_spec(tmp_path, text)
    first = 1 + path.read_text().splitlines().index("zone: europe-west4-a")
    result = run_cli("plan", str(path))
    assert result.returncode == 2
    line = only_error_line(result)
    assert f"{path}:{first + 1}: duplicate key 'zone' (first at {path}:{first})" in line


def test_duplicate_keys_in_nested_mappings_and_lists(tmp_path: Path) -> None:
    path = write_spec(tmp_path, """
        name: dup
        provider: local
        tpu: {type: v2-8}
        data:
          - from: a
            to: b
            to: c
        """)
    line = only_error_line(run_cli("plan", str(path)))
    assert f"{path}:7: duplicate key 'to' (first at {path}:6)" in line


def test_spec_given_as_a_directory(tmp_path: Path) -> None:
    line = only_error_line(run_cli("plan", str(tmp_path)))
    assert f"{tmp_path} is a directory, not a spec file" in line
    assert "does not exist" not in line


def test_binary_spec_is_not_a_codec_message(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(b"name: x\n\x89PNG\r\n\x1a\n\xff\xfe")
    line = only_error_line(run_cli("plan", str(path)))
    assert "is not UTF-8 text (byte 0x89" in line and "codec" not in line


def test_logdir_given_as_a_file(tmp_path: Path) -> None:
    (tmp_path / "events").write_text("x")
    line = only_error_line(run_cli("logs", "--logdir", str(tmp_path / "events")))
    assert "is a file, not a directory" in line and "does not exist" not in line


def test_init_into_a_missing_directory(tmp_path: Path) -> None:
    line = only_error_line(run_cli("init", str(tmp_path / "no" / "spec.yaml")))
    assert f"the directory {tmp_path / 'no'} does not exist" in line


def test_zone_outside_the_catalog_is_not_said_to_exist(tmp_path: Path) -> None:
    (tmp_path / "shards").mkdir()
    path = write_spec(tmp_path, GOOD.replace("europe-west4-a", "mars-north1-z"))
    result = run_cli("plan", str(path))
    assert result.returncode == 0, result.stderr  # the catalog advises; `up` asks Google's API
    assert "zone mars-north1-z is unknown to" in result.stdout and "`up` will ask it" in result.stdout
    assert "does not exist" not in result.stdout + result.stderr


def test_no_network_is_a_sentence_with_a_hint() -> None:
    """The real chain google-auth builds when DNS fails, through the real GCP translator."""
    import requests
    from google.auth.exceptions import TransportError

    from tpuops.cli.errors import render_error
    from tpuops.cloud.gcp.errors import translate

    cause = requests.ConnectionError(
        "HTTPSConnectionPool(host='oauth2.googleapis.com', port=443): Max retries exceeded with url: /token "
        "(Caused by NameResolutionError(\"<urllib3.connection.HTTPSConnection object>: Failed to resolve "
        "'oauth2.googleapis.com' ([Errno -2] Name or service not known)\"))")
    try:
        try:
            raise TransportError(cause) from cause
        except TransportError as err:
            raise translate(err, "get TPU bert", "tpu") from err
    except Exception as err:  # noqa: BLE001
        line, code = render_error(err)
    assert code == 1
    assert line.startswith("tpuops: error: get TPU bert: cannot reach oauth2.googleapis.com (its name does not "
                           "resolve: no network or no DNS?) (hint: check the network connection")
    assert "Errno" not in line and "HTTPSConnectionPool" not in line


def test_os_errors_are_sentences() -> None:
    from tpuops.cli.errors import render_error

    line, _ = render_error(IsADirectoryError(21, "Is a directory", "/tmp/x"))
    assert line == "tpuops: error: /tmp/x is a directory, not a file (hint: give the path of a file inside it)"
    line, _ = render_error(UnicodeDecodeError("utf-8", b"ab\xff", 2, 3, "invalid start byte"))
    assert "byte 0xff at offset 2 is not UTF-8" in line and "codec" not in line


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout == f"tpuops {__version__}\n"


def test_help_lists_commands_in_workflow_order() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    section = result.stdout.split("Commands:")[1]
    listed = [line.split()[0] for line in section.splitlines() if line.startswith("  ") and line.strip()
              and not line.startswith("   ")]
    workflow = ["init", "plan", "up", "status", "push", "pull", "exec", "ssh", "launch", "logs", "watch", "stop",
                "down", "run", "schema"]
    assert [name for name in listed if name in workflow] == workflow
    assert "--install-completion" in result.stdout and "--show-completion" in result.stdout


def test_order_list_places_new_commands() -> None:
    from tpuops.cli.app import COMMAND_ORDER

    assert COMMAND_ORDER.index("catalog") < COMMAND_ORDER.index("up")
    assert COMMAND_ORDER.index("check") < COMMAND_ORDER.index("up")


WORKFLOW = ["init", "plan", "up", "status", "push", "pull", "exec", "ssh", "ssh-config", "launch", "logs",
            "tensorboard", "watch", "stop", "down", "run", "schema"]


@pytest.mark.parametrize("command", WORKFLOW)
def test_every_help_has_an_example_and_readable_metavars(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0, result.stderr
    assert re.search(r"\n  Examples?:\n    tpuops " + command + r"\b", result.stdout), result.stdout
    usage = result.stdout.split("\n")[0]
    options = result.stdout.split("Options:")[1]
    for text in (usage, options):
        assert "<" not in text and "list[" not in text and "range" not in text, text


@pytest.mark.parametrize("command", ["plan", "up", "status", "down", "run", "watch", "push", "launch", "logs"])
def test_commands_that_reach_the_cloud_take_project(command: str) -> None:
    assert "--project PROJECT" in run_cli(command, "--help").stdout


@pytest.mark.parametrize("command", ["up", "down", "run", "watch"])
def test_commands_that_may_ask_take_yes(command: str) -> None:
    assert "--yes" in run_cli(command, "--help").stdout


def test_completion_of_cluster_names_and_spec_files(tmp_path: Path) -> None:
    """Typer's completion protocol, as bash calls it: cluster names from local state, YAML files for SPEC."""
    home = tmp_path / "home"
    for name in ("alpha", "beta"):
        (home / "clusters" / name).mkdir(parents=True)
        (home / "clusters" / name / "state.json").write_text("{}")
    (tmp_path / "spec.yaml").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "sub").mkdir()

    def complete(words: str) -> list[str]:
        env = {"_TPUOPS_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1
               + words.endswith(" ")), "TPUOPS_HOME": str(home)}
        result = run_cli(env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    assert complete("tpuops status a") == ["alpha"]
    assert sorted(complete("tpuops exec ")) == ["alpha", "beta"]
    assert sorted(complete("tpuops plan ")) == ["home/", "spec.yaml", "sub/"]  # not notes.txt
    assert complete("tpuops run s") == ["spec.yaml", "sub/"]


def test_a_bad_ignore_pattern_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / ".tpuopsignore").write_text("data/\n# comment\n!\n")
    spec = write_spec(tmp_path, """
        name: ignored
        provider: local
        tpu: {type: v2-8, workers: 1}
        code: {path: code}
        trainer: {framework: jax, command: python3 train.py}
        """)
    expected = f"{code / '.tpuopsignore'}:3: '!' is not a valid gitignore pattern"
    checked = run_cli("check", str(spec), "--no-run")
    assert checked.returncode == 2 and expected in only_error_line(checked)
    assert run_cli("up", str(spec)).returncode == 0
    try:
        pushed = run_cli("push", "ignored")
        assert pushed.returncode == 2 and expected in only_error_line(pushed)
    finally:
        run_cli("down", "ignored", "--yes")


def test_ignore_patterns_can_be_checked_before_anything_is_created(tmp_path: Path) -> None:
    from tpuops.errors import UsageError
    from tpuops.remote.manifest import check_ignore_patterns

    check_ignore_patterns(tmp_path, ["*.ckpt", "\\!important"])
    with pytest.raises(UsageError, match=r"code.exclude\[1\]: '!' is not a valid gitignore pattern"):
        check_ignore_patterns(tmp_path, ["*.ckpt", "!"])


def test_a_mistyped_cluster_name_is_answered_with_the_close_one(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, """
        name: quickstart
        provider: local
        tpu: {type: v2-8, workers: 1}
        """)
    assert run_cli("up", str(spec)).returncode == 0
    try:
        env = {"GOOGLE_CLOUD_PROJECT": "", "CLOUDSDK_CORE_PROJECT": "", "CLOUDSDK_CONFIG": str(tmp_path / "gcloud")}
        for args in (["status", "quickstrat"], ["down", "quickstrat", "--yes"], ["exec", "quickstrat", "--", "true"]):
            result = run_cli(*args, env=env)
            assert result.returncode == 1
            assert "no cluster named 'quickstrat' here (did you mean quickstart?)" in only_error_line(result)
            assert "project" not in result.stderr.split("(hint:")[0]
    finally:
        run_cli("down", "quickstart", "--yes")

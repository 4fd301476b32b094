"""The VM's own token, one part (`shipped/metadata_token.py`) shared by the programs that act as the VM: the
autostop agent, the guard VM's bundle fetcher and the worker's output shipper. Each carries it as shipped; the part
itself against the fake metadata server on loopback."""

from __future__ import annotations

import ast
import sys

import pytest

from tests.fakes.metadata import MetadataFake
from tpuops.shipped import program
from tpuops.shipped.metadata_token import MetadataToken

ACTING_AS_THE_VM = ("autostop_agent", "guard_fetch_bundle", "output_shipper")


@pytest.mark.parametrize("name", ACTING_AS_THE_VM)
def test_each_program_carries_the_token_part_and_nothing_of_tpuops(name: str) -> None:
    text = program(name)
    tree = ast.parse(text, feature_version=(3, 8))  # the hosts' python3 may be 3.8
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module}
    assert imported <= set(sys.stdlib_module_names), imported
    assert [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)].count("MetadataToken") == 1


def test_the_token_is_asked_for_once_until_it_nears_its_expiry() -> None:
    with MetadataFake(expires_in=3599) as metadata:
        token = MetadataToken(metadata.host)
        assert token.get() == token.get() == metadata.tokens_issued[0]
        assert len(metadata.tokens_issued) == 1
        assert all(request.headers.get("metadata-flavor") == "Google" for request in metadata.requests)
    with MetadataFake(expires_in=30) as metadata:  # within a minute of its expiry: asked for again
        token = MetadataToken(metadata.host)
        token.get()
        token.get()
        assert len(metadata.tokens_issued) == 2


def test_without_a_host_it_asks_the_one_gce_metadata_host_names(monkeypatch: pytest.MonkeyPatch) -> None:
    with MetadataFake() as metadata:
        monkeypatch.setenv("GCE_METADATA_HOST", metadata.host)
        assert MetadataToken().get() == metadata.tokens_issued[0]
    monkeypatch.delenv("GCE_METADATA_HOST")
    assert MetadataToken().host == "metadata.google.internal"

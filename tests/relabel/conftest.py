"""One real ``transformers serve`` per test session (a tiny random-weight VLM written by model/'s own
code), and a fault proxy in front of it per test."""

from __future__ import annotations

import pytest

from tests.relabel.fault_proxy import FaultProxy


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    from model.checkpoint import export_tiny

    return export_tiny(tmp_path_factory.mktemp("relabel") / "tiny-checkpoint")


@pytest.fixture(scope="session")
def relabel_server(tiny_checkpoint):
    from relabel.serve import LocalServer

    server = LocalServer(str(tiny_checkpoint), startup_timeout_s=300)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def proxy(relabel_server):
    p = FaultProxy(relabel_server.port)
    yield p
    p.close()

from __future__ import annotations

from types import ModuleType

import pytest

from tests.rpc.service import compile_proto


@pytest.fixture(scope="session")
def pb2(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return compile_proto(tmp_path_factory.mktemp("shop_proto"))

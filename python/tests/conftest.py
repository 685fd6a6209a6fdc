"""Fixtures of the Python tests: the model from ../shared (skipped when absent, a failure under
NPULLM_REQUIRE_DATA=1, as scripts/test.sh sets), a blob cache in a temp dir, the npullm binary."""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("NPULLM_SHARED_DIR", REPO.parent / "shared"))
MODEL = SHARED / "models/llama2c/stories260K.gguf"


@pytest.fixture(scope="session")
def model_path():
    if not MODEL.exists():
        message = f"needs {MODEL} (not present: test data missing)"
        if os.environ.get("NPULLM_REQUIRE_DATA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return str(MODEL)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("blob-cache"))


@pytest.fixture(scope="session")
def npullm_binary():
    path = os.environ.get("NPULLM_BINARY")
    if not path or not os.path.exists(path):
        pytest.skip("NPULLM_BINARY is not set to the npullm tool")
    return path


@pytest.fixture(scope="session")
def llm(model_path, cache_dir):
    import npullm
    with npullm.LLM(model_path, cache_dir=cache_dir, threads=2) as model:
        yield model


@pytest.fixture(scope="session")
def chat_llm(model_path, cache_dir):
    import npullm
    with npullm.LLM(model_path, cache_dir=cache_dir, threads=2, chat_template="chatml") as model:
        yield model

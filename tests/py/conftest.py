"""Shared fixtures for the Python client tests (jupyter_kernel_test, jupyter_client, nbclient).

Jupyter state is kept out of $HOME: before any test runs, JUPYTER_PATH, JUPYTER_DATA_DIR,
JUPYTER_RUNTIME_DIR, JUPYTER_CONFIG_DIR and IPYTHONDIR point into one temporary directory,
with JUPYTER_PLATFORM_DIRS=1. The ``jaxrepl_kernelspec`` fixture installs the kernelspec
afresh there, pointing at the kernel binary under test:

    $JAXREPL_KERNEL_BIN, default $CARGO_TARGET_DIR/debug/jaxrepl-kernel
    (CARGO_TARGET_DIR defaults to <repo>/target)

Use it from any test that starts a ``jaxrepl`` kernel by name (nbclient included):

    def test_notebook(jaxrepl_kernelspec):
        NotebookClient(nb, kernel_name=jaxrepl_kernelspec.name, ...).execute()

or, for unittest classes, ``@pytest.mark.usefixtures("jaxrepl_kernelspec")``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KERNEL_NAME = "jaxrepl"

# Seconds a first cell may take: the session starts evcxr (3-6 s), and with the prelude on
# builds or loads the engine (34 s cold, a few seconds from a warm build slot), on 2 loaded
# cores. Later cells take well under a second to a few seconds.
FIRST_CELL_TIMEOUT = float(os.environ.get("JAXREPL_TEST_FIRST_CELL_TIMEOUT", "600"))
CELL_TIMEOUT = float(os.environ.get("JAXREPL_TEST_CELL_TIMEOUT", "120"))

_JUPYTER_VARS = (
    "JUPYTER_PATH",
    "JUPYTER_DATA_DIR",
    "JUPYTER_RUNTIME_DIR",
    "JUPYTER_CONFIG_DIR",
    "JUPYTER_PLATFORM_DIRS",
    "IPYTHONDIR",
)
_saved_env: dict[str, str | None] = {}
_jupyter_root: Path | None = None


def kernel_binary() -> Path:
    """The kernel binary under test (see the module docstring)."""
    explicit = os.environ.get("JAXREPL_KERNEL_BIN")
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    return target / "debug" / "jaxrepl-kernel"


def pytest_configure(config: pytest.Config) -> None:
    """Points every Jupyter directory into a fresh temporary directory for this run."""
    global _jupyter_root
    _jupyter_root = Path(tempfile.mkdtemp(prefix="jaxrepl-jupyter-"))
    dirs = {
        "JUPYTER_PATH": _jupyter_root / "path",
        "JUPYTER_DATA_DIR": _jupyter_root / "data",
        "JUPYTER_RUNTIME_DIR": _jupyter_root / "runtime",
        "JUPYTER_CONFIG_DIR": _jupyter_root / "config",
        "IPYTHONDIR": _jupyter_root / "ipython",
    }
    for var in _JUPYTER_VARS:
        _saved_env[var] = os.environ.get(var)
    for var, path in dirs.items():
        path.mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(path)
    os.environ["JUPYTER_PLATFORM_DIRS"] = "1"


def pytest_unconfigure(config: pytest.Config) -> None:
    for var, value in _saved_env.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    if _jupyter_root is not None:
        shutil.rmtree(_jupyter_root, ignore_errors=True)


@dataclass(frozen=True)
class Kernelspec:
    """An installed ``jaxrepl`` kernelspec."""

    name: str
    """The kernel name to pass to jupyter_client / nbclient."""
    binary: Path
    """The kernel binary the spec runs."""
    spec_file: Path
    """The installed kernel.json."""
    spec: dict
    """Its parsed content."""


@pytest.fixture(scope="session")
def jaxrepl_kernelspec() -> Kernelspec:
    """Installs the ``jaxrepl`` kernelspec into this run's JUPYTER_PATH (once per run)."""
    binary = kernel_binary()
    if not binary.is_file():
        pytest.fail(
            f"kernel binary {binary} does not exist: build it (cargo build -p jaxrepl-kernel) "
            "or set JAXREPL_KERNEL_BIN",
            pytrace=False,
        )
    data_dir = Path(os.environ["JUPYTER_PATH"])
    done = subprocess.run(
        [str(binary), "--install", str(data_dir)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"--install failed: {done.stderr}"
    spec_file = data_dir / "kernels" / KERNEL_NAME / "kernel.json"
    spec = json.loads(spec_file.read_text())
    assert Path(spec["argv"][0]).resolve() == binary.resolve()
    return Kernelspec(KERNEL_NAME, binary, spec_file, spec)


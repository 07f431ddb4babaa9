"""The built wheel installs one import package, `boundloop`, and nothing with a generic name.

The wheel is built from the checkout and installed without dependencies into a fresh venv; the
dependencies come from the test environment's site-packages on PYTHONPATH, which (unlike a site
directory) loads no editable-install hook, so every `boundloop` module imported here is the
wheel's own copy. Everything runs from an empty directory, so nothing is found by accident in the
current one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GENERIC = ("graph", "nodes", "tools", "checkpoints", "mcp_servers")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out, source = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source") / "boundloop"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):  # a copy: the build leaves build/ and *.egg-info beside its source
        shutil.copy(ROOT / name, source / name)
    for folder in GENERIC:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (found,) = out.glob("boundloop-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return python


def run_python(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    deps = sysconfig.get_paths()["purelib"]
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": deps})


def test_the_wheel_holds_one_top_level_package_with_its_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"boundloop"}
    for data in ("boundloop/graph/scripts/demo.json", "boundloop/graph/evals/default.json", "boundloop/graph/console/templates/"):
        assert any(name.startswith(data) for name in names), data


def test_every_product_package_is_in_the_wheel(wheel: Path) -> None:
    """A new sub-package that the build configuration does not list would be missing from installs."""
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [
        str(init.relative_to(ROOT))
        for folder in GENERIC
        for init in (ROOT / folder).rglob("__init__.py")
        if "_package" not in init.parts
        and "boundloop/" + "/".join(init.relative_to(ROOT).parts) not in names
    ]
    assert missing == []


def test_installed_boundloop_imports_from_anywhere_and_generic_names_do_not(installed: Path, tmp_path: Path) -> None:
    probe = (
        "import importlib.util, boundloop, boundloop.graph.state\n"
        "from boundloop import Runner, RunSettings, Task\n"
        "print(boundloop.graph.state.__file__)\n"
        "print(sorted(n for n in %r if importlib.util.find_spec(n) is not None))\n" % (GENERIC,)
    )
    done = run_python(installed, probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    state_file, generic = done.stdout.splitlines()
    assert state_file.startswith(str(installed.parent.parent)), state_file  # the wheel's copy, not the checkout
    assert generic == "[]"


def test_the_installed_console_script_and_servers_start(installed: Path, tmp_path: Path) -> None:
    script = installed.parent / "boundloop"
    assert script.exists()
    done = run_python(installed, "import runpy, sys; sys.argv = ['x', '--help']; runpy.run_module('boundloop.mcp_servers.workspace', run_name='__main__')", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--http" in done.stdout

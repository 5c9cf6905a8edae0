"""setuptools' build backend, plus mypy among the build's requirements when
EDGEBUS_COMPILE=1 asks for the compiled core (setup.py): pip's isolated build
then installs it, so `EDGEBUS_COMPILE=1 pip install .` needs only a C
compiler and Python's headers. Without the variable it is setuptools'."""

import os

from setuptools import build_meta as _orig
from setuptools.build_meta import *  # noqa: F401, F403

# The mypy the checks pin (pyproject.toml's check extra): mypyc comes with it.
MYPY = "mypy==2.4.1"


def _compiled():
    return [MYPY] if os.environ.get("EDGEBUS_COMPILE") == "1" else []


def get_requires_for_build_wheel(config_settings=None):
    return _orig.get_requires_for_build_wheel(config_settings) + _compiled()


def get_requires_for_build_editable(config_settings=None):
    return _orig.get_requires_for_build_editable(config_settings) + _compiled()

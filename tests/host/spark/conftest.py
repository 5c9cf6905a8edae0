"""The Spark tests' one session fixture: a local session per test module."""

import pytest

from tests.host.spark.sparkkit import make_session


@pytest.fixture(scope="module")
def spark():
    """make_session(), stopped when the module's tests are done."""
    s = make_session()
    yield s
    s.stop()

"""The host tests' one Spark: a local session shared by every test that
asks for ``spark`` (a JVM start each is seconds the suite cannot spare)."""

import pytest

from tests.host.spark.sparkkit import make_session


@pytest.fixture(scope="session")
def spark():
    """make_session(), stopped when the tests are done. Tests must leave it as
    they found it: no stop(), no session settings changed."""
    s = make_session()
    yield s
    s.stop()

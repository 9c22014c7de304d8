"""The cycle collector is paused for a large step and on again after it, whatever happens."""

import gc

import pytest

from limits.core.collector import collector_paused


@pytest.fixture(autouse=True)
def _collector_restored():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_in_the_block_and_on_again_after_it():
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the inner end leaves it paused
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_on_again_after_an_error_in_the_decorated_function():
    gc.enable()

    @collector_paused()
    def step():
        raise ValueError("bad file")

    with pytest.raises(ValueError, match="bad file"):
        step()
    assert gc.isenabled()


def test_left_off_when_it_was_off_before():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()

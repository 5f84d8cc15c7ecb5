import pytest

from backfill_lib.validate.diff import diff_by_key


@pytest.fixture(params=["spark", "driver"])
def pairing(request, monkeypatch):
    """The test twice: the diff's pairs made by a Spark join, then collected and paired in the driver (as a run
    whose sides hold at most ``DRIVER_ROWS`` rows pairs them)."""
    if request.param == "driver":
        monkeypatch.setitem(diff_by_key.__kwdefaults__, "rows_at_most", 0)
    return request.param

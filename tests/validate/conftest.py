import pytest

from backfill_lib.validate.diff import diff_by_key


@pytest.fixture(params=["spark", "driver"])
def pairing(request, monkeypatch):
    """The test twice: the diff's pairs made by a Spark join, then collected and paired in the driver (as a run
    whose sides hold at most ``DRIVER_ROWS`` rows pairs them)."""
    if request.param == "driver":
        monkeypatch.setitem(diff_by_key.__kwdefaults__, "rows_at_most", 0)
    return request.param


@pytest.fixture
def recorder():
    """``recorder(calls, keys)``: a diff's ``inserted`` callback that appends to ``calls`` what it got: the
    inserted keys sorted, their columns (a list of Python values, as the driver's pairing passes it, is in the
    order of ``keys``), and the rows inserted."""
    def make(calls: list, keys: list[str]):
        def record(found, n):
            if isinstance(found, list):
                calls.append((sorted(found), keys, n))
            else:
                calls.append((sorted(tuple(r) for r in found.collect()), found.columns, n))
        return record
    return make

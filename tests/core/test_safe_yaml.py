"""The bounded YAML loader of requests and settings (issue 17, item 8): aliases load within bounds, recursive or
too deeply nested documents are refused (no Spark)."""

import pytest

from backfill_lib.core.safe_yaml import YAMLTooLarge, load


def test_yaml_aliases_within_bounds_load_and_recursive_ones_are_refused():
    assert load("base: &b {x: 1}\nother: *b\n") == {"base": {"x": 1}, "other": {"x": 1}}
    with pytest.raises(YAMLTooLarge, match="recursive alias"):
        load("a: &x [1, *x]\n")
    with pytest.raises(YAMLTooLarge, match="nest too deeply"):
        load("[" * 5000 + "]" * 5000)

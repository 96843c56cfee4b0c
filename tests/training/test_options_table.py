"""docs/training.md's option table is the one `training.options.table` generates from `TrainConfig`."""

import dataclasses
import typing

import pytest

from training.options import table as options_table
from training.options.config import TrainConfig, option_choices


def test_the_docs_hold_the_generated_table():
    with open(options_table.DOCS, encoding="utf-8") as f:
        documented = options_table.documented_table(f.read())
    assert documented is not None, "docs/training.md lost its option table markers"
    # On a difference: python -m training.options.table --write
    assert documented == options_table.options_table()


def test_the_table_follows_the_annotations_and_ranges():
    rows = {line.split(" | ")[0].strip("|` "): line for line in options_table.options_table().splitlines()[2:]}
    assert list(rows) == [field.name for field in dataclasses.fields(TrainConfig)]
    # Choices come from the Literal annotations, ranges from training.options.ranges, defaults from the dataclass.
    assert option_choices("strategy") == typing.get_args(typing.get_type_hints(TrainConfig)["strategy"])
    assert "`'auto'`, `'tpu'`, `'multi_worker'`, `'mirrored'`, `'default'`, `'fsdp'` | `'auto'` |" in rows["strategy"]
    assert "`True`, `False`, `'auto'` | `'auto'` |" in rows["jit_compile"]
    assert "an integer >= 1 and <= 512 | `256` |" in rows["num_calibration"]
    assert rows["learning_rate"].startswith("| `learning_rate` | peak learning rate (after warm-up). |")


def test_write_refuses_a_page_without_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# no table here\n")
    with pytest.raises(ValueError, match="has no option table markers"):
        options_table.write(str(page))
    page.write_text(f"before\n{options_table.BEGIN}\nold\n{options_table.END}\nafter\n")
    options_table.write(str(page))
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("after\n")
    assert options_table.documented_table(text) == options_table.options_table()

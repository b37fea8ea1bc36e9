"""The data files a mirror's bucket task writes (relay.spark.tasks): which columns get Parquet's dictionary,
and that a file written so reads back as the table it was written from (pure pyarrow, no Spark)."""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa
import pyarrow.parquet as pq

from relay.spark.layout import BUCKET
from relay.spark.storage import Storage
from relay.spark.tasks import BucketJob, PartSpec, dictionary_columns


def _bucket(rows: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    ids = list(range(rows))
    rng.shuffle(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "status": pa.array([rng.choice(["NEW", "PAID", "SHIPPED", None]) for _ in ids]),
            "amount": pa.array([Decimal(f"{rng.randrange(10**9)}.{rng.randrange(100):02d}") for _ in ids]),
            "_key": pa.array([f'["{i}"]' for i in ids]),
            "_part": pa.array([0] * rows, pa.int64()),
            BUCKET: pa.array(["r0"] * rows),
        }
    )


def test_unique_columns_are_written_plain_and_repeated_ones_with_a_dictionary() -> None:
    table = _bucket(20_000, seed=3)
    assert dictionary_columns(table) == ["status", "_part", BUCKET]
    assert dictionary_columns(table.slice(0, 0)) == list(
        table.column_names
    )  # nothing to judge: pyarrow's way


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_bucket_file_reads_back_as_written(tmp_path: Path, seed: int) -> None:
    table = _bucket(random.Random(seed).randrange(1, 30_000), seed)
    part = PartSpec(table.schema, directory=str(tmp_path), bucket_in_file=True)
    job = BucketJob(Storage(str(tmp_path)), "load", part, part)
    written = job._write(Storage(str(tmp_path)).filesystem(), part, "rows", "r0", table)
    assert len(written) == 1 and written[0].rows == table.num_rows, f"seed {seed}"
    back = pq.read_table(Storage(str(tmp_path)).fs_path(written[0].path))
    assert back.equals(table), f"seed {seed}"
    plain = {
        md.path_in_schema
        for md in (
            pq.ParquetFile(Storage(str(tmp_path)).fs_path(written[0].path)).metadata.row_group(0).column(i)
            for i in range(table.num_columns)
        )
        if not md.has_dictionary_page
    }
    assert {"id", "amount", "_key"} <= plain, f"seed {seed}"

"""Flink SQL's ``canal-json`` format over a topic's record values: the state it materialises, as JSON.

Run by the Python of ``.venv-flink`` (``scripts/bootstrap`` makes it: PyFlink pins its own pyarrow, numpy
and protobuf, so it lives apart from the project's environment), never imported by the test suite:

    .venv-flink/bin/python tests/flink/canal_json_state.py FILE KEY COLUMN[,COLUMN...]

FILE holds one record value per line, in the order a Kafka consumer reads them (each partition in offset
order): what Flink's Kafka source would hand its ``canal-json`` deserializer (which skips a tombstone's
null value; those lines are left out). Every column is read as STRING, as canal writes them. The query's
changelog (+I, -U, +U, -D) is applied by KEY and the resulting rows are printed as one JSON object
{key: {column: value}}. DDL records are skipped (``canal-json.ignore-parse-errors``: Flink's canal-json
reads only row changes, like every Flink user's canal pipeline).
"""

from __future__ import annotations

import json
import sys

from pyflink.common import RowKind
from pyflink.table import EnvironmentSettings, TableEnvironment


def main(path: str, key: str, columns: list[str]) -> None:
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "1")
    fields = ", ".join(f"`{c}` STRING" for c in columns)
    quoted = path.replace("'", "''")
    env.execute_sql(
        f"CREATE TABLE changes ({fields}) WITH ('connector' = 'filesystem', 'path' = '{quoted}', "
        "'format' = 'canal-json', 'canal-json.ignore-parse-errors' = 'true')"
    )
    state: dict[str, dict[str, str | None]] = {}
    at = columns.index(key)
    with env.execute_sql(f"SELECT {', '.join(f'`{c}`' for c in columns)} FROM changes").collect() as rows:
        for row in rows:
            values = {c: row[i] for i, c in enumerate(columns)}
            if row.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER):
                state[str(row[at])] = values
            else:
                state.pop(str(row[at]), None)
    print(json.dumps(state, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3].split(","))

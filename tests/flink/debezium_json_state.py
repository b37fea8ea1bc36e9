"""Flink SQL's ``debezium-json`` format over a topic's record values: the state it materialises, as JSON.

Run by the Python of ``.venv-flink`` (see ``canal_json_state.py`` beside it), never imported by the suite:

    .venv-flink/bin/python tests/flink/debezium_json_state.py FILE KEY SCHEMA_INCLUDE NAME:TYPE[,NAME:TYPE...]

FILE holds one record value per line, in the order a Kafka consumer reads them (each partition in offset
order; tombstones, which Flink's Kafka source hands the format as null and it skips, are left out).
SCHEMA_INCLUDE is ``true`` when the values carry JsonConverter's ``schema`` part
(``debezium-json.schema-include``). Columns are declared with the Flink SQL types given (BYTES for a
``precise`` DECIMAL: Flink's JSON reader decodes the base64 text to bytes). The query's changelog
(+I, -U, +U, -D) is applied by KEY and the resulting rows are printed as one JSON object
{key: {column: value}}, bytes as hex. No parse error is ignored: a record Flink's ``debezium-json`` cannot
read fails the run.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pyflink.common import RowKind
from pyflink.table import EnvironmentSettings, TableEnvironment


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    return value


def main(path: str, key: str, schema_include: str, columns: list[tuple[str, str]]) -> None:
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    env.get_config().set("parallelism.default", "1")
    fields = ", ".join(f"`{name}` {kind}" for name, kind in columns)
    quoted = path.replace("'", "''")
    env.execute_sql(
        f"CREATE TABLE changes ({fields}) WITH ('connector' = 'filesystem', 'path' = '{quoted}', "
        f"'format' = 'debezium-json', 'debezium-json.schema-include' = '{schema_include}')"
    )
    names = [name for name, _ in columns]
    state: dict[str, dict[str, Any]] = {}
    at = names.index(key)
    with env.execute_sql(f"SELECT {', '.join(f'`{c}`' for c in names)} FROM changes").collect() as rows:
        for row in rows:
            values = {c: _plain(row[i]) for i, c in enumerate(names)}
            if row.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER):
                state[str(row[at])] = values
            else:
                state.pop(str(row[at]), None)
    print(json.dumps(state, sort_keys=True))


if __name__ == "__main__":
    declared = [tuple(item.split(":", 1)) for item in sys.argv[4].split(",")]
    main(sys.argv[1], sys.argv[2], sys.argv[3], [(n, k) for n, k in declared])

from collections.abc import Callable
from typing import Any

def data_digests(
    values: list[bytes],
    names: tuple[bytes, ...],
    kinds: bytes,
    converters: tuple[Callable[[str], str] | None, ...],
) -> list[int | None]: ...
def md5_prefix(data: bytes) -> int: ...
def row_records(
    messages: list[Any],
    db: bytes,
    table: bytes,
    source: bytes,
    keyed: dict[bytes, Any],
    others: set[bytes],
    next_offsets: dict[tuple[str, int], int],
) -> tuple[list[Any], int]: ...

from collections.abc import Callable

def data_digests(
    values: list[bytes],
    names: tuple[bytes, ...],
    kinds: bytes,
    converters: tuple[Callable[[str], str] | None, ...],
) -> list[int | None]: ...
def md5_prefix(data: bytes) -> int: ...

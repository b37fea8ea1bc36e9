from collections.abc import Callable

class Reader:
    def __init__(
        self,
        steps: tuple[tuple[int, int, int, int, object, Callable[[bytes, int], tuple[str, int]]], ...],
        ncols: int,
    ) -> None: ...
    def __call__(self, data: bytes, pos: int) -> tuple[tuple[str | None, ...], int]: ...

"""The typed settings loader names the bad key, interpolates the environment, keeps defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from relay.config.settings import build, interpolate
from relay.errors import ConfigError


@dataclass(frozen=True)
class Inner:
    port: int = 3306
    ratio: float = 0.5
    on: bool = False


@dataclass(frozen=True)
class Outer:
    name: str = "x"
    inner: Inner = field(default_factory=Inner)
    tags: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)
    maybe: int | None = None


def test_defaults_and_conversion() -> None:
    got = build(Outer, {"inner": {"port": "3307", "on": "yes"}, "tags": ["a", "b"], "maybe": 3})
    assert got == Outer(inner=Inner(port=3307, on=True), tags=("a", "b"), maybe=3)
    assert build(Outer, None) == Outer()


@pytest.mark.parametrize(
    ("data", "key", "problem"),
    [
        ({"inner": {"prot": 1}}, "inner.prot", "did you mean 'port'"),
        ({"inner": {"port": "abc"}}, "inner.port", "expected an integer"),
        ({"inner": {"on": 3}}, "inner.on", "expected true or false"),
        ({"tags": 5}, "tags", "expected a list"),
        ({"inner": [1]}, "inner", "expected a mapping"),
    ],
)
def test_errors_name_the_key(data: dict[str, object], key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(Outer, data)
    assert info.value.key == key
    assert problem in str(info.value)


def test_interpolation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_SECRET", "s3cr3t")
    monkeypatch.delenv("RELAY_MISSING", raising=False)
    tree = {"a": "${RELAY_SECRET}", "b": ["x${RELAY_MISSING:-dflt}"], "c": 1}
    assert interpolate(tree) == {"a": "s3cr3t", "b": ["xdflt"], "c": 1}
    with pytest.raises(ConfigError, match=r"b\[0\].*RELAY_MISSING"):
        interpolate({"b": ["${RELAY_MISSING}"]})

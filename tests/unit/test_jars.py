"""relay.common.jars: the POM it writes, the stamp that makes resolving idempotent, a missing set."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from relay.common import jars
from relay.errors import JarsError

NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def test_pom_names_every_root_with_its_exclusions() -> None:
    spec = jars.JarSet(
        "x", ("g.a:one:1.0", "g.b:two_2.13:2.0"), "a test", excludes=("org.slf4j:slf4j-reload4j",)
    )
    root = ET.fromstring(jars.pom(spec))
    deps = root.findall("m:dependencies/m:dependency", NS)
    assert [
        (d.findtext("m:groupId", namespaces=NS), d.findtext("m:artifactId", namespaces=NS)) for d in deps
    ] == [
        ("g.a", "one"),
        ("g.b", "two_2.13"),
    ]
    for dep in deps:
        excluded = dep.findall("m:exclusions/m:exclusion", NS)
        assert [e.findtext("m:artifactId", namespaces=NS) for e in excluded] == ["slf4j-reload4j"]


def test_fingerprint_follows_the_pins() -> None:
    one = jars.JarSet("x", ("g:a:1",), "")
    assert one.fingerprint == jars.JarSet("x", ("g:a:1",), "other words").fingerprint
    assert one.fingerprint != jars.JarSet("x", ("g:a:2",), "").fingerprint
    assert one.fingerprint != jars.JarSet("x", ("g:a:1",), "", excludes=("g:b",)).fingerprint


def test_a_set_is_resolved_only_when_its_stamp_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAY_JARS_DIR", str(tmp_path))
    name = next(iter(jars.SETS))
    with pytest.raises(JarsError, match=r"scripts/bootstrap.*resolve " + name):
        jars.require(name)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "a.jar").write_bytes(b"")
    (folder / ".resolved").write_text("an older pin\n")
    assert not jars.is_resolved(name)
    (folder / ".resolved").write_text(jars.SETS[name].fingerprint + "\n")
    assert jars.require(name) == folder
    assert jars.classpath(name) == str(folder / "a.jar")


def test_an_unknown_set_names_the_known_ones() -> None:
    with pytest.raises(JarsError, match=r"known: .*kafka"):
        jars.jar_set("nope")

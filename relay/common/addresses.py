"""What an address list of the config or a flag must look like: ``host:port[,host:port...]``.

Checked where a value is read (the config's checks, ``relay.common.zookeeper.start_client``), so a URL
given where a host list belongs (``http://broker:9092``, ``zk://zk1``) is refused at once, naming the
setting, instead of surfacing as a timeout or a client library's resolver error. Pure functions.
"""

from __future__ import annotations

import re

# a name, an IPv4 address or an [IPv6] address, with an optional port
_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)(?::\d{1,5})?"
_BROKER = (
    rf"(?:(?:PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL)://)?{_HOST}"  # librdkafka takes a listener's protocol
)
_LIST = re.compile(rf"{_BROKER}(?:\s*,\s*{_BROKER})*", re.IGNORECASE)
_CHROOTED = re.compile(rf"{_HOST}(?:,{_HOST})*(?:/[^\s,]*)?")


def hosts_problem(text: object, *, chroot: bool = False, example: str = "10.0.0.5:9092") -> str | None:
    """Why ``text`` is not ``host:port[,host:port...]`` (with ``chroot``: ``[/path]`` after the last),
    or None when it is."""
    if not isinstance(text, str) or not text.strip():
        return f"expected host:port[,host:port...] (e.g. {example}), got {text!r}"
    pattern = _CHROOTED if chroot else _LIST
    if pattern.fullmatch(text.strip()):
        return None
    shape = "host:port[,host:port...][/chroot]" if chroot else "host:port[,host:port...]"
    hint = ""
    if "://" in text:
        hint = (
            " (no URL: plain host:port pairs)"
            if chroot
            else " (no URL: a listener's PLAINTEXT:// or SSL:// at most)"
        )
    return f"{text!r} is not {shape}{hint} (e.g. {example})"

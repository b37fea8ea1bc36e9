"""Redaction: registered secrets and secret-looking values are hidden in text, trees and log lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from relay.cli.main import _JsonFormatter
from relay.common.redact import (
    MASK,
    RedactingFormatter,
    clear_secrets,
    redact,
    redact_value,
    register_secret,
    secrets_in,
)
from relay.config.load import parse_config


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    clear_secrets()
    yield
    clear_secrets()


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("password=hunter22 host=db", "hunter22"),
        ("sasl.password: s3cr3t-pw", "s3cr3t-pw"),
        ('{"password": "q\\"uoted"}', 'q\\"uoted'),
        ("mysql://relay:topsecret@db:3306", "topsecret"),
        ("Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
        ("sasl.jaas.config=org.Login required user=x;", "org.Login"),
        ("ssl.key.password='kp-1'", "kp-1"),
        ("api_key=AKIA123", "AKIA123"),
        ("Authorization: Basic YWRtaW46cHc=", "YWRtaW46cHc="),
        ("zookeeper.auth: bob:pw-1", "bob:pw-1"),
        ("mapping.zookeeper.auth=bob", "bob"),
        ('{"auth": "bob:pw"}', "bob:pw"),
        ("auth: s3cr3t", "s3cr3t"),
    ],
)
def test_secret_looking_values_are_masked(text: str, hidden: str) -> None:
    out = redact(text)
    assert hidden not in out
    assert MASK in out


def test_ordinary_text_and_empty_secrets_are_left_alone() -> None:
    text = "batch 12 (mysql-bin.000003:4567..9876): 5 records; password: null"
    assert redact(text) == text
    register_secret("")
    register_secret("ab")  # too short to mask safely
    assert redact("abc ab") == "abc ab"


def test_the_configs_own_messages_about_a_secret_key_stay_readable() -> None:
    # what `relay cluster status` showed for an instance whose node lacks its secret: "source.password: ***
    # variable RELAY_SHOP06_MYSQL_PASSWORD is not set" — the message masked, not a secret
    for text in (
        "source.password: environment variable RELAY_X is not set (written as ${RELAY_X})",
        "source.password: a secret must be a ${NAME} reference",
        "relay: error: source.password: expected a string, got 5",
        "kafka.settings.sasl.password: must be a ${NAME} reference",
    ):
        assert redact(text) == text
    assert redact("password: must") == f"password: {MASK}"  # a value at the end is still a value
    assert redact("password=an") == f"password={MASK}"
    register_secret("expected")  # a registered secret is masked whatever it looks like
    assert redact("source.password: expected a string") == f"source.password: {MASK} a string"


def test_a_logger_named_like_an_auth_key_keeps_its_message() -> None:
    # "%(name)s: %(message)s" of a logger whose name ends in "auth": its first word was masked
    for text in (
        "2026-12-07 10:00:00 INFO relay.console.auth: login of admin accepted",
        "WARNING kazoo.auth: sent digest",
        "mapping.zookeeper.auth: environment variable RELAY_ZK_AUTH is not set",
    ):
        assert redact(text) == text
    register_secret("hunter")  # a registered secret is masked whatever it looks like
    assert redact("zookeeper.auth: hunter") == f"zookeeper.auth: {MASK}"


def test_registered_secret_is_hidden_anywhere_also_json_escaped() -> None:
    register_secret('pa"ss word!')
    assert 'pa"ss word!' not in redact('connect failed: pa"ss word! rejected')
    line = json.dumps({"message": 'oops pa"ss word!'})
    assert 'pa\\"ss word!' not in redact(line)
    assert json.loads(redact(line))["message"] == f"oops {MASK}"


def test_config_secrets_are_found_and_registered_on_load() -> None:
    config = parse_config(
        {
            "source": {"password": "mysql-pw-1", "standby": {"password": "standby-pw"}},
            "kafka": {"settings": {"sasl.password": "kafka-pw-1", "sasl.username": "relay"}},
            "mapping": {"zookeeper": {"auth": "editor:zk-pw-1"}},
        }
    )
    found = secrets_in(config)
    assert {"mysql-pw-1", "standby-pw", "kafka-pw-1", "editor:zk-pw-1", "zk-pw-1"} <= set(found)
    assert "relay" not in found
    text = redact(f"{config.source} {config.kafka.settings} zk-pw-1")
    for secret in ("mysql-pw-1", "kafka-pw-1", "zk-pw-1"):
        assert secret not in text


def test_trees_mask_secret_keys_and_redact_strings() -> None:
    register_secret("hunter22")
    tree = {"password": "x1y2z3", "nested": [{"error": "login hunter22 failed"}], "n": 3, "token": None}
    assert redact_value(tree) == {
        "password": MASK,
        "nested": [{"error": f"login {MASK} failed"}],
        "n": 3,
        "token": None,
    }


@pytest.mark.parametrize("inner", [logging.Formatter("%(levelname)s %(message)s"), _JsonFormatter()])
def test_log_lines_and_tracebacks_are_redacted(inner: logging.Formatter) -> None:
    register_secret("hunter22")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter(inner))
    logger = logging.getLogger("test_redact")
    logger.addHandler(handler)
    try:
        logger.warning("connecting with %s", "password=hunter22")
        try:
            raise ValueError("auth hunter22 rejected")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert "hunter22" not in out
    assert out.count(MASK) >= 2

"""``relay console`` in a real browser (Debian's chromium driven by Playwright) over a real relay.

One relay (``relay run``) on the session's MariaDB and broker, relaying sharded ``orders`` (canal-json),
``customers`` (canal-protobuf) and a table named ``<script>`` with a column named like markup (debezium-
json); one ``relay console -c`` over it. As a person would: log in; see the fleet, and watch the lag
rise while writes run and fall back to zero when they stop, on the page's own refresh (no reload); edit
the mapping — an invalid edit refused with its message shown, a valid one (a table moved to another
topic) applied and then rolled back, each proven by where the next row lands in Kafka, read by an
independent consumer; browse the topics (latest records, a key's records, compared with an independent
read of the partition); snapshot and verify a table; and the security cases: no session gets the login
page, a viewer cannot apply (the form is not there, and a forged POST is refused), a POST from another
origin is refused, names from the source are shown as text. Every page is photographed into
``test-screenshots/console/`` (two of the shots are docs/console-*.png).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Dialog, Page

from relay.config.load import load_config
from relay.wiring import mapping_store
from tests.integration.console_harness import (
    ConsoleProcess,
    Shots,
    login,
    number,
    other_site,
    screenshots,
    users_file,
    wait_page,
)
from tests.integration.relay_harness import (
    RelayProcess,
    Writer,
    create_shards,
    drop_shards,
    master_position,
    read_to_end,
    read_topic,
    wait_for,
    write_configs,
)

SHARDS, TABLES = 2, 2
XSS_TABLE = "<script>"
XSS_COLUMN = "</td><script>alert(2)</script>"
INSTANCE = "cons"


@dataclass
class Site:
    prefix: str
    config: Path
    relay: RelayProcess
    console: ConsoleProcess
    mysql: Any
    bootstrap: str
    shots: Shots

    @property
    def url(self) -> str:
        return self.console.url

    def mapping_version(self) -> int:
        store = mapping_store(load_config(self.config))
        try:
            return store.read().version
        finally:
            store.close()

    def insert_order(self, ident: int) -> None:
        with contextlib.closing(self.mysql.connect()) as conn, conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {self.prefix}_01.orders_01 VALUES (%s, 'NEW', '1.50', 'console test')", (ident,)
            )


def _mapping(prefix: str) -> dict[str, Any]:
    return {
        "version": 1,
        "topics": {"partitions": 3, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {
                "physical": [f"{prefix}_\\d+"],
                "key_shard": "none",  # ids are unique across the shards
                "codec": "debezium-json",  # the db's topic: the table named <script> lands there
                "tables": {
                    "orders": {
                        "physical": ["orders_\\d+"],
                        "topic": f"{prefix}.orders",
                        "codec": "canal-json",
                    },
                    "customers": {
                        "physical": ["customers"],
                        "topic": f"{prefix}.customers",
                        "codec": "canal-protobuf",
                    },
                },
            }
        },
    }


@pytest.fixture(scope="module")
def site(mysql_service: Any, kafka_service: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("console")
    prefix = f"cons{time.monotonic_ns() % 10**7}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, SHARDS, TABLES)
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE `{prefix}_00`.`{XSS_TABLE}` (id INT PRIMARY KEY, `{XSS_COLUMN}` VARCHAR(40))"
        )
        cur.execute(f"INSERT INTO {prefix}_00.customers VALUES (1, 'Ada'), (2, '<i>Bob</i>')")
    start = master_position(conn)
    config = write_configs(
        tmp,
        mysql=mysql_service,
        bootstrap=kafka_service.bootstrap_servers,
        mapping=_mapping(prefix),
        start=start,
        instance=INSTANCE,
        include=f"{prefix}_\\d+\\..*",
        extra={"status": {"interval_seconds": 0.2}, "logging": {"level": "INFO"}},
    )
    relay = RelayProcess(config, tmp / "relay.log").start()
    RelayProcess.live.remove(
        relay
    )  # this module's tests share it: stopped by this fixture, not after each test
    with conn.cursor() as cur:  # what the pages show: rows of every codec, a DDL, markup in names and values
        for i in range(1, 41):
            cur.execute(f"INSERT INTO {prefix}_00.orders_00 VALUES (%s, 'NEW', '2.00', NULL)", (i,))
        cur.execute(f"UPDATE {prefix}_00.orders_00 SET status = 'PAID' WHERE id <= 5")
        cur.execute(f"INSERT INTO {prefix}_00.customers VALUES (3, '<script>alert(3)</script>')")
        cur.execute(f"INSERT INTO `{prefix}_00`.`{XSS_TABLE}` VALUES (1, '<img src=x onerror=alert(4)>')")
        cur.execute(f"ALTER TABLE `{prefix}_00`.`{XSS_TABLE}` ADD COLUMN `<b>note</b>` INT")
        # a row first: with full row metadata the history learns a table at its first TABLE_MAP
        cur.execute(
            f"INSERT INTO {prefix}_01.orders_00 VALUES (500, 'NEW', '3.00', NULL)"
        )  # ids unique across shards
        cur.execute(f"ALTER TABLE {prefix}_01.orders_00 MODIFY COLUMN note VARCHAR(200)")
    end = master_position(conn)
    wait_for(lambda: _caught_up(relay, end), 90, f"the relay reaching {end}")
    console = ConsoleProcess(
        [
            "-c",
            str(config),
            "--users",
            str(users_file(tmp / "users.yaml")),
            "--state-dir",
            str(tmp / "console"),
            "--sample-seconds",
            "1",
        ],
        tmp / "console.log",
    ).start()
    shots = Shots(screenshots())
    made = Site(prefix, config, relay, console, mysql_service, kafka_service.bootstrap_servers, shots)
    try:
        yield made
    finally:
        code = console.stop()
        relay.stop()
        drop_shards(conn, prefix, SHARDS)
        conn.close()
        assert code == 0, console.text()[-3000:]
        assert "Traceback" not in console.text(), console.text()[-6000:]


def _caught_up(relay: RelayProcess, end: tuple[str, int]) -> bool:
    """The relay's saved position has reached ``end`` (one binlog file here: names compare as text)."""
    if not relay.alive():
        raise AssertionError(f"the relay stopped:\n{relay.log()[-3000:]}")
    try:
        saved = json.loads(relay.position())
    except ValueError:
        return False
    return (str(saved.get("journal")), int(saved.get("offset", 0))) >= end


@pytest.fixture
def operator(new_context: Any, site: Site) -> Page:
    page = _page(new_context())
    login(page, site.url, "admin")
    return page


def _page(context: BrowserContext) -> Page:
    page = context.new_page()
    page.set_viewport_size({"width": 1400, "height": 900})
    dialogs: list[str] = []

    def dialog(d: Dialog) -> None:  # a script of the page itself would open one: never
        dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    page.dialogs = dialogs  # type: ignore[attr-defined]
    # a script error or a blocked resource (the Content-Security-Policy refusing something) is a bug
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on(
        "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
    )
    page.problems = problems  # type: ignore[attr-defined]
    return page


# --- the tests, in the order a person would go --------------------------------------------------------


def test_without_a_session_every_page_is_the_login_page(new_context: Any, site: Site) -> None:
    page = _page(new_context())
    for path in ("/", f"/mappings/{INSTANCE}", "/topics", "/jobs", "/ddl", "/audit"):
        page.goto(site.url + path)
        assert "/login" in page.url and page.is_visible("input[name=password]"), path
    assert page.request.get(site.url + "/api/fleet").status == 401
    page.fill("input[name=user]", "admin")
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    assert page.inner_text("#login-error") == "wrong user name or password"
    site.shots.take(page, "login")


def _cell(page: Page, field: str) -> float:
    return number(page.inner_text(f'tr[data-instance="{INSTANCE}"] td[data-field="{field}"]'))


def _chart_max(page: Page, series: int) -> float:
    """The highest value the chart draws (its script sets data-max when it draws)."""
    found = page.get_attribute(f'svg.chart[data-instance="{INSTANCE}"][data-series="{series}"]', "data-max")
    return float(found) if found else -1.0


def test_the_fleet_shows_lag_rising_under_writes_and_falling_when_they_stop(
    operator: Page, site: Site
) -> None:
    page = operator
    page.goto(site.url + "/")
    row = f'tr[data-instance="{INSTANCE}"]'
    assert page.inner_text(f'{row} td[data-field="state"]') == "running"
    assert page.inner_text(f'{row} td[data-field="kafka_mode"]') == "idempotent"
    assert page.inner_text(f'{row} td[data-field="mapping_version"]') == str(site.mapping_version())
    page.evaluate("window.__notReloaded = true")
    wait_page(page, lambda: _cell(page, "lag_bytes") == 0, 60, "lag 0 before the writes")
    writer = Writer(site.mysql, site.prefix, SHARDS, TABLES, rate=300.0, seed=44)
    writer._next_id = 100_000  # above the rows the fixture wrote
    writer.start()
    try:
        wait_page(
            page, lambda: _cell(page, "lag_bytes") > 0 and _cell(page, "publish_rate") > 0, 60, "lag rising"
        )
        wait_page(page, lambda: _chart_max(page, 2) > 0, 30, "the lag chart rising")
        site.shots.take(page, "fleet-writes")
    finally:
        changes = writer.stop()
    assert changes > 0
    wait_page(
        page, lambda: _cell(page, "lag_bytes") == 0 and _cell(page, "lag_seconds") == 0, 90, "lag back to 0"
    )
    points = int(
        page.get_attribute(f'svg.chart[data-instance="{INSTANCE}"][data-series="2"]', "data-points") or 0
    )
    assert points >= 3 and _chart_max(page, 2) > 0  # the peak stays on the chart
    assert page.evaluate("window.__notReloaded") is True  # refreshed by its script, never reloaded
    site.shots.take(page, "fleet")


def _edit(page: Page, site: Site, change: tuple[str, str]) -> None:
    page.goto(f"{site.url}/mappings/{INSTANCE}")
    text = page.input_value("#mapping-text")
    assert change[0] in text, text
    page.fill("#mapping-text", text.replace(change[0], change[1]))
    page.fill("input[name=note]", "console test")
    page.click("#check")


def _relay_runs(site: Site, version: int) -> None:
    wait_for(
        lambda: site.relay.status().get("mapping_version") == version,
        120,
        f"the relay running version {version}",
    )


def test_a_mapping_edit_refused_then_applied_then_rolled_back(operator: Page, site: Site) -> None:
    page = operator
    before = site.mapping_version()
    topic, moved = f"{site.prefix}.orders", f"{site.prefix}.orders_v2"
    # an invalid edit: refused with its key path and problem, no way to apply it
    _edit(page, site, ("orders_\\d+", "orders_(\\d+"))
    problems = page.inner_text("#problems")
    assert f"logical_dbs.{site.prefix}.tables.orders.physical[0]: bad regex" in problems, problems
    assert not page.is_visible("#apply")
    site.shots.take(page, "mapping-refused")
    # applying it anyway (a POST made by hand, with the page's token) is refused the same way
    invalid = page.input_value("#mapping-text")
    answer = _post(page, site, f"/mappings/{INSTANCE}/apply", {"base": str(before), "text": invalid})
    assert answer.status == 422 and "bad regex" in answer.text() and site.mapping_version() == before
    # a valid edit: orders to another topic — the diff, and what the move implies
    _edit(page, site, (f"topic: {topic}\n", f"topic: {moved}\n"))
    assert page.inner_text("#valid").startswith("Valid; checked against the")
    assert f"topic: {topic} -> {moved}" in page.inner_text("#changes")
    moves = page.inner_text("#moves")
    assert f"{SHARDS * TABLES}: {site.prefix}_00.orders_00" in moves
    assert "replay: the running relay first copies the history" in moves and "per-key order" in moves
    assert f"+        topic: {moved}" in page.inner_text("#diff")
    site.shots.take(page, "mapping-check")
    page.click("#apply")
    assert page.inner_text("#applied").startswith(f"Stored version {before + 1}.")
    assert site.mapping_version() == before + 1
    history = page.inner_text("#history")
    assert "admin (relay console)" in history and "console test" in history
    site.shots.take(page, "mapping")
    # the relay switches to it: the next row goes to the new topic (read back by our own consumer)
    _relay_runs(site, before + 1)
    site.insert_order(900_001)
    read_topic(site.bootstrap, moved, until=lambda rs: any(b'"900001"' in (r.value or b"") for r in rs))
    # roll back to the version before: a new version with its content, the row after it in the old topic
    page.click(f'tr[data-version="{before}"] button.rollback')
    assert f"Roll back {INSTANCE} to version {before}" in page.inner_text("h1")
    assert f"topic: {moved} -> {topic}" in page.inner_text("#changes")
    page.click("#apply")
    assert page.inner_text("#applied").startswith(f"Stored version {before + 2}.")
    assert _content(site, before + 2) == _content(site, before)  # the store the relay reads holds it
    _relay_runs(site, before + 2)
    site.insert_order(900_002)
    read_topic(site.bootstrap, topic, until=lambda rs: any(b'"900002"' in (r.value or b"") for r in rs))
    assert f"rollback to version {before}" in page.inner_text("#history")
    page.goto(site.url + "/audit")
    audit = page.inner_text("#audit")
    assert "mapping apply" in audit and f"stored version {before + 1}" in audit
    assert f"mapping rollback to {before}" in audit
    site.shots.take(page, "changes")


def _post(page: Page, site: Site, path: str, fields: dict[str, str], origin: str | None = None) -> Any:
    """A form POST from this page's session, with its CSRF token (as its own form would send it)."""
    token = page.get_attribute("meta[name=csrf-token]", "content") or ""
    return page.request.post(
        site.url + path,
        form={"csrf": token, **fields},
        headers={"Origin": origin or site.url},
        max_redirects=0,
    )


def _content(site: Site, version: int) -> dict[str, Any]:
    store = mapping_store(load_config(site.config))
    try:
        return {k: v for k, v in store.version(version).to_dict().items() if k != "version"}
    finally:
        store.close()


def test_topics_and_the_record_browser(operator: Page, site: Site) -> None:
    page = operator
    page.goto(f"{site.url}/topics?instance={INSTANCE}")
    topics = page.inner_text("#topics")
    for table, topic, codec in (
        ("orders", f"{site.prefix}.orders", "canal-json"),
        ("customers", f"{site.prefix}.customers", "canal-protobuf"),
        (XSS_TABLE, site.prefix, "debezium-json"),
    ):
        row = page.inner_text(f'#topics tr[data-table="{site.prefix}.{table}"]')
        assert topic in row and codec in row and "p0: " in row and "reaches back" in row, (row, topics)
    site.shots.take(page, "topics")
    # the latest records of each topic, decoded in the route's codec
    for topic, codec in (
        (site.prefix, "debezium-json"),
        (f"{site.prefix}.customers", "canal-protobuf"),
        (f"{site.prefix}.orders", "canal-json"),
    ):
        page.goto(f"{site.url}/topics/browse?instance={INSTANCE}&topic={topic}&mode=latest&limit=10")
        formats = page.locator("#records tr.record > td:nth-child(5)").all_inner_texts()
        assert formats and set(formats) <= {codec, "tombstone"} and codec in formats, (topic, formats)
    site.shots.take(page, "browse")
    # a key's records: every record of that key in its partition, as an independent read finds them
    topic = f"{site.prefix}.orders"
    page.goto(f"{site.url}/topics/browse?instance={INSTANCE}&topic={topic}")
    page.select_option("select[name=mode]", "key")
    page.fill("input[name=value]", "id=3")
    page.click("#browse")
    keys = page.locator("#records tr.record > td:nth-child(4)").all_inner_texts()
    records = [r for r in read_to_end(site.bootstrap, topic) if r.key == b'{"id":"3"}']
    assert keys and set(keys) == {'{"id":"3"}'} and len(keys) == len(records), (keys, len(records))
    offsets = [int(o) for o in page.locator("#records tr.record > td:nth-child(2)").all_inner_texts()]
    assert sorted(offsets) == sorted(r.offset for r in records)
    assert "id=3" in page.inner_text("#records") and "INSERT" in page.inner_text("#records")
    site.shots.take(page, "browse-key")


def test_a_snapshot_and_a_verify_from_the_page(operator: Page, site: Site) -> None:
    page = operator
    page.goto(site.url + "/jobs")
    table = f"{site.prefix}.orders"
    page.fill("#snapshot-form input[name=table]", table)
    page.click("#snapshot")
    started = page.url.split("started=")[1]
    state = f'tr[data-job="{started}"] td[data-field="state"]'
    wait_page(page, lambda: page.inner_text(state) != "running", 120, "the snapshot ending")
    assert page.inner_text(state) == "done", page.inner_text("#jobs")
    assert "16/16 tables" not in page.inner_text(f'tr[data-job="{started}"]')  # this test's 4, not the demo's
    assert f"{SHARDS * TABLES}/{SHARDS * TABLES} tables" in page.inner_text(f'tr[data-job="{started}"]')
    page.fill("#verify-form input[name=table]", table)
    page.click("#verify")
    started = page.url.split("started=")[1]
    state = f'tr[data-job="{started}"] td[data-field="state"]'
    wait_page(page, lambda: page.inner_text(state) != "running", 180, "the verify ending")
    if page.inner_text(state) != "equal":
        page.goto(f"{site.url}/jobs/{started}")
        raise AssertionError(page.inner_text("main"))
    site.shots.take(page, "jobs")
    page.click(f'tr[data-job="{started}"] a')
    report = page.inner_text("#report")
    assert report.startswith("Equal: ") and f"{site.prefix}_01.orders_01" in report
    # a key deleted from the topic behind the relay's back: the report names it, as `relay verify` does
    _forge(site, table, b'{"id":"7"}')
    page.goto(site.url + "/jobs")
    page.fill("#verify-form input[name=table]", table)
    page.click("#verify")
    started = page.url.split("started=")[1]
    state = f'tr[data-job="{started}"] td[data-field="state"]'
    wait_page(page, lambda: page.inner_text(state) != "running", 180, "the second verify ending")
    assert page.inner_text(state) == "differences", page.inner_text("#jobs")
    page.click(f'tr[data-job="{started}"] a')
    differences = page.inner_text("#differences")
    assert differences.count("missing") == 1 and '{"id": "7"}' in differences, differences
    site.shots.take(page, "verify-report")


def _forge(site: Site, topic: str, key: bytes) -> None:
    """Delete ``key`` from the topic behind the relay's back: a tombstone of our own producer, in the key's
    partition (compaction would drop the key's records)."""
    from confluent_kafka import Producer

    last = [r for r in read_to_end(site.bootstrap, topic) if r.key == key][-1]
    producer = Producer({"bootstrap.servers": site.bootstrap})
    producer.produce(topic, None, key, partition=last.partition)
    assert producer.flush(30) == 0


def test_the_ddl_audit_shows_every_ddl_per_logical_table(operator: Page, site: Site) -> None:
    page = operator
    page.goto(f"{site.url}/ddl?instance={INSTANCE}")
    rows = page.locator("#ddl tr").all_inner_texts()
    alter = [r for r in rows if "MODIFY COLUMN note VARCHAR(200)" in r]
    assert (
        len(alter) == 1 and f"{site.prefix}.orders" in alter[0] and f"{site.prefix}_01.orders_00" in alter[0]
    )
    assert "mysql-bin." in alter[0] and "\t2\t" in alter[0]  # the position, schema version 2 of that table
    page.select_option("select[name=table]", f"{site.prefix}.{XSS_TABLE}")
    page.wait_for_url("**table=*")
    rows = page.locator("#ddl tr").all_inner_texts()
    assert len(rows) == 2 and "ADD COLUMN `<b>note</b>` INT" in rows[1], rows
    site.shots.take(page, "ddl")


def test_names_and_values_from_the_source_are_shown_as_text(operator: Page, site: Site) -> None:
    page = operator
    seen = ""
    for path in (
        f"/ddl?instance={INSTANCE}",
        f"/topics?instance={INSTANCE}",
        f"/topics/browse?instance={INSTANCE}&topic={site.prefix}&mode=latest",
        f"/topics/browse?instance={INSTANCE}&topic={site.prefix}.customers&mode=latest",
    ):
        page.goto(site.url + path)
        for detail in page.locator("details").all():
            detail.evaluate("d => { d.open = true }")
        assert page.evaluate("document.scripts.length") == 1, path  # only the console's own script
        assert page.evaluate("document.querySelectorAll('main img, main b, main i').length") == 0, path
        text = page.inner_text("main")
        assert XSS_TABLE in text, (path, text[:2000])
        seen += text
    assert XSS_COLUMN in seen  # a column's name: in the DDL audit and the debezium-json record
    assert "<script>alert(3)</script>" in seen and "<img src=x onerror=alert(4)>" in seen  # values
    assert "<b>note</b>" in seen
    assert page.dialogs == []  # type: ignore[attr-defined]
    site.shots.take(page, "escaped")


def test_no_secret_in_any_page_or_the_log_and_no_script_error(operator: Page, site: Site) -> None:
    page = operator
    secret = site.mysql.replication_password
    assert secret and len(secret) >= 6
    for path in (
        "/",
        "/api/fleet",
        "/mappings",
        f"/mappings/{INSTANCE}",
        f"/topics?instance={INSTANCE}",
        "/jobs",
        "/api/jobs",
        f"/ddl?instance={INSTANCE}",
        "/audit",
    ):
        page.goto(site.url + path)
        assert secret not in page.content(), path
    for job in page.request.get(site.url + "/api/jobs").json():
        page.goto(f"{site.url}/jobs/{job['id']}")
        assert secret not in page.content()
    assert secret not in site.console.text()
    assert page.problems == []  # type: ignore[attr-defined]


def test_a_viewer_reads_but_cannot_apply(new_context: Any, site: Site) -> None:
    page = _page(new_context())
    login(page, site.url, "viewer")
    page.goto(f"{site.url}/mappings/{INSTANCE}")
    assert not page.is_visible("#editor") and page.is_visible("pre#mapping-text")
    assert not page.is_visible("button.rollback")
    before = site.mapping_version()
    text = page.inner_text("pre#mapping-text").replace(f"{site.prefix}.customers", f"{site.prefix}.people")
    site.shots.take(page, "viewer")
    page.goto(site.url + "/jobs")
    assert not page.is_visible("#snapshot-form") and not page.is_visible("#verify-form")
    answer = _post(page, site, f"/mappings/{INSTANCE}/apply", {"base": str(before), "text": text})
    assert answer.status == 403 and "viewer role: changes need operator" in answer.text()
    answer = _post(
        page, site, "/jobs/start/snapshot", {"instance": INSTANCE, "table": f"{site.prefix}.orders"}
    )
    assert answer.status == 403
    assert site.mapping_version() == before


def test_a_post_from_another_site_is_refused(operator: Page, site: Site) -> None:
    page = operator
    before = site.mapping_version()
    page.goto(f"{site.url}/mappings/{INSTANCE}")
    text = page.input_value("#mapping-text").replace(f"{site.prefix}.customers", f"{site.prefix}.stolen")
    token = page.get_attribute("meta[name=csrf-token]", "content") or ""
    # even with the right token (leaked somehow): the origin decides first
    form = (
        f'<form id="f" method="post" action="{site.url}/mappings/{INSTANCE}/apply">'
        f'<input name="csrf" value="{token}"><input name="base" value="{before}">'
        f'<textarea name="text">{text.replace("<", "&lt;")}</textarea></form>'
        '<script>document.getElementById("f").submit()</script>'
    )
    with other_site(form) as evil:
        page.goto(evil)
        page.wait_for_url(f"{site.url}/mappings/{INSTANCE}/apply")
        assert "cross-site request refused" in page.inner_text("body")
    # without the token, from the console's own origin, it is refused as well
    answer = page.request.post(
        f"{site.url}/mappings/{INSTANCE}/apply",
        form={"base": str(before), "text": text},
        headers={"Origin": site.url},
    )
    assert answer.status == 403 and "CSRF token missing or wrong" in answer.text()
    assert site.mapping_version() == before


def test_a_proxys_header_logs_in_only_from_the_proxy(site: Site, tmp_path: Path) -> None:
    """``--auth-header``: the user comes from the header, believed from the trusted proxy only, for users of
    the file only; the role is the file's."""
    import urllib.error
    import urllib.request

    def get(url: str, user: str | None) -> tuple[int, str]:
        headers = {"X-Remote-User": user} if user else {}
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    base = ["-c", str(site.config), "--users", str(users_file(tmp_path / "users.yaml"))]
    base += ["--state-dir", str(tmp_path / "state"), "--auth-header", "X-Remote-User"]
    trusted = ConsoleProcess(base, tmp_path / "trusted.log").start()
    elsewhere = ConsoleProcess([*base, "--trusted-proxy", "10.9.9.9"], tmp_path / "elsewhere.log").start()
    try:
        status, page = get(trusted.url + "/", "viewer")
        assert status == 200 and '<span id="who">viewer</span>' in page and "role-viewer" in page
        assert get(trusted.url + "/", None)[0] == 401
        assert get(trusted.url + "/", "mallory")[0] == 401  # not in the users file
        assert get(trusted.url + "/login", None)[0] == 404  # no password logins then
        assert get(elsewhere.url + "/", "admin")[0] == 401  # a header from outside the proxy: ignored
    finally:
        assert trusted.stop() == 0 and elsewhere.stop() == 0

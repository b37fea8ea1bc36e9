"""``relay console`` (the operator console in the browser) and ``relay console user add|remove|list|hash``.

Owns the parsers, their ``--help`` texts and the user commands' prompts and output; serving is
``relay.console.server``'s, the users file ``relay.console.users``'. The console's web stack is the
``console`` extra (``pip install 'canal-relay[console]'``): without it the command says so in one line.
Runs on the CLI's main thread.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from relay.cli import values
from relay.cli.instance import AUTH_ENV, ZOOKEEPER_ENV
from relay.common.redact import register_secret
from relay.errors import ConsoleError

_USERS_ENV = "RELAY_CONSOLE_USERS"
_DESCRIPTION = (
    "The operator console in the browser: the fleet (nodes, instances, placement, state, position, lag over "
    "the last hours, store fill, mapping version, Kafka mode, last error; drain a node, move an instance), "
    "mappings (history, an editor checked as `relay mapping validate` checks, the diff and what each moved "
    "table implies, apply, rollback), topics (partitions, offsets, retention runway, a record browser), "
    "snapshots and verify runs, and the DDL audit — reading everything through the functions the "
    "commands use. Serves the relays of -c CONFIG (repeatable) or every instance of a cluster "
    "(--zookeeper). Binds 127.0.0.1 by default. Everyone logs in: users and their roles (viewer: reads; "
    "operator: also changes) are in --users FILE with scrypt-hashed passwords (`relay console user add`), "
    "or come from a reverse proxy's authenticated header (--auth-header, trusted only from "
    "--trusted-proxy). Every change needs the operator role and the page's CSRF token, and is recorded "
    "with who and when (STATE_DIR/audit.jsonl, and the mapping's own history). Prints its address, then "
    "serves until SIGTERM/SIGINT (exit 0)."
)


def add_console_parser(subparsers: Any) -> None:
    top = subparsers.add_parser(
        "console",
        help="the operator console in the browser (fleet, mappings, topics, verify)",
        description=_DESCRIPTION,
    )
    which = top.add_argument_group("what it serves (one of)")
    which.add_argument("-c", "--config", action="append", default=[], help="a relay's config (repeatable)")
    which.add_argument(
        "--zookeeper",
        metavar="HOSTS",
        help=f"a cluster's ZooKeeper: every instance defined there (or ${ZOOKEEPER_ENV})",
    )
    which.add_argument(
        "--root", default="/canal-relay", help="the cluster's root node (default /canal-relay)"
    )
    which.add_argument("--zk-auth", metavar="USER:PASSWORD", help=f"a digest identity (default: ${AUTH_ENV})")
    which.add_argument(
        "--zk-timeout", type=values.positive_float, default=10.0, metavar="SECONDS", help="default 10"
    )
    web = top.add_argument_group("where it listens, who gets in")
    web.add_argument(
        "--bind", default="127.0.0.1", metavar="ADDRESS", help="address to listen on (default 127.0.0.1)"
    )
    web.add_argument(
        "--port", type=_port, default=8080, help="port (default 8080; 0: any free port, printed)"
    )
    _users_option(web)
    web.add_argument(
        "--auth-header",
        metavar="NAME",
        help="take the user from this header set by an authenticating reverse proxy (e.g. X-Remote-User) "
        "instead of passwords; the user must be in --users (their role)",
    )
    web.add_argument(
        "--trusted-proxy",
        action="append",
        metavar="ADDRESS",
        help="an address (or network) the --auth-header is believed from (repeatable; default 127.0.0.1 "
        "and ::1)",
    )
    more = top.add_argument_group("state and samples")
    more.add_argument(
        "--state-dir", default="var/console", help="the audit log and past runs (default var/console)"
    )
    more.add_argument(
        "--sample-seconds",
        type=values.positive_float,
        default=5.0,
        help="how often the fleet is sampled (default 5)",
    )
    more.add_argument(
        "--history-hours",
        type=values.positive_float,
        default=6.0,
        help="hours of samples the charts keep (default 6)",
    )
    top.set_defaults(func=cmd_console)
    sub = top.add_subparsers(dest="console_command", metavar="[user]")
    user = sub.add_parser(
        "user",
        help="add, remove or list the console's users; hash a password",
        description="Edits the users file (--users FILE, default $RELAY_CONSOLE_USERS, else "
        "console-users.yaml): each user has a role (viewer or operator) and a scrypt hash of their password. "
        "Passwords are read without echo from the terminal, or from stdin with --password-stdin; never from "
        "the command line. A running console reads the file again when it changes.",
    )
    actions = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add a user or change their role and password")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--role", choices=("viewer", "operator"), required=True)
    add.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    add.add_argument(
        "--no-password", action="store_true", help="no password: the user logs in only through --auth-header"
    )
    _users_option(add)
    add.set_defaults(func=cmd_user_add)
    remove = actions.add_parser("remove", help="remove a user (logged out at their next request)")
    remove.add_argument("name", metavar="NAME")
    _users_option(remove)
    remove.set_defaults(func=cmd_user_remove)
    listing = actions.add_parser("list", help="the users and their roles")
    _users_option(listing)
    listing.set_defaults(func=cmd_user_list)
    hashing = actions.add_parser(
        "hash", help="print the hash of a password (for a users file kept elsewhere)"
    )
    hashing.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin's first line"
    )
    hashing.set_defaults(func=cmd_user_hash)


def _users_option(parser: Any) -> None:
    parser.add_argument(
        "--users",
        default=os.environ.get(_USERS_ENV) or "console-users.yaml",
        metavar="FILE",
        help=f"the users file (default: ${_USERS_ENV}, else console-users.yaml)",
    )


def _port(text: str) -> int:
    port: int = values.count(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"{text}: a port is 0-65535")
    return port


def _web_stack() -> None:
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConsoleError(
            "relay console",
            f"the console's web stack is not installed ({exc.name}): pip install 'canal-relay[console]'",
        ) from None


def cmd_console(args: argparse.Namespace) -> int:
    _web_stack()
    from relay.console.server import ServeOptions, serve

    auth = args.zk_auth or os.environ.get(AUTH_ENV) or None
    if auth:
        register_secret(auth.partition(":")[2])
    zookeeper = args.zookeeper or (None if args.config else os.environ.get(ZOOKEEPER_ENV))
    return int(
        serve(
            ServeOptions(
                configs=list(args.config),
                zookeeper=zookeeper,
                root=args.root,
                zk_auth=auth,
                zk_timeout=args.zk_timeout,
                bind=args.bind,
                port=args.port,
                users=args.users,
                auth_header=args.auth_header,
                trusted_proxies=tuple(args.trusted_proxy or ("127.0.0.1", "::1")),
                state_dir=args.state_dir,
                sample_seconds=args.sample_seconds,
                history_hours=args.history_hours,
                verbose=args.verbose,
            )
        )
    )


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        if not sys.stdin.isatty():
            raise ConsoleError(
                "--password-stdin", "no terminal to ask the password on: pipe it with --password-stdin"
            )
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise ConsoleError("password", "the two passwords differ; nothing written")
    if not password:
        raise ConsoleError("password", "empty; nothing written")
    return password


def cmd_user_add(args: argparse.Namespace) -> int:
    from relay.console.users import User, UsersFile, hash_password, valid_name

    name = valid_name(args.name)
    users_file = UsersFile(args.users)
    users = users_file.load() if users_file.exists() else {}
    hashed = "" if args.no_password else hash_password(_password(args))
    was = users.get(name)
    users[name] = User(name, args.role, hashed)
    users_file.save(users)
    print(f"{'changed' if was else 'added'} {name} ({args.role}) in {args.users}")
    return 0


def cmd_user_remove(args: argparse.Namespace) -> int:
    from relay.console.users import UsersFile

    users_file = UsersFile(args.users)
    users = users_file.load()
    if users.pop(args.name, None) is None:
        raise ConsoleError(
            "NAME", f"{args.name!r} is not in {args.users} (users: {', '.join(sorted(users)) or 'none'})"
        )
    users_file.save(users)
    print(f"removed {args.name} from {args.users}")
    return 0


def cmd_user_list(args: argparse.Namespace) -> int:
    from relay.console.users import UsersFile

    for user in sorted(UsersFile(args.users).load().values(), key=lambda u: u.name):
        login = "password" if user.password else "proxy header only"
        print(f"{user.name:<24} {user.role:<9} {login}")
    return 0


def cmd_user_hash(args: argparse.Namespace) -> int:
    from relay.console.users import hash_password

    print(hash_password(_password(args)))
    return 0

"""``--instance NAME --zookeeper HOSTS``: the options that point a command at a cluster instance.

``relay status``, ``relay snapshot run|status|cancel`` and ``relay schema show|resync`` take either
``-c CONFIG`` (a relay of this host, as before) or ``--instance NAME`` with the cluster's ZooKeeper
(any host: ``relay.cluster.remote``). Owns those options, the check that exactly one of the two is
given, and opening the ``RemoteInstance``. Runs on the CLI's thread.
"""

from __future__ import annotations

import argparse
import os

from relay.cli import values
from relay.cli.instance import AUTH_ENV, ZOOKEEPER_ENV
from relay.cluster.remote import ClusterAddress, RemoteInstance
from relay.common.redact import register_secret
from relay.errors import ConfigError


def add_target_options(parser: argparse.ArgumentParser) -> None:
    """``-c CONFIG`` or ``--instance NAME`` with where the cluster is."""
    which = parser.add_mutually_exclusive_group(required=True)  # the parser refuses neither and both
    which.add_argument("-c", "--config", help="the relay's config file (a relay of this host)")
    which.add_argument(
        "--instance",
        metavar="NAME",
        help="a cluster instance (`relay instance list`), from any host: its node answers through ZooKeeper",
    )
    g = parser.add_argument_group("where the cluster of --instance is")
    g.add_argument(
        "--zookeeper",
        metavar="HOSTS",
        default=os.environ.get(ZOOKEEPER_ENV) or "127.0.0.1:2181",
        help=f"the cluster's ZooKeeper hosts (default: ${ZOOKEEPER_ENV}, else 127.0.0.1:2181)",
    )
    g.add_argument("--root", default="/canal-relay", help="the cluster's root node (default /canal-relay)")
    g.add_argument(
        "--zk-auth", metavar="USER:PASSWORD", help=f"a digest identity to read with (default: ${AUTH_ENV})"
    )
    g.add_argument(
        "--zk-timeout",
        type=values.positive_float,
        default=10.0,
        metavar="SECONDS",
        help="ZooKeeper connect / session timeout (default 10)",
    )


def address(args: argparse.Namespace) -> ClusterAddress:
    auth = args.zk_auth or os.environ.get(AUTH_ENV) or None
    if auth:
        register_secret(auth.partition(":")[2])  # never in an error line
    return ClusterAddress(args.zookeeper, args.root, auth, args.zk_timeout)


def target(args: argparse.Namespace) -> RemoteInstance | None:
    """The cluster instance ``--instance`` names (None: ``-c CONFIG``, a relay of this host)."""
    if bool(args.config) == bool(args.instance):
        raise ConfigError(
            "-c/--instance",
            "give -c CONFIG (a relay of this host) or --instance NAME (a cluster instance), not both"
            if args.config
            else "give -c CONFIG (a relay of this host) or --instance NAME (a cluster instance)",
        )
    if not args.instance:
        return None
    return RemoteInstance(address(args), args.instance)

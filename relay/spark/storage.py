"""Where a mirror's files live: a root (local path or object-store URI) and the settings to reach it.

Owns the translation of one set of storage settings into the three clients the mirror uses: pyarrow's
file systems (Spark tasks write and read data files through them, so nothing needs Hadoop's connector
jars), ``deltalake``'s ``storage_options`` and ``pyiceberg``'s FileIO properties. Settings use the
names of the usual environment variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``; GCS and Azure: the
names their SDKs read); a setting not given is read from the environment, so credentials can stay
there. A ``Storage`` is a small frozen value: it is pickled into Spark tasks, which rebuild the file
system on the executor. Pure: no pyspark; any thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from relay.errors import OptionError

_S3_KEYS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ALLOW_HTTP",
)
_LOCAL = ("", "file")
_REMOTE = ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "hdfs", "viewfs")


def parse_options(items: list[str] | tuple[str, ...], what: str) -> dict[str, str]:
    """``KEY=VALUE`` strings as a dict; a malformed one is an ``OptionError`` naming ``what``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"{what}: expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


@dataclass(frozen=True)
class Storage:
    """A root (``/data/mirror``, ``file:///data/mirror``, ``s3://bucket/prefix``, ``gs://…``,
    ``abfss://…``, ``hdfs://…``) and its settings."""

    root: str
    options: dict[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        scheme = self.scheme
        if scheme not in _LOCAL + _REMOTE:
            raise OptionError(f"mirror location {self.root!r}: unknown scheme {scheme!r}")
        if scheme in _LOCAL:
            local = self.root[len("file://") :] if self.root.startswith("file://") else self.root
            object.__setattr__(self, "root", str(Path(local).absolute()))
        else:
            object.__setattr__(self, "root", self.root.rstrip("/"))

    @property
    def scheme(self) -> str:
        return urlparse(str(self.root)).scheme if "://" in str(self.root) else ""

    @property
    def is_local(self) -> bool:
        return self.scheme in _LOCAL

    def uri(self, *parts: str) -> str:
        """The URI of ``parts`` under the root (a plain absolute path for local storage)."""
        return "/".join([self.root, *(p.strip("/") for p in parts if p)])

    def file_uri(self, *parts: str) -> str:
        """As ``uri`` but ``file://`` for local paths (what pyiceberg's locations look like)."""
        text = self.uri(*parts)
        return f"file://{text}" if self.is_local else text

    def setting(self, key: str) -> str | None:
        value = self.options.get(key)
        return value if value is not None else os.environ.get(key)

    def _s3(self) -> dict[str, str]:
        return {k: v for k in _S3_KEYS if (v := self.setting(k)) is not None}

    def filesystem(self) -> Any:
        """A pyarrow ``FileSystem`` for this storage (built anew: call it inside each task)."""
        from pyarrow import fs

        if self.is_local:
            return fs.LocalFileSystem()
        if self.scheme in ("s3", "s3a"):
            s3 = self._s3()
            endpoint = s3.get("AWS_ENDPOINT_URL")
            kwargs: dict[str, Any] = {"region": s3.get("AWS_REGION", "us-east-1")}
            if endpoint:
                parsed = urlparse(endpoint)
                kwargs["endpoint_override"] = parsed.netloc or endpoint
                kwargs["scheme"] = parsed.scheme or "https"
            if "AWS_ACCESS_KEY_ID" in s3:
                kwargs["access_key"] = s3["AWS_ACCESS_KEY_ID"]
                kwargs["secret_key"] = s3.get("AWS_SECRET_ACCESS_KEY", "")
                if "AWS_SESSION_TOKEN" in s3:
                    kwargs["session_token"] = s3["AWS_SESSION_TOKEN"]
            return fs.S3FileSystem(**kwargs)
        filesystem, _ = fs.FileSystem.from_uri(self.root)
        return filesystem

    def fs_path(self, uri: str) -> str:
        """The path of ``uri`` (under this storage) for the pyarrow file system of ``filesystem()``."""
        if self.is_local:
            return uri[len("file://") :] if uri.startswith("file://") else uri
        parsed = urlparse(uri)
        if self.scheme in ("s3", "s3a", "gs", "gcs"):
            return f"{parsed.netloc}{parsed.path}"
        return parsed.path if self.scheme in ("hdfs", "viewfs") else f"{parsed.netloc}{parsed.path}"

    def delta_uri(self, *parts: str) -> str:
        """The table URI as deltalake wants it (``s3://`` for ``s3a://``)."""
        text = self.uri(*parts)
        return "s3://" + text[len("s3a://") :] if text.startswith("s3a://") else text

    def delta_options(self) -> dict[str, str]:
        """``storage_options`` for deltalake: the given settings, plus the S3 ones from the environment."""
        out = dict(self.options)
        if self.scheme in ("s3", "s3a"):
            out = {**self._s3(), **out}
            out.setdefault("AWS_REGION", "us-east-1")
            # One writer per table (the mirror job): no lock table is needed for S3's missing put-if-absent.
            out.setdefault("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
        return out

    def iceberg_io(self) -> dict[str, str]:
        """pyiceberg FileIO properties for this storage (``s3.endpoint`` …)."""
        if self.scheme not in ("s3", "s3a"):
            return {}
        s3 = self._s3()
        names = {
            "AWS_ACCESS_KEY_ID": "s3.access-key-id",
            "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
            "AWS_SESSION_TOKEN": "s3.session-token",
            "AWS_REGION": "s3.region",
            "AWS_ENDPOINT_URL": "s3.endpoint",
        }
        out = {names[k]: v for k, v in s3.items() if k in names}
        out.setdefault("s3.region", "us-east-1")
        return out

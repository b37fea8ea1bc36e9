"""Java's trust in the machine's CA bundle, for Maven's downloads from Maven Central.

Python, curl and pip trust the machine's bundle (``/etc/ssl/certs/ca-certificates.crt``); a JVM trusts its
own store (``$JAVA_HOME/lib/security/cacerts``), made from that bundle when Java was installed. A CA added to
the bundle later without Java's store being made again (a TLS-inspecting egress proxy's, copied in) leaves
Maven failing every download ("No plugin found for prefix 'dependency'") while pip works. ``java_options``
finds the bundle's certificates Java's store lacks and, only then, gives the ``-D`` options of a copy of
Java's store with them added (made once into the jars folder, again when the bundle changes). Standard
library only; keytool comes with the JDK that runs Maven.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PASSWORD = "changeit"  # Java's default store password: the copy holds public certificates only
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----\s+(.+?)\s+-----END CERTIFICATE-----", re.S)


def certificates(text: str) -> dict[str, str]:
    """The PEM certificates of ``text`` by the SHA-256 of their DER bytes."""
    out = {}
    for body in _PEM.findall(text):
        der = base64.b64decode("".join(body.split()))
        out[hashlib.sha256(der).hexdigest()] = (
            f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n"
        )
    return out


def _keytool() -> tuple[str, Path] | None:
    """(keytool, Java's own store) of the JDK on PATH, or None."""
    keytool = shutil.which("keytool")
    if keytool is None:
        return None
    store = Path(keytool).resolve().parent.parent / "lib" / "security" / "cacerts"
    return (keytool, store) if store.exists() else None


def missing(bundle: Path, keytool: str, store: Path) -> dict[str, str]:
    """The certificates of ``bundle`` that Java's ``store`` does not hold."""
    listed = subprocess.run(
        [keytool, "-list", "-rfc", "-keystore", str(store), "-storepass", PASSWORD],
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        return {}
    have = certificates(listed.stdout)
    return {k: v for k, v in certificates(bundle.read_text(errors="replace")).items() if k not in have}


def java_options(work_dir: Path, bundle: Path | None = None) -> list[str]:
    """``-D`` options for a JVM to trust ``bundle`` (default: ``$SSL_CERT_FILE`` or the system bundle) too;
    empty when Java's own store already holds all of it, or there is no bundle or keytool."""
    bundle = bundle or Path(os.environ.get("SSL_CERT_FILE") or SYSTEM_BUNDLE)
    found = _keytool()
    if found is None or not bundle.is_file():
        return []
    keytool, store = found
    extra = missing(bundle, keytool, store)
    if not extra:
        return []
    copy, stamp = work_dir / "truststore.jks", work_dir / "truststore.stamp"
    fingerprint = hashlib.sha256(" ".join(sorted(extra)).encode()).hexdigest()
    if not (copy.exists() and stamp.exists() and stamp.read_text().strip() == fingerprint):
        work_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(store, copy)
        with tempfile.TemporaryDirectory(prefix="relay-truststore-") as tmp:
            for digest, pem in extra.items():
                cert = Path(tmp) / f"{digest}.pem"
                cert.write_text(pem)
                alias = f"system-{digest[:16]}"
                subprocess.run(
                    [keytool, "-importcert", "-noprompt", "-alias", alias, "-file", str(cert),
                     "-keystore", str(copy), "-storepass", PASSWORD],
                    capture_output=True, check=True,
                )  # fmt: skip
        stamp.write_text(fingerprint + "\n")
    return [f"-Djavax.net.ssl.trustStore={copy}", f"-Djavax.net.ssl.trustStorePassword={PASSWORD}"]

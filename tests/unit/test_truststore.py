"""Maven trusts the machine's CA bundle where Java's own store lacks part of it (relay.common.truststore).

Real keytool over a real copy of Java's store; the extra CA is made here."""

from __future__ import annotations

import datetime
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from relay.common import truststore

pytestmark = pytest.mark.skipif(shutil.which("keytool") is None, reason="no JDK keytool on PATH")


def _ca_pem(name: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _java_store_pems() -> str:
    found = truststore._keytool()
    assert found is not None
    keytool, store = found
    listed = subprocess.run(
        [keytool, "-list", "-rfc", "-keystore", str(store), "-storepass", truststore.PASSWORD],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return "".join(truststore.certificates(listed.stdout).values())


def test_a_bundle_java_already_trusts_needs_no_options(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.crt"
    bundle.write_text(_java_store_pems())
    assert truststore.java_options(tmp_path / "jars", bundle) == []
    assert not (tmp_path / "jars").exists(), "nothing written when nothing is missing"


def test_a_ca_only_the_bundle_holds_is_added_to_a_copy_of_javas_store(tmp_path: Path) -> None:
    extra = _ca_pem("egress inspection CA (test)")
    bundle = tmp_path / "bundle.crt"
    bundle.write_text(_java_store_pems() + extra)
    options = truststore.java_options(tmp_path / "jars", bundle)
    copy = tmp_path / "jars" / "truststore.jks"
    assert options == [f"-Djavax.net.ssl.trustStore={copy}", "-Djavax.net.ssl.trustStorePassword=changeit"]
    found = truststore._keytool()
    assert found is not None
    keytool, store = found
    assert list(truststore.missing(bundle, keytool, copy)) == [], "the copy holds the whole bundle"
    assert len(truststore.missing(bundle, keytool, store)) == 1, "Java's own store is left as it was"
    made = copy.stat().st_mtime_ns
    assert truststore.java_options(tmp_path / "jars", bundle) == options
    assert copy.stat().st_mtime_ns == made, "made once, while the bundle stays the same"

"""Java's trust and key stores (JKS, PKCS12, PEM) turned into PEM files, which Python's ssl (as
kafka-python) and librdkafka read. The stores are made with the JVM's keytool, as users make them."""

from __future__ import annotations

import os
import ssl
import stat
import subprocess
from pathlib import Path

import pytest

from connectors.kafka.clients import keystores
from connectors.kafka.clients.java_client_settings import librdkafka_config
from connectors.kafka.clients.keystores import KeyStore, TrustStore, ca_file, client_pem
from connectors.kafka.kafka_errors import UnsupportedClientSettingError

try:
    KEYTOOL = keystores.keytool()
except UnsupportedClientSettingError:  # pragma: no cover - a machine without a JVM
    KEYTOOL = None
needs_keytool = pytest.mark.skipif(KEYTOOL is None, reason="the JVM's keytool is needed to make JKS stores")


def _keytool(*args: str) -> None:
    subprocess.run([KEYTOOL, *args], check=True, capture_output=True, timeout=120)


def _genkey(store: Path, alias: str, dname: str, store_type: str, store_pass: str, key_pass: str) -> None:
    _keytool("-genkeypair", "-alias", alias, "-keyalg", "EC", "-groupname", "secp256r1", "-dname", dname,
             "-validity", "2", "-keystore", str(store), "-storetype", store_type, "-storepass", store_pass,
             "-keypass", key_pass, "-ext", "bc:c")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    if KEYTOOL is None:
        pytest.skip("no keytool")
    d = tmp_path_factory.mktemp("stores")
    _genkey(d / "ca.jks", "ca", "CN=test-ca", "JKS", "changeit", "changeit")
    _keytool("-exportcert", "-rfc", "-alias", "ca", "-keystore", str(d / "ca.jks"), "-storepass", "changeit",
             "-file", str(d / "ca.pem"))
    for store_type, name in (("JKS", "trust.jks"), ("PKCS12", "trust.p12")):
        _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(d / "ca.pem"), "-keystore", str(d / name),
                 "-storetype", store_type, "-storepass", "changeit")
    # A JKS keystore whose key has a password of its own, as Java allows; a PKCS12 one.
    _genkey(d / "client.jks", "client", "CN=orders-enricher", "JKS", "store-pw", "key-pw")
    _genkey(d / "client.p12", "client", "CN=orders-enricher", "PKCS12", "store-pw", "store-pw")
    return d


def _certificates(pem: bytes) -> list[bytes]:
    return [ssl.PEM_cert_to_DER_cert(block.decode() + "-----END CERTIFICATE-----\n")
            for block in pem.split(b"-----END CERTIFICATE-----") if b"BEGIN CERTIFICATE" in block]


def _assert_private(path: str) -> None:
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700


@needs_keytool
@pytest.mark.parametrize(("name", "store_type"), [("trust.jks", "JKS"), ("trust.p12", "PKCS12"),
                                                  ("trust.p12", "JKS"), ("ca.pem", "PEM")])
def test_a_truststore_becomes_a_pem_ca_file_pythons_ssl_reads(stores, name, store_type):
    path = ca_file(TrustStore(store_type, str(stores / name), "changeit"))
    _assert_private(path)
    context = ssl.create_default_context(cafile=path)
    assert len(context.get_ca_certs()) == 1
    assert _certificates(Path(path).read_bytes()) == _certificates((stores / "ca.pem").read_bytes())


@needs_keytool
@pytest.mark.parametrize(("name", "store_type", "key_password"), [
    ("client.jks", "JKS", "key-pw"), ("client.p12", "PKCS12", None), ("client.p12", "PKCS12", "store-pw")])
def test_a_keystore_becomes_pem_key_and_certificate_files(stores, name, store_type, key_password):
    pem = client_pem(KeyStore(store_type, str(stores / name), "store-pw", key_password))
    for path in (pem.certificate_location, pem.key_location):
        _assert_private(path)
    assert pem.key_password is None  # written unencrypted, in the private directory
    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(pem.certificate_location, pem.key_location)


@needs_keytool
def test_a_wrong_password_is_one_line_naming_the_option(stores):
    with pytest.raises(UnsupportedClientSettingError, match="^option kafka.ssl.truststore.location: keytool") as e:
        ca_file(TrustStore("JKS", str(stores / "trust.jks"), "wrong"))
    assert "\n" not in str(e.value)
    with pytest.raises(UnsupportedClientSettingError, match="^option kafka.ssl.keystore.location: cannot read"):
        client_pem(KeyStore("PKCS12", str(stores / "client.p12"), "wrong"))


def test_a_missing_store_is_one_line_naming_the_option(tmp_path):
    with pytest.raises(UnsupportedClientSettingError, match="^option kafka.ssl.truststore.location: cannot read"):
        ca_file(TrustStore("JKS", str(tmp_path / "nope.jks"), "x"))


@needs_keytool
def test_a_store_is_converted_once_per_file_and_modification_time(stores, tmp_path):
    copy = tmp_path / "trust.jks"
    copy.write_bytes((stores / "trust.jks").read_bytes())
    store = TrustStore("JKS", str(copy), "changeit")
    first = ca_file(store)
    assert ca_file(store) == first
    os.utime(copy, ns=(os.stat(copy).st_atime_ns, os.stat(copy).st_mtime_ns + 10 ** 9))
    assert ca_file(store) != first


def test_pem_stores_given_inline(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    import datetime

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "inline")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    encrypted_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.BestAvailableEncryption(b"kp")).decode()
    settings = librdkafka_config({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                  "ssl.truststore.certificates": cert_pem, "ssl.keystore.type": "PEM",
                                  "ssl.keystore.certificate.chain": cert_pem, "ssl.keystore.key": encrypted_key,
                                  "ssl.key.password": "kp"})
    assert set(settings) == {"security.protocol", "ssl.ca.location", "ssl.certificate.location",
                             "ssl.key.location", "ssl.key.password"}
    assert settings["ssl.key.password"] == "kp"  # the key stays encrypted
    ssl.create_default_context(cafile=settings["ssl.ca.location"])
    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(settings["ssl.certificate.location"],
                                                            settings["ssl.key.location"], password="kp")
    _assert_private(settings["ssl.key.location"])
    # The same PEM in one file (ssl.keystore.location, type PEM).
    both = tmp_path / "client.pem"
    both.write_text(cert_pem + encrypted_key)
    from_file = librdkafka_config({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(both),
                                   "ssl.key.password": "kp"})
    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(from_file["ssl.certificate.location"],
                                                            from_file["ssl.key.location"], password="kp")


@needs_keytool
def test_java_named_tls_settings_end_as_librdkafka_and_kafka_python_settings(stores):
    from connectors.kafka.clients._kafka_python.settings import kafka_python_config

    settings = librdkafka_config({"security.protocol": "SSL", "ssl.truststore.location": str(stores / "trust.jks"),
                                  "ssl.truststore.password": "changeit",
                                  "ssl.keystore.location": str(stores / "client.jks"),
                                  "ssl.keystore.password": "store-pw", "ssl.key.password": "key-pw"})
    assert "ssl.key.password" not in settings and "ssl.keystore.location" not in settings
    mapped = kafka_python_config(settings)
    assert mapped["ssl_cafile"] == settings["ssl.ca.location"] and mapped["ssl_keyfile"] == settings["ssl.key.location"]
    # librdkafka takes them: a producer is created with them (it connects to nothing here).
    from confluent_kafka import Producer

    Producer({**settings, "bootstrap.servers": "127.0.0.1:1"}).flush(0)


def test_without_keytool_a_jks_store_is_refused_saying_what_to_do(monkeypatch, tmp_path):
    store = tmp_path / "trust.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 32)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UnsupportedClientSettingError, match="keytool"):
        ca_file(TrustStore("JKS", str(store), "x"))

"""Java's trust and key stores, turned into the PEM files both of the kit's client libraries read.

A Java client trusts the CAs of ``ssl.truststore.*`` and presents the key and certificate chain of
``ssl.keystore.*``, each a JKS (Java's default), PKCS12 or PEM store. librdkafka reads PEM files
(and PKCS12 keystores, but no JKS), kafka-python PEM files only; so every store becomes PEM files:
JKS is converted to PKCS12 by the JVM's ``keytool`` (the one tool that reads JKS), PKCS12 is read
with ``cryptography``, PEM is copied (inline) or split (a file of key and chain).

The files hold secrets (an unencrypted private key): they are written in a private directory
(0700, files 0600, never world-readable) made once per process and removed at its exit. A store
is converted once per process per (path, modification time), lazily, where the clients are built:
on the driver and on each executor, since a store's path names a file local to each node.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from connectors.kafka.kafka_errors import UnsupportedClientSettingError

log = logging.getLogger(__name__)

JKS = "JKS"
PKCS12 = "PKCS12"
PEM = "PEM"
STORE_TYPES = (JKS, PKCS12, PEM)

_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS
_PEM_BLOCK = re.compile(rb"-----BEGIN (?P<label>[A-Z0-9 ]+)-----.+?-----END (?P=label)-----\s*", re.S)
_KEYTOOL_TIMEOUT_S = 120


@dataclass(frozen=True)
class TrustStore:
    """``ssl.truststore.*``: a file (``location``) or, for PEM, inline ``certificates``."""

    type: str
    location: str | None = None
    password: str | None = None
    certificates: str | None = None


@dataclass(frozen=True)
class KeyStore:
    """``ssl.keystore.*`` and ``ssl.key.password``: a file, or for PEM inline ``certificate_chain``
    and ``key``."""

    type: str
    location: str | None = None
    password: str | None = None
    key_password: str | None = None
    certificate_chain: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class ClientPem:
    """A client's key and certificate chain as PEM files; ``key_password`` when the key file is
    still encrypted (a PEM key given encrypted stays so)."""

    certificate_location: str
    key_location: str
    key_password: str | None = None


class _PrivateFiles:
    """The process's private directory of converted stores, and the cache of conversions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._directory: Path | None = None
        self._cache: dict[tuple, object] = {}

    def directory(self) -> Path:
        if self._directory is None or not self._directory.is_dir():
            # mkdtemp makes the directory 0700, readable by this user only.
            self._directory = Path(tempfile.mkdtemp(prefix="kafka-eos-stores-"))
            atexit.register(shutil.rmtree, str(self._directory), True)
        return self._directory

    def write(self, name: str, content: bytes) -> str:
        path = self.directory() / f"{secrets.token_hex(8)}-{name}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        return str(path)

    def cached(self, key: tuple, make):  # type: ignore[no-untyped-def]
        with self._lock:
            if key not in self._cache:
                self._cache[key] = make()
            return self._cache[key]


_FILES = _PrivateFiles()


def _fail(option: str, reason: str) -> UnsupportedClientSettingError:
    return UnsupportedClientSettingError(f"option kafka.{option}: {reason}")


def _file_key(location: str, option: str) -> tuple[str, int]:
    try:
        return os.path.realpath(location), os.stat(location).st_mtime_ns
    except OSError as exc:
        raise _fail(option, f"cannot read {location}: {exc.strerror}") from None


def ca_file(store: TrustStore) -> str:
    """A PEM file of the store's trusted certificates (librdkafka's ``ssl.ca.location``)."""
    if store.type == PEM and store.certificates:
        return _FILES.cached(("ca-inline", store.certificates),
                             lambda: _FILES.write("ca.pem", _pem_certificates(store.certificates.encode(),
                                                                              "ssl.truststore.certificates")))
    if not store.location:
        raise _fail("ssl.truststore.location", "needed for a truststore of type " + store.type)
    key = ("ca", *_file_key(store.location, "ssl.truststore.location"), store.type, store.password)
    return _FILES.cached(key, lambda: _FILES.write("ca.pem", _trusted_certificates(store)))


def client_pem(store: KeyStore) -> ClientPem:
    """PEM files of the store's private key and certificate chain (librdkafka's
    ``ssl.key.location`` and ``ssl.certificate.location``)."""
    if store.type == PEM and (store.certificate_chain or store.key):
        if not (store.certificate_chain and store.key):
            raise _fail("ssl.keystore.key", "a PEM keystore given inline needs both kafka.ssl.keystore.key "
                                            "and kafka.ssl.keystore.certificate.chain")
        return _FILES.cached(("key-inline", store.certificate_chain, store.key, store.key_password),
                             lambda: _pem_keystore(store.certificate_chain.encode() + b"\n" + store.key.encode(),
                                                   store.key_password, "ssl.keystore.key"))
    if not store.location:
        raise _fail("ssl.keystore.location", "needed for a keystore of type " + store.type)
    key = ("key", *_file_key(store.location, "ssl.keystore.location"), store.type, store.password,
           store.key_password)
    return _FILES.cached(key, lambda: _keystore(store))


# -- conversions ---------------------------------------------------------------------------


def _read(location: str, option: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise _fail(option, f"cannot read {location}: {exc.strerror}") from None


def _kind(data: bytes, declared: str) -> str:
    """What a store file really is: Java's JKS type reads PKCS12 files too (and librdkafka's
    ``ssl.keystore.location`` is PKCS12), so the content decides, not the declared type."""
    if data[:4] in _JKS_MAGIC:
        return JKS
    if b"-----BEGIN " in data[:4096]:
        return PEM
    return PKCS12 if declared != PEM else PEM


def _pem_certificates(data: bytes, option: str) -> bytes:
    blocks = [m.group(0).strip() for m in _PEM_BLOCK.finditer(data) if m["label"] == b"CERTIFICATE"]
    if not blocks:
        raise _fail(option, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return b"\n".join(blocks) + b"\n"


def _pem_keystore(data: bytes, key_password: str | None, option: str) -> ClientPem:
    chain = _pem_certificates(data, option)
    keys = [m.group(0).strip() for m in _PEM_BLOCK.finditer(data) if m["label"].endswith(b"PRIVATE KEY")]
    if len(keys) != 1:
        raise _fail(option, f"a PEM keystore holds one private key, found {len(keys)}")
    encrypted = b"ENCRYPTED" in keys[0] or b"Proc-Type: 4,ENCRYPTED" in keys[0]
    return ClientPem(_FILES.write("certificate.pem", chain), _FILES.write("key.pem", keys[0] + b"\n"),
                     key_password if encrypted else None)


def _pkcs12_bytes(store_location: str, data: bytes, kind: str, password: str | None, option: str
                  ) -> tuple[bytes, str | None]:
    """The store as PKCS12 bytes and their password: JKS through keytool, PKCS12 as it is."""
    if kind != JKS:
        return data, password
    if not password:
        raise _fail(option.replace("location", "password"), f"a JKS store ({store_location}) needs its password")
    return _keytool_to_pkcs12(store_location, password, option), password


def _load_pkcs12(data: bytes, password: str | None, option: str):  # type: ignore[no-untyped-def]
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise _fail(option, f"cannot read the PKCS12 store (wrong password, or not a keystore): {exc}") from None


def _trusted_certificates(store: TrustStore) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    option = "ssl.truststore.location"
    assert store.location is not None
    data = _read(store.location, option)
    kind = _kind(data, store.type)
    if kind == PEM:
        return _pem_certificates(data, option)
    pkcs12_data, password = _pkcs12_bytes(store.location, data, kind, store.password, option)
    loaded = _load_pkcs12(pkcs12_data, password, option)
    certificates = [c.certificate for c in loaded.additional_certs]
    if loaded.cert is not None:
        certificates.insert(0, loaded.cert.certificate)
    if not certificates:
        raise _fail(option, f"{store.location} holds no certificate")
    log.info("truststore %s (%s): %d certificate(s) converted to PEM", store.location, kind, len(certificates))
    return b"".join(c.public_bytes(Encoding.PEM) for c in certificates)


def _keystore(store: KeyStore) -> ClientPem:
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    option = "ssl.keystore.location"
    assert store.location is not None
    data = _read(store.location, option)
    kind = _kind(data, store.type)
    if kind == PEM:
        return _pem_keystore(data, store.key_password, option)
    if kind == JKS and store.key_password and store.password and store.key_password != store.password:
        pkcs12_data = _keytool_to_pkcs12(store.location, store.password, option, key_password=store.key_password)
        password: str | None = store.password
    else:
        pkcs12_data, password = _pkcs12_bytes(store.location, data, kind, store.password, option)
    loaded = _load_pkcs12(pkcs12_data, password, option)
    if loaded.key is None or loaded.cert is None:
        raise _fail(option, f"{store.location} holds no private key with its certificate")
    chain = [loaded.cert.certificate, *(c.certificate for c in loaded.additional_certs)]
    key_pem = loaded.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    log.info("keystore %s (%s): key and %d certificate(s) converted to PEM", store.location, kind, len(chain))
    return ClientPem(_FILES.write("certificate.pem", b"".join(c.public_bytes(Encoding.PEM) for c in chain)),
                     _FILES.write("key.pem", key_pem))


def keytool() -> str:
    """The JVM's keytool: ``$JAVA_HOME/bin/keytool``, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "keytool"), os.X_OK):
        return os.path.join(java_home, "bin", "keytool")
    found = shutil.which("keytool")
    if found is None:
        raise UnsupportedClientSettingError(
            "a JKS store needs the JVM's keytool to be read (set JAVA_HOME or put keytool on PATH), or give the "
            "store as PKCS12 (keytool -importkeystore -deststoretype PKCS12) or PEM files")
    return found


def _run_keytool(arguments: list[str], env: dict[str, str], location: str, option: str
                 ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([keytool(), *arguments], env={**os.environ, **env}, capture_output=True, text=True,
                            timeout=_KEYTOOL_TIMEOUT_S)
    if result.returncode != 0:
        lines = [line for line in (result.stdout + result.stderr).splitlines() if "error" in line.lower()] or \
            (result.stdout + result.stderr).strip().splitlines()
        raise _fail(option, f"keytool could not read the JKS store {location}: "
                            f"{lines[-1] if lines else 'exit status ' + str(result.returncode)}")
    return result


def _key_alias(location: str, env: dict[str, str], option: str) -> str:
    """The alias of the store's private key (keytool converts one key of its own password at a time)."""
    listing = _run_keytool(["-list", "-v", "-keystore", location, "-storetype", JKS,
                            "-storepass:env", "KAFKA_EOS_SRC_PASS"], env, location, option).stdout
    alias = None
    for line in listing.splitlines():
        if line.startswith("Alias name:"):
            alias = line.split(":", 1)[1].strip()
        elif line.startswith("Entry type:") and "PrivateKeyEntry" in line and alias is not None:
            return alias
    raise _fail(option, f"{location} holds no private key")


def _keytool_to_pkcs12(location: str, password: str, option: str, key_password: str | None = None) -> bytes:
    """JKS -> PKCS12 with keytool, in the private directory; the PKCS12 copy is read and removed.
    Passwords go through the environment (keytool's ``:env``), never a command line others can list."""
    target = _FILES.directory() / f"{secrets.token_hex(8)}.p12"
    env = {"KAFKA_EOS_SRC_PASS": password, "KAFKA_EOS_DEST_PASS": password}
    arguments = ["-importkeystore", "-noprompt", "-srckeystore", location, "-srcstoretype", JKS,
                 "-destkeystore", str(target), "-deststoretype", PKCS12,
                 "-srcstorepass:env", "KAFKA_EOS_SRC_PASS", "-deststorepass:env", "KAFKA_EOS_DEST_PASS"]
    if key_password:
        # A key with a password of its own: PKCS12 keeps one password, the store's.
        env["KAFKA_EOS_KEY_PASS"] = key_password
        arguments += ["-srcalias", _key_alias(location, env, option), "-srckeypass:env", "KAFKA_EOS_KEY_PASS",
                      "-destkeypass:env", "KAFKA_EOS_DEST_PASS"]
    try:
        _run_keytool(arguments, env, location, option)
        if not target.exists():
            raise _fail(option, f"keytool wrote no PKCS12 copy of the JKS store {location}")
        return target.read_bytes()
    finally:
        target.unlink(missing_ok=True)

"""A throwaway secured single-node Kafka: SASL_SSL with SCRAM-SHA-512, and ACLs that deny by default.

What a production cluster of least-privilege applications looks like, on loopback ports:

- one client listener, ``SASL_SSL``, SCRAM-SHA-512 only, with a server certificate issued at start
  by a certificate authority made at start (``keytool``, which comes with the Java that Kafka needs
  anyway); clients trust ``ca_file``;
- ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: a principal may do only
  what an ACL allows;
- the SCRAM users ``admin`` (a super user, also the broker's own inter-broker identity) and
  ``app`` (no ACL at all to begin with), created when the storage is formatted
  (``kafka-storage.sh format --add-scram``, KRaft's way to bootstrap SCRAM credentials);
- the controller listener uses SASL_PLAINTEXT with PLAIN and a ``controller`` user of its own
  (KRaft controllers cannot authenticate with SCRAM, whose credentials live in the metadata log
  they serve). No principal is anonymous;
- with ``oauth_listener=True``, a second SASL_SSL listener for OAUTHBEARER
  (``oauth_bootstrap_servers``) with Kafka's unsecured JWT validator: a token's ``sub`` claim is its
  principal, its signature is not checked. For testing OAuth clients only;
- with ``tls_client_listener=True``, an SSL listener that requires a client certificate signed by
  the broker's CA (``tls_bootstrap_servers``); the principal is the certificate's subject,
  ``User:CN=<name>``. ``client_certificate(name)`` issues one as PEM files (the private key is
  written by ``openssl``, since keytool exports no keys).

Passwords are random per broker. ``admin_config`` and ``app_config`` are librdkafka client
settings; ``kafka_testkit.acl_admin`` manages users and ACLs with the former.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Mapping

from connectors.servers.local_broker import LocalBrokerError, LocalKafkaBroker, free_port

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
MECHANISM = "SCRAM-SHA-512"
ADMIN_USER = "admin"
APP_USER = "app"
_CONTROLLER_USER = "controller"
_CERT_VALIDITY_DAYS = "30"


def _jaas(module: str, **options: str) -> str:
    values = " ".join(f'{name}="{value}"' for name, value in options.items())
    return f"{module} required {values};"


class SecuredKafkaBroker(LocalKafkaBroker):
    """One local Kafka node that authenticates every client (SASL_SSL, SCRAM-SHA-512) and authorises
    every request by ACL. Use like ``LocalKafkaBroker``; clients take ``admin_config`` or
    ``app_config``."""

    def __init__(self, kafka_home: str | os.PathLike[str], work_dir: str | os.PathLike[str] | None = None,
                 *, extra_config: Mapping[str, str] | None = None, oauth_listener: bool = False,
                 tls_client_listener: bool = False, **kwargs: object) -> None:
        super().__init__(kafka_home, work_dir, extra_config=extra_config, **kwargs)  # type: ignore[arg-type]
        self.oauth_listener = oauth_listener
        #: The OAUTHBEARER listener's address, with ``oauth_listener=True``.
        self.oauth_bootstrap_servers: str | None = None
        self.tls_client_listener = tls_client_listener
        #: The listener requiring client certificates, with ``tls_client_listener=True``.
        self.tls_bootstrap_servers: str | None = None
        self._tls_dir: Path | None = None
        self.admin_password = secrets.token_urlsafe(16)
        self.app_password = secrets.token_urlsafe(16)
        self._controller_password = secrets.token_urlsafe(16)
        self._store_password = secrets.token_urlsafe(16)
        self.ca_file: Path | None = None
        self._keystore: Path | None = None

    # -- client settings ---------------------------------------------------------------------------

    def user_config(self, user: str, password: str) -> dict[str, str]:
        """librdkafka settings of a SCRAM user of this broker (besides bootstrap.servers)."""
        if self.ca_file is None:
            raise LocalBrokerError("the broker's certificates are made by start()")
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(self.ca_file),
        }

    def client_config(self) -> dict[str, str]:
        return self.admin_config

    @property
    def admin_config(self) -> dict[str, str]:
        return self.user_config(ADMIN_USER, self.admin_password)

    @property
    def app_config(self) -> dict[str, str]:
        return self.user_config(APP_USER, self.app_password)

    # -- LocalKafkaBroker hooks --------------------------------------------------------------------

    def _check_distribution(self) -> None:
        super()._check_distribution()
        if self._keytool() is None:
            raise LocalBrokerError("no keytool (it comes with the Java runtime): neither on PATH nor in JAVA_HOME/bin")
        if self.tls_client_listener and shutil.which("openssl") is None:
            raise LocalBrokerError("tls_client_listener needs openssl on PATH (to write client keys as PEM)")

    def _prepare_security(self, work_dir: Path) -> None:
        # A restart keeps the certificates; a start makes new ones.
        tls = work_dir / "tls"
        shutil.rmtree(tls, ignore_errors=True)
        tls.mkdir(parents=True)
        self._make_certificates(tls)

    def _listener_config(self, broker_port: int, controller_port: int) -> dict[str, str]:
        assert self._keystore is not None and self.ca_file is not None
        scram_login = "org.apache.kafka.common.security.scram.ScramLoginModule"
        plain_login = "org.apache.kafka.common.security.plain.PlainLoginModule"
        listeners = f"SASL_SSL://{_HOST}:{broker_port},CONTROLLER://{_HOST}:{controller_port}"
        protocols = "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
        listener_settings: dict[str, str] = {}
        if self.oauth_listener:
            oauth_port = free_port()
            self.oauth_bootstrap_servers = f"{_HOST}:{oauth_port}"
            listeners += f",OAUTH://{_HOST}:{oauth_port}"
            protocols += ",OAUTH:SASL_SSL"
            listener_settings = {
                "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
                # The broker's side of the login module; with no validator callback configured,
                # Kafka validates tokens with its unsecured validator.
                "listener.name.oauth.oauthbearer.sasl.jaas.config":
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                    f'unsecuredLoginStringClaim_sub="{ADMIN_USER}";',
            }
        if self.tls_client_listener:
            tls_port = free_port()
            self.tls_bootstrap_servers = f"{_HOST}:{tls_port}"
            listeners += f",MTLS://{_HOST}:{tls_port}"
            protocols += ",MTLS:SSL"
            listener_settings["listener.name.mtls.ssl.client.auth"] = "required"
        return {
            "listeners": listeners,
            "advertised.listeners": listeners,
            "listener.security.protocol.map": protocols,
            "inter.broker.listener.name": "SASL_SSL",
            "controller.listener.names": "CONTROLLER",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _jaas(
                scram_login, username=ADMIN_USER, password=self.admin_password),
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": _jaas(
                plain_login, username=_CONTROLLER_USER, password=self._controller_password,
                **{f"user_{_CONTROLLER_USER}": self._controller_password}),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self._keystore),
            "ssl.keystore.password": self._store_password,
            "ssl.key.password": self._store_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN_USER};User:{_CONTROLLER_USER}",
            **listener_settings,
        }

    def _format_arguments(self) -> list[str]:
        return [argument for user, password in ((ADMIN_USER, self.admin_password), (APP_USER, self.app_password))
                for argument in ("--add-scram", f"{MECHANISM}=[name={user},password={password}]")]

    # -- certificates ------------------------------------------------------------------------------

    def _keytool(self) -> str | None:
        java_home = os.environ.get("JAVA_HOME")
        if java_home and (Path(java_home) / "bin" / "keytool").is_file():
            return str(Path(java_home) / "bin" / "keytool")
        return shutil.which("keytool")

    def _make_certificates(self, tls: Path) -> None:
        """A CA, and a server certificate it signs for 127.0.0.1 (and localhost), so that clients
        verify the broker's name as they would in production."""
        store = ("-storetype", "PKCS12", "-storepass", self._store_password, "-keypass", self._store_password)
        ca_store, keystore, ca_pem = tls / "ca.p12", tls / "broker.p12", tls / "ca.pem"
        csr, signed = tls / "broker.csr", tls / "broker.pem"
        keypair = ("-genkeypair", "-keyalg", "RSA", "-keysize", "2048", "-validity", _CERT_VALIDITY_DAYS)
        self._run_keytool(*keypair, "-alias", "ca", "-dname", "CN=kafka-eos test CA", "-ext", "bc:c",
                          "-keystore", str(ca_store), *store)
        self._run_keytool("-exportcert", "-rfc", "-alias", "ca", "-keystore", str(ca_store), "-file", str(ca_pem),
                          *store)
        self._run_keytool(*keypair, "-alias", "broker", "-dname", f"CN={_HOST}", "-keystore", str(keystore), *store)
        self._run_keytool("-certreq", "-alias", "broker", "-keystore", str(keystore), "-file", str(csr), *store)
        self._run_keytool("-gencert", "-rfc", "-alias", "ca", "-keystore", str(ca_store), "-infile", str(csr),
                          "-outfile", str(signed), "-validity", _CERT_VALIDITY_DAYS,
                          "-ext", f"SAN=ip:{_HOST},dns:localhost", "-ext", "EKU=serverAuth,clientAuth", *store)
        self._run_keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem),
                          "-keystore", str(keystore), *store)
        self._run_keytool("-importcert", "-noprompt", "-alias", "broker", "-file", str(signed),
                          "-keystore", str(keystore), *store)
        self.ca_file, self._keystore, self._tls_dir = ca_pem, keystore, tls

    def client_certificate(self, name: str) -> dict[str, str]:
        """A client certificate for ``CN=<name>`` signed by the broker's CA, as PEM files; returns
        the librdkafka settings of the ``tls_bootstrap_servers`` listener (principal
        ``User:CN=<name>``)."""
        if self._tls_dir is None or self.ca_file is None:
            raise LocalBrokerError("the broker's certificates are made by start()")
        tls = self._tls_dir
        store = ("-storetype", "PKCS12", "-storepass", self._store_password, "-keypass", self._store_password)
        client_store, csr, cert = tls / f"{name}.p12", tls / f"{name}.csr", tls / f"{name}.pem"
        key = tls / f"{name}.key"
        self._run_keytool("-genkeypair", "-keyalg", "RSA", "-keysize", "2048", "-validity", _CERT_VALIDITY_DAYS,
                          "-alias", name, "-dname", f"CN={name}", "-keystore", str(client_store), *store)
        self._run_keytool("-certreq", "-alias", name, "-keystore", str(client_store), "-file", str(csr), *store)
        self._run_keytool("-gencert", "-rfc", "-alias", "ca", "-keystore", str(tls / "ca.p12"), "-infile", str(csr),
                          "-outfile", str(cert), "-validity", _CERT_VALIDITY_DAYS, "-ext", "EKU=clientAuth", *store)
        result = subprocess.run(["openssl", "pkcs12", "-in", str(client_store), "-nocerts", "-nodes", "-out", str(key),
                                 "-passin", f"pass:{self._store_password}"], capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=60, check=False)
        if result.returncode != 0:
            raise LocalBrokerError(f"openssl pkcs12 failed: {result.stderr.strip()}")
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.ca_file),
                "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}

    def _run_keytool(self, *arguments: str) -> None:
        keytool = self._keytool()
        assert keytool is not None
        result = subprocess.run([keytool, *arguments], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                timeout=120, check=False)
        if result.returncode != 0:
            raise LocalBrokerError(f"keytool {arguments[0]} failed with exit code {result.returncode}: "
                                   f"{(result.stderr or result.stdout).strip()}")

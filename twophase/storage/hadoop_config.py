"""Which WebHDFS endpoint serves an ``hdfs://`` location, read from Hadoop's own configuration.

An ``hdfs://host:port/path`` names a NameNode's RPC address; the kit reaches the same NameNode over
WebHDFS, its HTTP address. The address is found the way an HDFS client finds it, in order:

1. ``KAFKA_EOS_WEBHDFS_URL`` (``http://namenode:9870``, several separated by ``;`` for HA
   NameNodes): always wins;
2. ``webhdfs://host:port`` and ``swebhdfs://host:port``: the port is the HTTP(S) port itself, as
   for Hadoop's WebHdfsFileSystem;
3. ``core-site.xml`` and ``hdfs-site.xml`` in ``$HADOOP_CONF_DIR`` (else ``$HADOOP_HOME/etc/hadoop``):
   - a nameservice (``hdfs://mycluster/path``, listed in ``dfs.nameservices``): every NameNode of
     ``dfs.ha.namenodes.<ns>``, at ``dfs.namenode.http-address.<ns>.<nn>`` (HdfsCLI tries them in
     turn and moves on from a standby);
   - a NameNode whose ``dfs.namenode.rpc-address[.<ns>[.<nn>]]`` is the URI's ``host:port``: the
     ``dfs.namenode.http-address`` of the same suffix;
   - the default filesystem (``fs.defaultFS``), or a NameNode on the host of
     ``dfs.namenode.http-address``: that address;
   - with ``dfs.http.policy=HTTPS_ONLY`` the ``https-address`` keys and ``https://`` instead;
   a wildcard host (``0.0.0.0``) in an address is replaced by the URI's host;
4. otherwise ``http://<host>:9870`` (Hadoop 3's default NameNode HTTP port; ``https://<host>:9871``
   under HTTPS_ONLY).

Also here: ``fs.defaultFS`` for ``hdfs:///path``, and the authentication the cluster uses
(``hadoop.security.authentication``).
"""

from __future__ import annotations

import logging
import os
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlparse

from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

WEBHDFS_URL_ENV = "KAFKA_EOS_WEBHDFS_URL"
HADOOP_CONF_DIR_ENV = "HADOOP_CONF_DIR"
HADOOP_HOME_ENV = "HADOOP_HOME"
CONFIG_FILES = ("core-site.xml", "hdfs-site.xml")
DEFAULT_HTTP_PORT = 9870
DEFAULT_HTTPS_PORT = 9871
DEFAULT_RPC_PORT = 8020
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class HadoopConfig:
    """The properties of the client's Hadoop configuration files (later files win, as in Hadoop)."""

    properties: dict[str, str] = field(default_factory=dict)
    #: The files read, for messages.
    files: tuple[str, ...] = ()

    def get(self, name: str, default: str | None = None) -> str | None:
        value = self.properties.get(name, "").strip()
        return value or default

    def names(self, name: str) -> list[str]:
        """A comma-separated list property (``dfs.nameservices``, ``dfs.ha.namenodes.<ns>``)."""
        return [part.strip() for part in (self.get(name) or "").split(",") if part.strip()]

    def describe(self) -> str:
        return ", ".join(self.files) if self.files else f"no Hadoop configuration (${HADOOP_CONF_DIR_ENV} unset)"


def hadoop_conf_dir() -> Path | None:
    """``$HADOOP_CONF_DIR``, else ``$HADOOP_HOME/etc/hadoop`` (Hadoop's own default), if set."""
    explicit = os.environ.get(HADOOP_CONF_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit)
    home = os.environ.get(HADOOP_HOME_ENV, "").strip()
    return Path(home) / "etc" / "hadoop" if home else None


def load_hadoop_config(conf_dir: Path | None = None) -> HadoopConfig:
    """core-site.xml and hdfs-site.xml of ``conf_dir`` (default: :func:`hadoop_conf_dir`); missing
    files are skipped."""
    folder = conf_dir if conf_dir is not None else hadoop_conf_dir()
    properties: dict[str, str] = {}
    files: list[str] = []
    for name in CONFIG_FILES if folder is not None else ():
        path = folder / name
        try:
            stat = path.stat()
        except OSError:
            continue
        properties.update(_read_properties(str(path), stat.st_mtime_ns))
        files.append(str(path))
    return HadoopConfig(properties, tuple(files))


@lru_cache(maxsize=32)
def _read_properties(path: str, mtime_ns: int) -> dict[str, str]:
    """One Hadoop configuration file's ``<property><name/><value/></property>`` pairs (cached per
    version of the file: every batch opens the state again)."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as exc:
        raise InvalidValueError(f"Hadoop configuration file {path} could not be read: {exc}") from exc
    properties = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name is not None and value is not None:
            properties[name.strip()] = value.strip()
    return properties


def default_filesystem_authority(config: HadoopConfig) -> str | None:
    """The namenode of ``fs.defaultFS`` when it is an ``hdfs://`` URI (what ``hdfs:///path`` means)."""
    parsed = urlparse(config.get("fs.defaultFS") or "")
    return parsed.netloc if parsed.scheme.lower() == "hdfs" and parsed.netloc else None


def uses_kerberos(config: HadoopConfig) -> bool:
    return (config.get("hadoop.security.authentication") or "simple").lower() == "kerberos"


def _split(authority: str, default_port: int | None) -> tuple[str, int | None]:
    parsed = urlparse(f"//{authority}")
    try:
        port = parsed.port
    except ValueError as exc:
        raise InvalidValueError(f"HDFS address {authority!r} has no valid port: {exc}") from None
    return parsed.hostname or "", port if port is not None else default_port


def _url(scheme: str, address: str, uri_host: str) -> str:
    """``scheme://address``, the address's wildcard host replaced by the host the URI names."""
    host, port = _split(address, None)
    if host in _WILDCARD_HOSTS:
        host = uri_host
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "")


def _check_override(value: str) -> tuple[str, ...]:
    urls = tuple(part.strip().rstrip("/") for part in value.split(";") if part.strip())
    for url in urls:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path:
            raise InvalidValueError(
                f"{WEBHDFS_URL_ENV}={value!r}: give the NameNode's WebHDFS address as http://host:port or "
                "https://host:port, several separated by ';' for HA NameNodes (no path)")
    if not urls:
        raise InvalidValueError(f"{WEBHDFS_URL_ENV}={value!r} names no WebHDFS address; valid: http://host:port")
    return urls


def webhdfs_urls(scheme: str, authority: str, config: HadoopConfig | None = None) -> tuple[str, ...]:
    """The WebHDFS base URLs (``http://host:port``) of an ``hdfs://``, ``webhdfs://`` or
    ``swebhdfs://`` authority, in the order of the module docstring."""
    override = os.environ.get(WEBHDFS_URL_ENV, "").strip()
    if override:
        return _check_override(override)
    config = config if config is not None else load_hadoop_config()
    secure = scheme == "swebhdfs" or (
        scheme == "hdfs" and (config.get("dfs.http.policy") or "HTTP_ONLY").upper() == "HTTPS_ONLY")
    protocol = "https" if secure else "http"
    http_key = "dfs.namenode.https-address" if secure else "dfs.namenode.http-address"
    default_http_port = DEFAULT_HTTPS_PORT if secure else DEFAULT_HTTP_PORT
    host, port = _split(authority, None)
    if scheme in ("webhdfs", "swebhdfs") and port is not None:
        return (_url(protocol, authority, host),)

    if port is None and host in config.names("dfs.nameservices"):
        namenodes = config.names(f"dfs.ha.namenodes.{host}")
        keys = [f"{http_key}.{host}.{nn}" for nn in namenodes] or [f"{http_key}.{host}"]
        addresses = [config.get(key) for key in keys]
        if not all(addresses):
            missing = [key for key, address in zip(keys, addresses) if not address]
            raise InvalidValueError(
                f"HDFS nameservice {host!r}: {config.describe()} has no {', '.join(missing)}; add it, or set "
                f"{WEBHDFS_URL_ENV}=http://namenode:port")
        return tuple(_url(protocol, address, host) for address in addresses if address)

    if scheme == "hdfs":
        wanted = (host, port if port is not None else DEFAULT_RPC_PORT)
        rpc_key = "dfs.namenode.rpc-address"
        for name, value in sorted(config.properties.items()):
            if (name == rpc_key or name.startswith(rpc_key + ".")) and _split(value, DEFAULT_RPC_PORT) == wanted:
                address = config.get(http_key + name[len(rpc_key):])
                if address:
                    return (_url(protocol, address, host),)

    address = config.get(http_key)
    if address is not None:
        default_authority = default_filesystem_authority(config)
        names_default = default_authority is not None and (
            _split(default_authority, DEFAULT_RPC_PORT) == _split(authority, DEFAULT_RPC_PORT))
        if names_default or _split(address, None)[0] == host:
            return (_url(protocol, address, host),)
    return (f"{protocol}://{f'[{host}]' if ':' in host else host}:{default_http_port}",)

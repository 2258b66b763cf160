"""Kafka client settings of the command-line tools: ``--command-config FILE`` and
``--client-config KEY=VALUE``, and how they are shown without their secrets.

``--command-config`` takes the client properties file Kafka's own tools take
(``kafka-console-producer.sh --command-config``), read as ``java.util.Properties`` reads it, by
the ``javaproperties`` package: ``key=value``, ``key: value`` or ``key value`` lines, ``#`` and
``!`` comments, backslash line continuations (a ``sasl.jaas.config`` often spans lines) and
escapes (``\\=``, ``\\:``, ``\\uXXXX``). ``--client-config`` entries override the file's.

The settings may use Java's names (``sasl.jaas.config``, ``ssl.truststore.location``) or
librdkafka's (``sasl.username``, ``ssl.ca.location``): they go as they are to
:func:`connectors.kafka.clients.factory.clients_for`, and to the job that ``replay`` runs (the
Spark job's ``--kafka-options-file``), whose clients understand both.

Values of settings whose name says they are secret (:data:`SECRET_MARKERS`) never appear in
reports, logs or on the console: :func:`masked` and :func:`masked_argv` replace them.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from connectors.tools.tool_errors import ClientSettingsError

log = logging.getLogger(__name__)

#: A setting whose name contains one of these (case-insensitive) has a secret value.
SECRET_MARKERS = ("password", "secret", "jaas", "key.pem", "keystore.key")
MASK = "****"
#: How a job takes one setting on its command line (the Spark job's; replay passes them in a
#: file instead, ``--kafka-options-file``, so that secrets stay out of ``ps``).
KAFKA_OPTION_FLAG = "--kafka-option"
#: Given by --bootstrap: a file's bootstrap.servers is left out, as Kafka's tools let
#: --bootstrap-server win.
_BOOTSTRAP_KEY = "bootstrap.servers"


def is_secret(key: str) -> bool:
    name = key.lower()
    return any(marker in name for marker in SECRET_MARKERS)


def masked(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with every secret value replaced by ``****``."""
    return {key: MASK if is_secret(key) else value for key, value in settings.items()}


def masked_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the values of secret ``KEY=VALUE`` arguments (``--kafka-option
    sasl.password=...``, ``--kafka-option=...``, ``--option kafka.sasl.jaas.config=...``) masked."""
    shown = []
    for word in argv:
        flag, eq, setting = word.partition("=") if word.startswith("--") else ("", "", word)
        target = setting if (not flag or eq) else ""
        key, sep, _value = target.partition("=")
        if sep and is_secret(key):
            target = f"{key}={MASK}"
            word = f"{flag}={target}" if flag else target
        shown.append(word)
    return shown


def parse_setting(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (the value may be empty and may contain ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        shown = "a secret's setting" if is_secret(text) else repr(text)  # sasl.password:... is not echoed
        raise ClientSettingsError(f"{shown} is not KEY=VALUE, e.g. security.protocol=SASL_SSL or "
                                  "sasl.mechanism=SCRAM-SHA-512")
    return key.strip(), value


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java client properties file as a dict, as ``java.util.Properties.load`` reads it
    (UTF-8, or ISO-8859-1 where it is not UTF-8, as Java reads such a file)."""
    import javaproperties

    file = Path(path)
    if not file.exists():
        raise ClientSettingsError(f"{path}: no such file; give a Java client properties file (key=value lines, "
                                  "e.g. security.protocol=SASL_SSL)")
    if not file.is_file():
        raise ClientSettingsError(f"{path}: not a file; give a Java client properties file (key=value lines)")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ClientSettingsError(f"{path}: cannot be read ({exc.strerror or exc}); give a readable Java client "
                                  "properties file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    try:
        settings = javaproperties.loads(text)
    except ValueError:  # a malformed \\u escape; its text, which may be a secret's, is not shown
        raise ClientSettingsError(f"{path}: not a Java properties file: a \\u escape must be followed by four hex "
                                  "digits (write a backslash as \\\\)") from None
    return {key.strip(): value for key, value in settings.items() if key.strip()}


@dataclass(frozen=True)
class ClientSettings:
    """The settings of one command: its properties file's, then its ``--client-config`` entries."""

    values: dict[str, str]
    #: Where they came from, for messages: "--command-config FILE", "--client-config".
    sources: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.values)

    @property
    def shown(self) -> dict[str, str]:
        return masked(self.values)


def merge(command_config: Mapping[str, str] | None, client_config: Sequence[tuple[str, str]],
          file_name: str | None = None) -> ClientSettings:
    """The file's settings overridden by the ``--client-config`` entries (the last of a repeated
    key wins); ``bootstrap.servers`` is left out (``--bootstrap`` names the brokers)."""
    values = dict(command_config or {})
    values.update(client_config)
    if values.pop(_BOOTSTRAP_KEY, None) is not None:
        log.info("%s of the client settings is ignored: --bootstrap names the brokers", _BOOTSTRAP_KEY)
    sources = ((f"--command-config {file_name}",) if command_config is not None else ()) + \
        (("--client-config",) if client_config else ())
    return ClientSettings(values, sources)


# -- argparse ------------------------------------------------------------------------------------

def client_setting_type(text: str) -> tuple[str, str]:
    try:
        return parse_setting(text)
    except ClientSettingsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass(frozen=True)
class PropertiesFile:
    path: str
    settings: dict[str, str]


def command_config_type(text: str) -> PropertiesFile:
    try:
        return PropertiesFile(text, read_properties(text))
    except ClientSettingsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """``--command-config FILE`` and ``--client-config KEY=VALUE`` (repeatable)."""
    parser.add_argument("--command-config", type=command_config_type, default=None, metavar="FILE",
                        help="a Java client properties file, as Kafka's tools take it (security.protocol, "
                             "sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ... or librdkafka's "
                             "names)")
    parser.add_argument("--client-config", type=client_setting_type, action="append", default=[],
                        metavar="KEY=VALUE",
                        help="a client setting (Java's or librdkafka's name), overriding --command-config's; "
                             "may repeat")


def from_args(args: argparse.Namespace) -> ClientSettings:
    file: PropertiesFile | None = getattr(args, "command_config", None)
    return merge(file.settings if file else None, getattr(args, "client_config", []) or [],
                 file.path if file else None)

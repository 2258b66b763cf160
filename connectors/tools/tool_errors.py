"""Errors of the ``kafka-eos`` command-line tools: each is an expected problem with the user's
input or environment, which the CLI prints as one message with exit status 2. Choosing or starting a
broker fails with the servers' errors (``connectors/servers/server_errors.py``)."""

from __future__ import annotations

from twophase.errors import KafkaEosError


class UsageError(KafkaEosError):
    """An expected problem with the user's input or environment: message, exit status 2."""


class JobTemplateError(KafkaEosError, ValueError):
    """A job command template that cannot be used."""


class IdSpecError(KafkaEosError, ValueError):
    """An ``--id-field`` value that is not ``key``, ``json:<field>`` or ``header:<name>``."""


class IdFieldError(KafkaEosError, ValueError):
    """The input's records carry no id where the id spec says (so nothing can be matched)."""


class TopicNotFoundError(KafkaEosError, ValueError):
    """A topic to verify does not exist."""


class ClientSettingsError(UsageError, ValueError):
    """A ``--client-config`` setting or a ``--command-config`` file that cannot be used; the message
    is one line and never shows a secret value."""

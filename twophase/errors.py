"""Errors the protocol core knows about, whatever the external system."""

from __future__ import annotations


class UnrecoverableCommitError(Exception):
    """A commit that no retry can make succeed (the transaction is gone). The coordinator does
    not retry notifications that fail with it; it surfaces at once."""

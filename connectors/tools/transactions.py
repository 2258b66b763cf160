"""``kafka-eos transactions``: what a sink costs the broker, by transactional id prefix.

Every transactional id a sink ever used stays in the transaction coordinators' memory and in
``__transaction_state`` until ``transactional.id.expiration.ms`` (7 days by default), whatever its
state; open ones also hold back the last stable offset of the partitions they wrote to. This lists
both, so an operator can see that a long-running query's footprint stays bounded (the sink's id
pool: two ids per write task) and spot a transaction that stalls read_committed consumers.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from connectors.kafka.clients import KafkaClients, OpenTransaction, TransactionListing


@dataclass(frozen=True)
class SinkFootprint:
    prefix: str
    listings: list[TransactionListing]
    open_transactions: list[OpenTransaction]
    listed_at_ms: int

    @property
    def states(self) -> dict[str, int]:
        return dict(sorted(Counter(listing.state for listing in self.listings).items()))

    def summary_lines(self) -> list[str]:
        states = ", ".join(f"{count} {state}" for state, count in self.states.items()) or "none"
        lines = [f"{len(self.listings)} transactional ids with prefix {self.prefix!r} ({states}); "
                 f"{len(self.open_transactions)} open"]
        for txn in self.open_transactions:
            age_s = (self.listed_at_ms - txn.start_time_ms) / 1000
            partitions = ", ".join(str(tp) for tp in sorted(txn.partitions)) or "no partitions yet"
            lines.append(f"open: {txn.transactional_id} (producer id {txn.producer_id}, epoch "
                         f"{txn.producer_epoch}, open {age_s:.1f} s of its {txn.timeout_ms / 1000:.0f} s "
                         f"timeout; {partitions})")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "transactional_ids": len(self.listings),
            "states": self.states,
            "listings": [listing.__dict__ for listing in self.listings],
            "open": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                      "producer_epoch": t.producer_epoch, "state": t.state, "start_time_ms": t.start_time_ms,
                      "timeout_ms": t.timeout_ms, "partitions": sorted(str(tp) for tp in t.partitions)}
                     for t in self.open_transactions],
        }


def sink_footprint(clients: KafkaClients, prefix: str) -> SinkFootprint:
    """Every transactional id starting with ``prefix`` (any state) and the open transactions among
    them. Pass ``<eos.transactionalIdPrefix>-`` for exactly one sink's ids."""
    control = clients.txn_control()
    try:
        listings = control.list_transactions(prefix)
        open_transactions = control.list_open_transactions(prefix)
    finally:
        control.close()
    return SinkFootprint(prefix, listings, open_transactions, int(time.time() * 1000))

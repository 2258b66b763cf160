"""``kafka-eos status --plot``: the retained history of a query as one PNG.

Three panels, like the commit-latency plot of ``kafka-eos replay``'s report: the commit time of
each retained checkpoint split into its parts; the records (and transactions) of each; and how
old each checkpoint's oldest transaction was when its commit was confirmed, followed by the
oldest transaction open now, against half the timeout (the alert threshold) and the timeout
(where the broker aborts it).
"""

from __future__ import annotations

from pathlib import Path

from connectors.monitoring.status import QueryStatus
from twophase.checkpoint_statistics import CheckpointOutcome

_PARTS = (("prepare", "prepare_ms"), ("store", "store_ms"), ("EndTxn", "commit_ms"), ("mark", "mark_ms"),
          ("lingering sweep", "sweep_ms"))


def plot_status(status: QueryStatus, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display: status runs on servers and in containers
    import matplotlib.pyplot as plt

    history = status.history
    labels = [str(s.checkpoint_id) + (" (recovered)" if s.outcome is CheckpointOutcome.RECOVERED else
                                      " (LOST)" if s.outcome is CheckpointOutcome.LOST else "")
              for s in history]
    x = list(range(len(history)))
    fig, (commit_ax, records_ax, txn_ax) = plt.subplots(3, 1, figsize=(10, 10))
    fig.suptitle(f"kafka-eos status: query {status.query_id}", fontsize=11)

    bottom = [0.0] * len(history)
    for name, attribute in _PARTS:
        heights = [getattr(s.timings, attribute) if s.timings else 0.0 for s in history]
        commit_ax.bar(x, heights, bottom=bottom, label=name)
        bottom = [b + h for b, h in zip(bottom, heights)]
    commit_ax.set_ylabel("commit time (ms)")
    commit_ax.set_title("commit time per checkpoint, by part")
    commit_ax.set_xticks(x, labels, fontsize=8)
    commit_ax.margins(y=0.25)  # room for the legend above the tallest bar
    commit_ax.legend(fontsize=8, ncols=5, loc="upper left")
    if not history:
        commit_ax.text(0.5, 0.5, "no statistics retained", ha="center", va="center", transform=commit_ax.transAxes)

    records_ax.bar(x, [s.records for s in history], color="tab:green")
    for i, s in enumerate(history):
        records_ax.annotate(f"{s.transactions} txn", (i, s.records), ha="center", va="bottom", fontsize=8)
    records_ax.set_ylabel("records")
    records_ax.set_title("records per checkpoint (transactions above each bar)")
    records_ax.set_xticks(x, labels, fontsize=8)
    records_ax.set_xlabel("checkpoint (= Spark batch id)")

    # Transaction age: of each retained checkpoint's oldest transaction when its commit was
    # confirmed, then of the oldest transaction open now; against the alert line and the timeout.
    txns = status.open_transactions
    ages = [(s.oldest_transaction_age_ms or 0) / 1000 for s in history]
    age_labels = list(labels)
    colors = ["tab:purple"] * len(history)
    if txns:
        oldest = max(txns, key=lambda t: t.age_ms)
        ages.append(oldest.age_ms / 1000)
        age_labels.append(f"open now ({len(txns)})")
        colors.append("tab:red")
    txn_ax.bar(range(len(ages)), ages, color=colors)
    txn_ax.set_xticks(range(len(ages)), age_labels, fontsize=8)
    txn_ax.set_ylabel("age (s)")
    timeout_s = (max((t.timeout_ms for t in txns), default=0) or status.transaction_timeout_ms) / 1000
    txn_ax.set_title(f"oldest transaction's age at commit, and now ({len(txns)} open); "
                     f"alert at {timeout_s / 2:.0f} s, broker aborts at {timeout_s:.0f} s")
    if max(ages, default=0) >= timeout_s / 10:  # the lines would flatten the bars otherwise
        txn_ax.axhline(timeout_s / 2, color="tab:red", linestyle="--", label="half the timeout (alert)")
        txn_ax.axhline(timeout_s, color="black", label="timeout")
        txn_ax.legend(fontsize=8, loc="upper left")
    if status.pending is not None:
        txn_ax.text(0.99, 0.95, f"pending checkpoint {status.pending.id}, stored {status.pending.age_ms / 1000:.1f} s ago",
                    transform=txn_ax.transAxes, ha="right", va="top", color="tab:red", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

"""The replay report: one row per scenario, as Markdown, JSON and a PNG plot.

The plot shows, per scenario, each checkpoint's commit latency (trigger to every transaction
committed) over time, with each fault as a red line and the recovery gap after it (fault to the
first checkpoint committed afterwards) as a shaded band: people would rather look than read.

A run on the kit's embedded test cluster is labelled with the simulated-Kafka notice first and
last in the Markdown and JSON reports, in every verdict of the table, and in the plot's title.
The titles name the command that ran the scenarios (``kafka-eos demo`` or ``kafka-eos replay``).
"""

from __future__ import annotations

import json
import logging
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from connectors.servers.broker_discovery import REAL_BROKER_HELP, SIMULATED_NOTICE
from connectors.tools.replay import PASSED, SKIPPED, ReplayResult, ScenarioResult

log = logging.getLogger(__name__)

COLUMNS = ("Scenario", "Injected fault", "Restarts", "Records in", "Records out", "Duplicates",
           "Losses", "Aborted reads", "Recovery time", "Verdict")


@dataclass(frozen=True)
class ReportFiles:
    markdown: Path
    json: Path
    plot: Path | None


def _recovery_text(scenario: ScenarioResult, writes_metrics: bool) -> str:
    gaps = scenario.recovery_ms
    if scenario.recoveries and not scenario.checkpoints:
        return "n/a (no checkpoint committed)" if writes_metrics else "n/a (job wrote no metrics)"
    if not gaps:
        missing = sum(1 for _, _, done in scenario.recoveries if done is None)
        return f"none after {missing} fault(s)" if missing else "—"
    if len(gaps) == 1:
        return f"{gaps[0] / 1000:.1f} s"
    return f"max {max(gaps) / 1000:.1f} s ({len(gaps)} faults)"


def table_rows(result: ReplayResult) -> list[tuple[str, ...]]:
    """The report's table, one tuple of cell texts per scenario (columns: :data:`COLUMNS`)."""
    rows = []
    label = " (simulated Kafka)" if result.simulated else ""
    for s in result.scenarios:
        report = s.verify
        if s.status == SKIPPED or report is None:
            rows.append((s.name, s.fault, "—", "—", "—", "—", "—", "—", "—", s.verdict))
            continue
        rows.append((
            s.name, s.fault, str(s.restarts), str(report.counts["input_records"]),
            str(report.counts["output_records"]), str(report.count("duplicates")),
            str(report.count("lost_writes")), str(report.count("aborted_reads")),
            _recovery_text(s, "{metrics_file}" in result.job_command), s.verdict + label,
        ))
    return rows


def title(result: ReplayResult) -> str:
    """``kafka-eos demo`` or ``kafka-eos replay``, as the command that ran the scenarios."""
    return f"kafka-eos {result.command}"


def overall(result: ReplayResult) -> tuple[str, str]:
    """(``PASSED`` or ``FAILED``, one line saying why), for the console and report.md: a
    transaction-timeout loss is the scenario's intent, and the line says so next to PASSED."""
    if not result.passed:
        bad = [f"{s.name} {s.status} ({s.verdict})" for s in result.scenarios if s.status not in (PASSED, SKIPPED)]
        return "FAILED", "; ".join(bad)
    exact = [s.name for s in result.scenarios if s.status == PASSED and s.name != "txn_timeout"]
    parts = [f"exactly-once in {', '.join(exact)}"] if exact else []
    timeout = next((s for s in result.scenarios if s.name == "txn_timeout" and s.status == PASSED), None)
    if timeout is not None:
        lost = timeout.verify.count("lost_writes") if timeout.verify is not None else 0
        parts.append(f"txn_timeout lost {lost:,} records, as it intends, and the loss was detected and reported")
    skipped = [s.name for s in result.scenarios if s.status == SKIPPED]
    if skipped:
        parts.append(f"skipped: {', '.join(skipped)}")
    return "PASSED", "; ".join(parts)


def _markdown_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(result: ReplayResult, plot_file: str | None = None) -> str:
    notice = [f"> **{SIMULATED_NOTICE}**", ">", f"> {REAL_BROKER_HELP}", ""] if result.simulated else []
    word, why = overall(result)
    lines = [
        *notice,
        f"# {title(result)} report",
        "",
        f"- Overall: **{word}**" + (f": {why}" if why else ""),
        f"- Broker: `{result.bootstrap}`" + (f" ({result.broker_origin})" if result.broker_origin else ""),
        *([f"- Client settings (secret values masked): "
           + ", ".join(f"`{_markdown_cell(k)}={_markdown_cell(v)}`" for k, v in result.client_config.items())]
          if result.client_config else []),
        f"- Input topic: `{result.input_topic}`",
        f"- Engine: {result.engine}; job command: `{result.job_command}`",
        f"- Seed: {result.seed} (rerun with the same seed to reproduce the faults)",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(_markdown_cell(c) for c in row) + " |" for row in table_rows(result)]
    lines += [
        "",
        "Losses are input records missing from the read_committed output; duplicates are extra "
        "copies of input records in it; aborted reads are output records whose input record "
        "belongs to an aborted transaction (the input holds one on purpose). Recovery time runs "
        "from a fault to the first checkpoint committed after it. "
        "\"Loss detected and reported\" means the job failed with TransactionLostError, naming every "
        "lost transaction of the checkpoint and counting their records, instead of losing records silently.",
        "",
        "## Notes",
        "",
    ]
    for s in result.scenarios:
        if s.notes:
            lines.append(f"- **{s.name}**: " + " ".join(s.notes))
        report = s.verify
        if report is not None and not report.exactly_once:
            for line in report.summary_lines()[1:]:
                lines.append(f"  - {s.name}: {line.strip()}")
    lines += ["", "## How each anomaly is detected", ""]
    sample = next((s.verify for s in result.scenarios if s.verify is not None), None)
    if sample is not None:
        for anomaly in sample.anomalies.values():
            jepsen = f" [{anomaly.jepsen_name}]" if anomaly.jepsen_name else ""
            lines.append(f"- **{anomaly.name}**{jepsen}: {anomaly.detection}")
    if plot_file is not None:
        lines += ["", f"![commit latency]({plot_file})"]
    if result.simulated:
        lines += ["", f"> **{SIMULATED_NOTICE}**"]
    return "\n".join(lines) + "\n"


def plot(result: ReplayResult, path: Path) -> Path | None:
    """Commit latency per checkpoint and recovery gaps, one panel per scenario that ran."""
    import matplotlib

    matplotlib.use("Agg")  # no display: reports are written on servers and in containers
    import matplotlib.pyplot as plt

    ran = [s for s in result.scenarios if s.status != SKIPPED and s.runs]
    if not ran:
        return None
    columns = 2 if len(ran) > 1 else 1
    rows = math.ceil(len(ran) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7 * columns, 2.8 * rows), squeeze=False)
    for ax, scenario in zip(axes.flat, ran):
        origin = scenario.started_ms
        # One line per run of the job: a line across a crash would suggest checkpoints in between.
        for run in scenario.runs:
            mine = [c for c in scenario.checkpoints if run.start_ms <= c.committed_ms <= (run.end_ms or c.committed_ms)]
            ax.plot([(c.committed_ms - origin) / 1000 for c in mine], [c.latency_ms for c in mine],
                    marker=".", linewidth=0.8, color="tab:blue")
        for start, end, done in scenario.recoveries:
            ax.axvline((start - origin) / 1000, color="tab:red", linewidth=1)
            if end > start:
                ax.axvspan((start - origin) / 1000, (end - origin) / 1000, color="tab:red", alpha=0.3)
            if done is not None:
                ax.axvspan((end - origin) / 1000, (done - origin) / 1000, color="tab:red", alpha=0.12)
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.set_title(textwrap.fill(f"{scenario.name}: {scenario.verdict}", 80), fontsize=9)
        ax.set_xlabel("seconds since scenario start", fontsize=8)
        ax.set_ylabel("latency (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
        if not scenario.checkpoints:
            # Say so, rather than draw an empty 0-0.05 ms axis that reads like a measurement.
            why = ("no checkpoint committed" if "{metrics_file}" in result.job_command
                   else "the job wrote no metrics")
            ax.set_ylim(0, 1)
            ax.set_yticks([])
            ax.set_ylabel("")
            ax.text(0.5, 0.5, f"no commits to plot\n({why})", transform=ax.transAxes, ha="center",
                    va="center", fontsize=10, color="dimgray", bbox={"facecolor": "white", "edgecolor": "none"})
    for ax in list(axes.flat)[len(ran):]:
        ax.set_visible(False)
    heading = (f"{title(result)}: per-checkpoint commit latency (trigger to committed), one line per run of the "
               "job; red line: fault, dark band: broker down, light band: recovery gap")
    if result.simulated:
        heading = f"{SIMULATED_NOTICE}\n{heading}"
    fig.suptitle(heading, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_reports(result: ReplayResult, directory: str | Path) -> ReportFiles:
    """Write ``report.md``, ``report.json`` and ``commit-latency.png`` into ``directory``."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    md_path = folder / "report.md"
    json_path = folder / "report.json"
    json_path.write_text(json.dumps(result.to_json(), indent=1, default=str), encoding="utf-8")
    png_path = plot(result, folder / "commit-latency.png")
    md_path.write_text(markdown(result, png_path.name if png_path else None), encoding="utf-8")
    log.info("reports written to %s", folder)
    return ReportFiles(md_path, json_path, png_path)

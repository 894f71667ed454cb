"""The card-features example as a user runs it on a two-core machine: nothing configured, so its
parallelism-2 job runs on two worker processes, and its ``add_sink(list.append)`` sinks must fill
the example's lists in this process. Against a plain-Python oracle of the same transactions."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import card_features

COUNT = 3_000


def spend_oracle(count: int) -> dict[tuple[int, int], tuple[int, float]]:
    """(card, window end) -> (transactions, spend) over one-minute windows, from the same generator."""
    windows: dict[tuple[int, int], list[float]] = defaultdict(list)
    for txn in card_features.transactions(count):
        end = txn["ts"] - txn["ts"] % 60_000 + 60_000
        windows[(txn["card"], end)].append(txn["amount"])
    return {key: (len(amounts), sum(amounts)) for key, amounts in windows.items()}


def test_the_example_runs_on_the_default_workers_and_its_lists_get_every_window(monkeypatch, capsys) -> None:
    monkeypatch.setenv("SLIPSTREAM_WORKERS", "2")  # as a two-core machine with nothing set
    card_features.main(COUNT)
    out = capsys.readouterr().out
    assert "Runs on 2 worker processes" in out
    expected = spend_oracle(COUNT)
    assert f"per-minute spend features: {len(expected):,}" in out
    assert "burst detector:" in out and "records in" in out  # the per-operator lines, past the job's own entry
    busiest = re.search(r"largest spend in a minute: card (\d+), window ending (\d+): (\d+) transactions, ([\d.]+)",
                        out)
    assert busiest is not None, out
    card, end, count, spend = int(busiest[1]), int(busiest[2]), int(busiest[3]), float(busiest[4])
    assert expected[(card, end)] == (count, pytest.approx(spend, abs=0.01))
    assert spend == pytest.approx(max(total for _, total in expected.values()), abs=0.01)

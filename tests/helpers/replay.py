"""The healthy start-ups of the real-log corpus that tests/integration/test_healthy_replay.py replays, and
which of them served on the first launch (the run's summary counts them: tests/integration/conftest.py)."""

from __future__ import annotations

from tests.corpus import corpus

HEALTHY = [log for log in corpus() if log.expected["class"] == "ok" or log.expected.get("replay") == "serves"]
SERVED: dict[str, str] = {}  # file → source, of every log that served on its first launch

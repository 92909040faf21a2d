"""While serving: the tool-call parser's failures vLLM logs are counted by the log pump, advised on by `status`
and exported; the agent probe's verdict is exported too."""

from __future__ import annotations

import io
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from launcher.config.profile import MetricsSettings
from launcher.observe import advice
from launcher.run import logpump
from launcher.run.metrics import Exporter
from launcher.vllm.diagnose import Diagnoser

POSTED = Path(__file__).parents[2] / "data" / "agent" / "serving-parser-errors.log"


def test_the_pump_counts_each_parser_error_once_not_its_traceback() -> None:
    """A real paste (vllm-project/vllm#26561): one 'Error in extracting tool call' record and its traceback."""
    data = POSTED.read_bytes()
    pump = logpump.LogPump(io.BytesIO(data * 3), None, echo=False, diagnoser=Diagnoser())
    pump.run()
    assert pump.tool_parser_errors == 3


def test_lines_a_client_controls_are_not_counted() -> None:
    """A prompt that spells the message reaches vLLM's request log, not the parser's logger."""
    line = (b"(APIServer pid=7) INFO 10-09 09:39:54 [logger.py:39] Received request chatcmpl-1: prompt: "
            b"'Error in extracting tool call from response.', params: SamplingParams(max_tokens=8)\n")
    pump = logpump.LogPump(io.BytesIO(line), None, echo=False, diagnoser=Diagnoser())
    pump.run()
    assert pump.tool_parser_errors == 0


def test_status_advises_with_the_number_and_the_fix() -> None:
    found = advice.advise(None, None, None, [], ["vllm", "serve", "m", "--tool-call-parser", "hermes"], {}, 0.0,
                          parser_errors=12)
    rule = next(a for a in found if a.rule == "tool_parser")
    assert rule.numbers == {"tool_parser_errors": 12, "tool_call_parser": "hermes"}
    assert "12 tool-call parser error(s)" in rule.text and "hermes cannot read" in rule.text
    assert rule.change == "vllm.tool-call-parser"
    assert not [a for a in advice.advise(None, None, None, [], None, {}, 0.0, parser_errors=0)
                if a.rule == "tool_parser"]


def test_the_exporter_shows_the_verdict_and_the_parser_errors() -> None:
    exporter = Exporter(MetricsSettings(port=None, address="127.0.0.1", textfile=None), "p")
    exporter.observe({"phase": "serving", "agent": {"verdict": "fail"}, "tool_parser_errors": 4})
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for family in text_string_to_metric_families(exporter.render().decode()) for s in family.samples}
    assert got[("vllm_launch_agent_probe", (("profile", "p"), ("verdict", "fail")))] == 1.0
    assert got[("vllm_launch_agent_probe", (("profile", "p"), ("verdict", "pass")))] == 0.0
    assert got[("vllm_launch_tool_parser_errors_total", (("profile", "p"),))] == 4.0
    exporter.observe({"phase": "serving", "agent": {"verdict": "bogus"}, "tool_parser_errors": -1})
    text = exporter.render().decode()
    assert 'vllm_launch_agent_probe{' not in text, "a tampered verdict is not exported"
    assert "vllm_launch_tool_parser_errors_total{profile=\"p\"} 0.0" in text

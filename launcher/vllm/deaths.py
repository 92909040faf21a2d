"""What an engine died of. A death line says that a process died, rarely of what: the error printed near it does.

- "Worker proc … died unexpectedly" (and its kin, `paste.GENERIC_DEATHS`): the error that process printed just
  before; while serving, a worker's exception however far above (the rank that failed first: its peers then wait on
  it in a collective until their watchdog ends them).
- Once vLLM served, a death line that names no cause ("MQLLMEngine is already dead", "Got fatal signal … See stack
  trace above"): the exception printed just before it. It decides at once: no start-up is left whose root cause
  could still come.
- "EngineCore encountered a fatal error." heads the traceback whose final exception says of what.
- A group that never formed because a rank died first: torch's store timing out on its clients is named by the
  exception that rank raised.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from launcher.vllm import paste, raise_sites
from launcher.vllm.signature_kit import DISTRIBUTED_INIT, ENGINE_DEAD, EXCEPTION_LINE, UNKNOWN
from launcher.vllm.signatures import LogEvent, is_native_crash


class Fold(Protocol):
    """What of the fold (diagnose.Diagnoser) naming a death reads and keeps."""

    lines: int
    previous: str  # the line before the one being read
    completed: bool
    completed_line: int
    worker_failed_line: int
    generic: LogEvent | None
    failure: LogEvent | None
    pointed: bool
    error_text: tuple[str, int] | None
    last_exception: LogEvent | None
    last_exception_line: int
    last_exception_module: str | None
    raised_serving: tuple[LogEvent, int] | None
    api_server: bool
    serving: bool  # a request was served (a script's progress bar of its prompts, too)
    engine_ready_line: int  # where the engine said it was initialized


def stops_engine(fold: Fold, event: LogEvent) -> bool:
    """A shutdown line: the server's own always stops the engine (a death after it is no failure). A process's
    interpreter exiting (torch's "destroy_process_group() was not called before program exit") stops it only in a
    script (`LLM(...)`, no API server) whose engine served it with nothing raised since: the engine's death that
    follows is the script's teardown. A crashed engine's process prints the same warning as it goes."""
    if not event.values.get("exit"):
        return True
    return not fold.api_server and fold.serving and fold.last_exception_line < fold.engine_ready_line


def named(fold: Fold, event: LogEvent) -> LogEvent | None:
    """The failure event, an engine death's message replaced by its cause where the log shows it; None: a death to
    ignore (the executor stopping its workers after vLLM said the start-up failed: its cause is above). A native
    crash just after glibc's heap check is named by that check's words."""
    if fold.failure is None and is_native_crash(event):
        abort = paste.heap_abort(fold.previous)
        event = dataclasses.replace(event, message=abort) if abort is not None else event
    if fold.completed:
        if event.failure != ENGINE_DEAD:
            if EXCEPTION_LINE.match(event.message):  # a start-up class's exception under a serving engine
                exception_seen(fold, event)
            return event
        if event.message.startswith(paste.CAUSELESS_DEATHS) or paste.points_above(event.message):
            event = dataclasses.replace(event, fatal="specific")
            cause = fold.raised_serving
            if cause is not None and fold.lines - cause[1] <= paste.DEATH_CAUSE_LINES:
                return dataclasses.replace(event, message=cause[0].message)
    if event.failure == DISTRIBUTED_INIT and not fold.completed and "clients joined" in event.message:
        return _waited_on(fold, event)
    if event.failure != ENGINE_DEAD or not event.message.startswith(paste.GENERIC_DEATHS):
        return event
    if not fold.completed and fold.generic is not None:
        return None
    if fold.error_text is not None and fold.lines - fold.error_text[1] <= paste.DEATH_CAUSE_LINES:
        return dataclasses.replace(event, message=fold.error_text[0])
    last = fold.last_exception
    if fold.completed and last is not None and paste.engine_process(last.proc) \
            and fold.last_exception_line > min(fold.completed_line, fold.worker_failed_line or fold.lines):
        return dataclasses.replace(event, message=last.message)
    return event


def _waited_on(fold: Fold, event: LogEvent) -> LogEvent:
    """torch's store timed out waiting for its clients (`DistStoreError: … 1/8 clients joined`): where another
    process (a worker rank) raised before it, that client never came, and its exception is the failure, judged by
    its raise site; the network is not in question."""
    last = fold.last_exception
    if last is None or last.proc is None or last.proc == event.proc:
        return event
    verdict = raise_sites.judge(last.message, fold.last_exception_module)
    cls, reason = (verdict.cls, verdict.reason) if verdict is not None else (UNKNOWN, None)
    return dataclasses.replace(event, message=last.message, failure=cls, reason=reason)


def exception_seen(fold: Fold, event: LogEvent) -> None:
    """An exception line: once vLLM served, the likeliest cause of a death that follows; after a death line that
    pointed at it, the death's root cause."""
    if paste.points_elsewhere(event.message):
        return
    if fold.completed:
        fold.raised_serving = (event, fold.lines)
    failure = fold.failure
    if failure is not None and failure.failure == ENGINE_DEAD and failure.proc == event.proc \
            and (fold.pointed or paste.points_elsewhere(failure.message)):
        fold.failure, fold.pointed = dataclasses.replace(failure, message=event.message), True

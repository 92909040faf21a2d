"""vLLM's own raise sites: what an exception that ended a start-up means, read as an engineer reads a paste, from
the exception's type, its message and the module that raised it.

The catalogue (`launcher/data/vllm-source-messages.yaml`, extracted from vLLM's source by
`scripts/vllm-source-messages` and decided by hand, row by row, from what each message says) holds every
start-up failure vLLM raises or logs, in fourteen versions. The signature table reads the lines that carry numbers
or that accuse while vLLM still runs; an exception no signature knows comes here. Two cases first: vLLM's engine
re-raising a worker's exception as text (`Worker failed with error '…'`) is judged as that exception; and one whose
traceback ran an artifact the start-up loaded from vLLM's torch.compile cache is the cache's (`compile_cache`).
Then, in this order:

1. its message against the catalogue's templates (the literal words of the template; a `{placeholder}` matches
   anything on the line), the longest template that matches wins: the class and reason its row was given;
2. else the module that raised it (the innermost frame of its traceback), for the exception types vLLM raises
   to refuse a setting: the class most catalogued messages of that module have, then of its folder, when at
   least two thirds agree. A module of internal checks votes `unknown` and stays so;
3. else a KeyError whose key is a parameter's name (`layers.0.mlp.experts.w2_weight_scale_inv`): the checkpoint
   holds a tensor this vLLM's model code does not know (`unsupported_model`: another vLLM, or another checkpoint);
4. else a refusal that names `max_model_len` as above a limit (`do not support max_model_len greater than 32768
   (received 65536)`): the context asked is more than this model, device or platform allows
   (`max_model_len_above_model`, with the length asked). Platform plugins word their own limits; the words of a
   limit and the setting's name are what they share with vLLM's;
5. else an exception torch.distributed raised while forming the process group (its innermost frame in
   `distributed_c10d.py` or a rendezvous): the group never formed (`distributed_init`), whatever its words;
   and an ImportError raised by an installed package's own file (not vLLM's): that package refuses to load in
   this environment (`Numba needs NumPy 2.2 or less`): `missing_dependency`, naming it;
6. else, raised inside vLLM or with no frame at all: any exception whose message tells the operator to pass or
   drop one of vLLM's flags (`Pass --numa-bind-nodes explicitly or disable --numa-bind`), or, raised inside vLLM,
   a refusal raised by a function that validates settings (`validate_chat_template`, `verify_…`, `check_…`),
   is `bad_argument`;
7. else, raised inside vLLM, a refusal whose message names one of vLLM's own settings (`max_num_batched_tokens`,
   `--kv-cache-dtype`: the shipped flag list) is a configuration that cannot work as set (`bad_argument`): vLLM's
   refusals name the setting to change.

Nothing else is inferred: what neither finds stays `unknown` (one retry, then exit 75).
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from launcher.config.flags import shipped_catalog
from launcher.vllm.signature_kit import (
    COMPILE_CACHE,
    CONFIG,
    DISTRIBUTED_INIT,
    EXCEPTION_LINE,
    PYDANTIC_FORMS,
    UNKNOWN,
    FailureClass,
)

CATALOGUE = Path(__file__).resolve().parents[1] / "data" / "vllm-source-messages.yaml"
# The exception types vLLM raises to refuse what it was given (a setting, a model, a checkpoint). A RuntimeError,
# an AssertionError or a CUDA error is a failure while running, not a refusal: the module says nothing of it.
REFUSALS = frozenset({"ValueError", "TypeError", "NotImplementedError", "ImportError", "KeyError"})
# A template with fewer literal characters than this is too vague to name a message (`{e}`, `Invalid {x}`).
_MIN_LITERAL = 16
# The share of a module's (or folder's) catalogued messages that must agree on a class for the module to speak.
_AGREEMENT = 2 / 3
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
# A checkpoint tensor's name as a KeyError prints it: dotted, ending in what a layer's parameters are called.
_PARAMETER_KEY = re.compile(r"""^['"](?:[\w]+\.){2,}\w*(?:weight|bias|scale|scale_inv|qweight|qzeros|scales|g_idx)\w*['"]$""")
# A context limit as refusals word it: the setting, then words of a limit, within one sentence.
_CONTEXT_LIMIT = re.compile(r"(?i)\bmax[_ -]?model[_ -]?len(?:gth)?\b[^.]{0,80}?"
                            r"\b(?:(?:greater|larger|longer|more) than|exceeds?|above)\b")
# The length asked, where the message says which number it is: `(received 65536)`, `max_model_len (65536)`,
# `max_model_len=65536`; else the largest number it holds (a limit is below what was asked).
_ASKED = re.compile(r"(?i)\b(?:received|requested|got|asked(?: for)?)\s*:?\s*(\d{2,9})\b|"
                    r"\bmax[_ -]?model[_ -]?len\s*(?:\(|=\s*)(\d{2,9})\b")
_NUMBER = re.compile(r"(?<![\w.])(\d{3,9})(?![\w.])")
# Where an exception was raised: the innermost frame's file inside vLLM, and its function (`…/vllm/x.py:name`).
_VLLM_PATH = re.compile(r"(?:^|/)(vllm/[\w/.]+\.py)(?::(\w+))?$")
# vLLM's functions that check settings (`validate_chat_template`, `verify_with_parallel_config`, `_check_…`).
_VALIDATOR = re.compile(r"_?(?:validate|verify|check)(?:_|$)")
# torch.distributed's own files that form a process group: its entry points, the c10d store and rendezvous.
_PROCESS_GROUP = re.compile(r"/torch/distributed/(?:distributed_c10d|c10d_logger|rendezvous|elastic/rendezvous/\w+)\.py")
# An installed package's own file: the first folder under site-packages (pip) or dist-packages (Debian's Python).
_INSTALLED = re.compile(r"/(?:site|dist)-packages/([A-Za-z_]\w{0,64})/")
# Python's JSON decoder on a malformed file (an empty or cut config.json, tokenizer_config.json): whatever raised it
# (pydantic's validation of vLLM's config passes it on), the file is broken, not a setting refused.
_JSON_DECODE = re.compile(r"(?:Expecting (?:value|property name enclosed in double quotes|',' delimiter|':' delimiter)"
                          r"|Extra data|Unterminated string starting at|Invalid control character at): line \d+ column \d+")
# vLLM's engine re-raising a worker's failure (v1/executor/multiproc_executor.py): the worker's exception as text.
_WORKER_FAILED = re.compile(r"^Worker failed with error '(?P<inner>.*)', please check the stack trace above", re.S)
_DASHED_FLAG = re.compile(r"(?<![\w-])--([a-z0-9]+(?:-[a-z0-9]+)*)")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the raise site says: the class, the config reason, and how it was found (`message` or `module`)."""

    cls: FailureClass
    reason: str | None
    how: str
    note: str | None = None  # the catalogue's word on an `unknown` message: why nothing can be done
    numbers: dict[str, Any] | None = None  # figures the message states (the context length asked)


@dataclass(frozen=True, slots=True)
class _Template:
    pattern: re.Pattern[str]
    literal: int  # characters outside placeholders: the more, the more specific
    types: frozenset[str]
    verdict: Verdict


def judge(exception: str, module: str | None = None, from_cache: bool = False) -> Verdict | None:
    """The verdict for a final exception line (`ValueError: text`, a prefix or a dotted type allowed) raised in
    `module` (a path ending in `vllm/….py`, or None); None when neither the message nor the module speaks.
    `from_cache`: the traceback ran an artifact the start-up loaded from vLLM's torch.compile cache."""
    exception = exception.strip()
    form = next((form for form in PYDANTIC_FORMS if exception.startswith(form)), None)
    validated = form is not None  # pydantic's words for what its validator of vLLM's config raised
    if form is not None:
        exception = f"{PYDANTIC_FORMS[form]}: {exception.removeprefix(form)}"
    found = EXCEPTION_LINE.match(exception)
    if found is None or found.group("text") is None:
        return None
    kind, message = found.group("type"), found.group("text").strip()
    wrapped = _WORKER_FAILED.match(message)
    if wrapped is not None:
        # vLLM's engine re-raising what a worker raised, as the text of the worker's exception: judge that exception
        # (its type, where the text gives it; the module that raised it is the worker's, not printed here).
        inner = wrapped.group("inner").strip()
        return judge(inner) if EXCEPTION_LINE.match(inner) and ": " in inner else _by_template(inner, None)
    if _JSON_DECODE.match(message):
        return Verdict(UNKNOWN, None, "message", note="a JSON file the start-up reads (the model's) is malformed")
    if from_cache:
        # Raised while running an artifact vLLM loaded from its torch.compile cache (one a build of another vLLM,
        # torch or kernel set saved, calling an op this run lacks): the cache, moved aside, is rebuilt. An artifact
        # this start-up compiled and saved itself is no stale cache: what failed in it is judged as usual.
        return Verdict(COMPILE_CACHE, None, "cache")
    if module is not None:
        module = module.replace("\\", "/")  # a Windows path reads as a POSIX one from here on
    verdict = _by_template(message, kind)
    if verdict is not None:
        return verdict
    if kind == "KeyError" and _PARAMETER_KEY.match(message):
        return Verdict(CONFIG, "unsupported_model", "parameter")
    limit = context_limit(message) if kind in REFUSALS else None
    if limit is not None:
        return Verdict(CONFIG, "max_model_len_above_model", "limit", numbers=dict(limit))
    if module is not None and _PROCESS_GROUP.search(module) is not None:
        # torch.distributed raised while it formed the process group (a store, a rendezvous, NCCL's communicator): the
        # group never formed, whatever the words (`RuntimeError: Resource temporarily unavailable`).
        return Verdict(DISTRIBUTED_INIT, None, "module")
    package = _third_party(module) if kind == "ImportError" and module is not None else None
    if package is not None:
        # A package the start-up imports refuses to load (its own check of what it needs: `Numba needs NumPy 2.2 or
        # less. Got NumPy 2.4.`): vLLM's environment is what to fix, not a flag.
        return Verdict(CONFIG, "missing_dependency", "import", numbers={"package": package, "import_refused": True})
    site = _VLLM_PATH.search(module) if module is not None else None
    if site is None:
        # A bare exception line, no frame to say who raised it: one that tells the operator to set or drop one of
        # vLLM's flags (`Try a different backend by setting --attention-backend or disable DCP`) still says the fix.
        return Verdict(CONFIG, "bad_argument", "flag") if module is None and _flags_named(message) else None
    if kind not in REFUSALS:
        if kind == "AssertionError" and (validated or (site.group(2) is not None and _VALIDATOR.match(site.group(2)))):
            # An assertion is an internal check, except in a function that validates settings (`validate_block_size`:
            # `block_size (2096) must be <= max_num_batched_tokens (2048)`): there it refuses them as set.
            return Verdict(CONFIG, "bad_argument", "validator")
        # Any exception raised inside vLLM that tells the operator to pass or drop one of its flags (`Pass
        # --numa-bind-nodes explicitly or disable --numa-bind`) refuses the configuration as set.
        return Verdict(CONFIG, "bad_argument", "flag") if _flags_named(message) else None
    votes = _module_votes()
    for key in (site.group(1), site.group(1).rsplit("/", 1)[0]):
        verdict = votes.get(key)
        if verdict is not None:
            return verdict
    if site.group(2) is not None and _VALIDATOR.match(site.group(2)):
        return Verdict(CONFIG, "bad_argument", "validator")  # raised by a function that validates settings
    if _setting_names().search(message) is not None:
        return Verdict(CONFIG, "bad_argument", "setting")
    return None


def _by_template(message: str, kind: str | None) -> Verdict | None:
    """The catalogued row the message matches (the most literal one), raised as `kind` (None: a type not known)."""
    best: _Template | None = None
    for template in _templates():
        if (best is None or template.literal > best.literal) and template.pattern.match(message):
            best = template
    if best is not None and (kind is None or not best.types or kind in best.types):
        return best.verdict
    return None


def _third_party(module: str) -> str | None:
    """The installed package (not vLLM) whose own file raised (`module` already with forward slashes):
    `…/site-packages/numba/__init__.py` → numba."""
    found = _INSTALLED.search(module)
    return found.group(1) if found is not None and found.group(1) != "vllm" else None


def _flags_named(message: str) -> bool:
    """The message names one of vLLM's own flags as a command line writes it (`--numa-bind`)."""
    known = shipped_catalog().flags
    return any(flag in known for flag in _DASHED_FLAG.findall(message[:2000]))


def context_limit(message: str) -> dict[str, int] | None:
    """What a refusal says of a context length above a limit (`max_model_len greater than 32768 ... (received
    65536)` → max_model_len 65536, derived_max_model_len 32768): the figures it states, perhaps none; None when
    the message is no such refusal."""
    text = message[:2000]
    limit_words = _CONTEXT_LIMIT.search(text)
    if limit_words is None:
        return None
    marked = _ASKED.search(text)
    numbers = [(found.start(), int(found.group(1))) for found in _NUMBER.finditer(text)]
    asked = int(marked.group(1) or marked.group(2)) if marked is not None else \
        max(n for _, n in numbers) if len(numbers) > 1 else None  # one number, no word for it: the limit, most likely
    after = [n for at, n in numbers if at >= limit_words.end() and (asked is None or n < asked)]
    found = {"max_model_len": asked} if asked is not None else {}
    return found | ({"derived_max_model_len": after[0]} if after else {})


@functools.cache
def _setting_names() -> re.Pattern[str]:
    """vLLM's settings of two words or more, as its messages write them (`max_num_batched_tokens`, `--max-model-len`,
    `max-model-len`); one-word flags (`dtype`, `device`) are too common words to name a setting."""
    names = [name for name in shipped_catalog().flags if "-" in name]
    forms = sorted({form for name in names for form in (name, name.replace("-", "_"))}, key=len, reverse=True)
    return re.compile(r"(?<![\w-])(?:" + "|".join(map(re.escape, forms)) + r")(?![\w-])")


@functools.cache
def _rows() -> tuple[dict[str, Any], ...]:
    with CATALOGUE.open(encoding="utf-8") as stream:
        # A safe loader, libyaml's where it is built in (the catalogue is 170 KiB: 5x faster).
        data = yaml.load(stream, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    return tuple(row for row in data["messages"] if row.get("class"))


def _verdict(row: dict[str, Any], how: str) -> Verdict:
    cls = FailureClass(row["class"])
    return Verdict(cls, row.get("reason") if cls == CONFIG else None, how, row.get("note"))


@functools.cache
def _templates() -> tuple[_Template, ...]:
    templates = []
    for row in _rows():
        message = str(row["message"])
        types = frozenset(kind.removeprefix("raise ") for kind in row.get("kinds", []) if kind.startswith("raise "))
        # A message of several lines is logged as several lines: the exception line holds only its first.
        first = message.strip().split("\n", 1)[0]
        for raw, whole in ((message, True), *(((first, False),) if first != message.strip() else ())):
            parts = _PLACEHOLDER.split(" ".join(raw.split()))
            literal = sum(len(part) for part in parts)
            exact = len(parts) == 1  # no placeholder: the whole message, however short ("Unsupported OS")
            if literal < _MIN_LITERAL and not exact:
                continue  # too vague to name one message (`{e}`, `Invalid {x}`)
            body = r"(?:.{0,400}?)".join(r"\s+".join(map(re.escape, part.split(" "))) for part in parts)
            body += r"\s*\Z" if (exact and literal < _MIN_LITERAL) or not whole else ""
            templates.append(_Template(re.compile(body), literal, types, _verdict(row, "message")))
    return tuple(templates)


@functools.cache
def _module_votes() -> dict[str, Verdict]:
    """Module (and folder) → the verdict at least two thirds of its catalogued raise sites share."""
    counts: dict[str, Counter[tuple[str, str | None]]] = defaultdict(Counter)
    for row in _rows():
        if not any(kind.removeprefix("raise ") in REFUSALS for kind in row.get("kinds", [])):
            continue
        key = (row["class"], row.get("reason") if row["class"] == CONFIG else None)
        for where in {str(place).rsplit(":", 1)[0] for place in row["where"].values()}:
            counts[where][key] += 1
            folder = where.rsplit("/", 1)[0]
            if "/" in folder:  # `vllm/config`, never `vllm` itself: the whole package says nothing
                counts[folder][key] += 1
    votes = {}
    for place, tally in counts.items():
        (cls, reason), top = tally.most_common(1)[0]
        if top >= _AGREEMENT * sum(tally.values()) and cls != UNKNOWN:
            votes[place] = Verdict(FailureClass(cls), reason, "module")
    return votes

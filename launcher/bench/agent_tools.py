"""The tool definitions the `agent` workload sends in every request, as a coding agent sends them.

A coding agent's request carries a dozen tools, several thousand tokens of JSON Schema and usage notes,
before the first word of the conversation: the model's template renders them into the prompt, every turn,
for every user, so they weigh on the prefill, the KV cache and what prefix caching can share. The shapes
follow what open coding agents send through the OpenAI chat API (`tools: [{"type": "function", "function":
{name, description, parameters}}]`, `tool_choice: "auto"`): files read by line range, exact-string edits,
glob and regex search, a shell with a timeout, a todo list with statuses, a patch. The wording is this
project's own; no agent's proprietary prompt is copied.

`DIGEST` names this exact set: tune's cache keys a measured level by it, so a level measured with another
set is never reused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

_PATH = {"type": "string", "description": "The path of the file, absolute or relative to the workspace root."}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


TOOLS: tuple[dict[str, Any], ...] = (
    _tool("read_file", (
        "Reads a file from the local filesystem and returns its contents with line numbers, one line per row "
        "in the form `<number>\\t<text>`. By default it reads up to 2000 lines from the start of the file; for "
        "a long file pass `offset` and `limit` to read the part you need. Lines longer than 2000 characters are "
        "cut. Always read a file before you edit it, so that your edit matches its current text exactly. "
        "Reading a file that does not exist returns an error; reading a directory is an error too (use "
        "list_directory). Binary files are reported by type and size rather than dumped. Several files can be "
        "read in parallel by calling this tool more than once in the same turn."), {
        "path": _PATH,
        "offset": {"type": "integer", "minimum": 1, "description": "The line number to start reading at (1-based). "
                   "Only give it for files too long to read at once."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 5000, "description": "How many lines to read. "
                  "Only give it for files too long to read at once."},
    }, ["path"]),
    _tool("write_file", (
        "Writes a file to the local filesystem, replacing it if it exists. Creates missing parent directories. "
        "Prefer edit_file for changes to an existing file: it sends only the part that changes and cannot "
        "lose the rest of the file by accident. If the file exists, read it first; a write to a file you have "
        "not read in this session is refused. Never create documentation or README files unless the user asks "
        "for them. Write the complete content: nothing is appended or merged."), {
        "path": _PATH,
        "content": {"type": "string", "description": "The whole new content of the file."},
    }, ["path", "content"]),
    _tool("edit_file", (
        "Replaces an exact string in a file with another. `old_string` must occur in the file exactly as given, "
        "including its indentation and line breaks (copy it from read_file's output without the line-number "
        "prefix), and it must be unique in the file unless `replace_all` is true: include enough surrounding "
        "lines to make it unique. The edit fails, and nothing changes, when `old_string` is not found or is "
        "found more than once. Use `replace_all` to rename a variable or a string throughout the file. Keep "
        "the file's style: its indentation, quotes and line endings. To create a new file use write_file."), {
        "path": _PATH,
        "old_string": {"type": "string", "description": "The text to replace, exactly as it is in the file."},
        "new_string": {"type": "string", "description": "The text to put in its place (must differ from "
                       "old_string)."},
        "replace_all": {"type": "boolean", "default": False, "description": "Replace every occurrence of "
                        "old_string, not just one (default false)."},
    }, ["path", "old_string", "new_string"]),
    _tool("list_directory", (
        "Lists the entries of a directory: files and subdirectories with their sizes, directories marked with "
        "a trailing slash. Hidden entries and those that the workspace's ignore files exclude are left out "
        "unless `include_hidden` is true. Prefer glob or grep when you know what you are looking for; use this "
        "to get your bearings in an unfamiliar project."), {
        "path": {"type": "string", "description": "The directory to list, absolute or relative to the workspace "
                 "root (default: the root)."},
        "include_hidden": {"type": "boolean", "default": False, "description": "Also list dot-files and "
                           "ignored entries."},
        "ignore": {"type": "array", "items": {"type": "string"}, "description": "Glob patterns of entries to "
                   "leave out, e.g. [\"node_modules\", \"*.pyc\"]."},
    }, []),
    _tool("glob", (
        "Finds files whose paths match a glob pattern, such as `**/*.py` or `src/**/test_*.ts`, and returns "
        "them sorted by modification time, newest first. It is fast on any size of codebase. Use it to find "
        "files by name; use grep to find files by content. When a search needs several rounds of globbing and "
        "grepping, do them yourself in parallel rather than one at a time."), {
        "pattern": {"type": "string", "description": "The glob pattern to match, relative to `path`."},
        "path": {"type": "string", "description": "The directory to search in (default: the workspace root). "
                 "Omit it for the default; do not pass null or \"undefined\"."},
    }, ["pattern"]),
    _tool("grep", (
        "Searches file contents with a regular expression (ripgrep syntax: `log.*Error`, `function\\s+\\w+`; "
        "literal braces need escaping, `interface\\{\\}`). Returns the matching files, the matching lines or "
        "the counts, as `output_mode` says. Filter the files with `glob` (e.g. `*.js`, `**/*.{ts,tsx}`) or "
        "`type` (e.g. `py`, `rust`). Patterns match within one line unless `multiline` is true. Always use "
        "this tool for searching code instead of running grep or rg through the shell: it respects the "
        "workspace's ignore files and its output is sized for you."), {
        "pattern": {"type": "string", "description": "The regular expression to search for."},
        "path": {"type": "string", "description": "The file or directory to search (default: the workspace root)."},
        "glob": {"type": "string", "description": "Only search files whose paths match this glob."},
        "type": {"type": "string", "description": "Only search files of this type (rg --type), e.g. py, js, go."},
        "output_mode": {"type": "string", "enum": ["files_with_matches", "content", "count"],
                        "default": "files_with_matches", "description": "files_with_matches: the paths only; "
                        "content: the matching lines (with -n, -A, -B, -C); count: matches per file."},
        "case_insensitive": {"type": "boolean", "default": False, "description": "Match without regard to case "
                             "(rg -i)."},
        "line_numbers": {"type": "boolean", "default": True, "description": "content mode: show line numbers."},
        "context_before": {"type": "integer", "minimum": 0, "description": "content mode: lines to show before "
                           "each match (rg -B)."},
        "context_after": {"type": "integer", "minimum": 0, "description": "content mode: lines to show after each "
                          "match (rg -A)."},
        "multiline": {"type": "boolean", "default": False, "description": "Let `.` match newlines and patterns "
                      "span lines (rg -U --multiline-dotall)."},
        "head_limit": {"type": "integer", "minimum": 1, "description": "Return only the first N results."},
    }, ["pattern"]),
    _tool("run_shell_command", (
        "Runs a command in a persistent shell session and returns its standard output and standard error, "
        "with its exit status. Use it for builds, tests, package managers, git and other programs; do not use "
        "it to read, write, find or search files when a dedicated tool does that (read_file, write_file, "
        "edit_file, glob, grep). Quote paths that contain spaces. Chain dependent commands with `&&`; run "
        "independent ones as separate calls in the same turn. The command is stopped when it runs past "
        "`timeout` milliseconds (default 120000, at most 600000); output longer than 30000 characters is cut "
        "in the middle. Prefer absolute paths to `cd`, so the working directory stays where it was. Never run "
        "interactive commands (an editor, a pager, `git rebase -i`) and never push or force-push unless the "
        "user asks for it. Set `run_in_background` for a server or a watcher, and read its output later."), {
        "command": {"type": "string", "description": "The command to run, as one shell command line."},
        "description": {"type": "string", "description": "What the command does, in five to ten words, shown to "
                        "the user (e.g. \"Run the unit tests\")."},
        "timeout": {"type": "integer", "minimum": 1000, "maximum": 600000, "description": "How long the command "
                    "may run, in milliseconds (default 120000)."},
        "cwd": {"type": "string", "description": "The directory to run it in (default: the current one)."},
        "run_in_background": {"type": "boolean", "default": False, "description": "Start it and return at once; "
                              "its output is read with the shell id this returns."},
    }, ["command"]),
    _tool("web_fetch", (
        "Fetches a URL and returns its content converted to Markdown (HTML) or as text, then answers `prompt` "
        "about it, so that a long page costs you only the answer. HTTP URLs are upgraded to HTTPS. The "
        "content may be summarised when it is very large. Pages that need a login or a browser do not work: "
        "for a repository on a code host, prefer its command-line tool through run_shell_command. When the "
        "URL redirects to another host, the tool says so and returns the new URL: fetch it with a new call."), {
        "url": {"type": "string", "format": "uri", "description": "The fully formed URL to fetch."},
        "prompt": {"type": "string", "description": "What to find out from the page."},
        "max_bytes": {"type": "integer", "minimum": 1024, "description": "The most bytes to download "
                      "(default 5 MiB)."},
    }, ["url", "prompt"]),
    _tool("todo_write", (
        "Creates and updates the structured task list of this session, so that you and the user can track "
        "progress on work with several steps. Use it for any task with three or more distinct steps, when the "
        "user gives a list of things to do, and as soon as new requirements come up; skip it for a single, "
        "trivial change. Send the whole list every time. Exactly one item is in_progress while you work; mark "
        "an item completed as soon as it is done and verified (tests pass, the build is clean), never before, "
        "and never batch several completions. Remove items that are no longer relevant instead of leaving "
        "them pending. Each item has a short imperative `content` (\"Run the tests\") and, for in_progress, an "
        "`active_form` shown while it runs (\"Running the tests\")."), {
        "todos": {"type": "array", "description": "The complete, updated list.", "items": {
            "type": "object", "additionalProperties": False, "required": ["id", "content", "status"],
            "properties": {
                "id": {"type": "string", "description": "A stable identifier of the item."},
                "content": {"type": "string", "minLength": 1, "description": "What to do, in the imperative."},
                "active_form": {"type": "string", "description": "The same in the present continuous."},
                "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "cancelled"]},
                "priority": {"type": "string", "enum": ["high", "medium", "low"], "default": "medium"},
            }}},
    }, ["todos"]),
    _tool("search_symbols", (
        "Finds definitions and references of symbols (functions, classes, methods, variables, types) through "
        "the project's language servers, which understand scopes and imports where a text search does not. "
        "Give a name or a prefix; narrow it by `kind` and `path`. `references` returns every use of the symbol "
        "defined at `path`:`line` instead of definitions. Results carry the file, the line, the column and "
        "the symbol's signature."), {
        "query": {"type": "string", "description": "The symbol's name or the start of it."},
        "kind": {"type": "string", "enum": ["any", "function", "class", "method", "variable", "type", "module"],
                 "default": "any", "description": "The kind of symbol to find."},
        "path": {"type": "string", "description": "Only search under this file or directory."},
        "references": {"type": "boolean", "default": False, "description": "Return the references to the symbol "
                       "instead of its definitions."},
        "line": {"type": "integer", "minimum": 1, "description": "With references: the line of the definition."},
        "max_results": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
    }, ["query"]),
    _tool("git_diff", (
        "Shows the changes in the working tree as a unified diff: unstaged changes by default, `staged` for "
        "what is in the index, or against `base` (a commit, branch or tag). Limit it to some `paths`. Use it "
        "before committing to review exactly what will be committed, and to see what the user changed since "
        "you last looked. With `stat` only the summary of files and lines changed is returned."), {
        "staged": {"type": "boolean", "default": False, "description": "Show the staged changes (git diff "
                   "--cached)."},
        "base": {"type": "string", "description": "Compare the working tree with this revision instead."},
        "paths": {"type": "array", "items": {"type": "string"}, "description": "Only these files or directories."},
        "stat": {"type": "boolean", "default": False, "description": "Only the diffstat."},
        "context_lines": {"type": "integer", "minimum": 0, "maximum": 100, "default": 3,
                          "description": "Lines of context around each change (git diff -U)."},
    }, []),
    _tool("apply_patch", (
        "Applies a patch that adds, deletes, moves or changes files, in one step: use it for edits that touch "
        "several files or several places in one file. The patch is a unified diff as `git diff` writes it "
        "(`--- a/path`, `+++ b/path`, `@@` hunks with three lines of context); paths are relative to the "
        "workspace root, `/dev/null` creates or deletes a file. Every hunk must apply cleanly to the current "
        "files or nothing is changed and the failing hunk is returned: read the files again and retry. With "
        "`check` the patch is verified but not applied."), {
        "patch": {"type": "string", "description": "The unified diff to apply."},
        "check": {"type": "boolean", "default": False, "description": "Only check that it applies (git apply "
                  "--check)."},
    }, ["patch"]),
    _tool("ask_user", (
        "Asks the user a question and waits for the answer: use it when a decision is theirs to make (a "
        "choice between designs, a missing requirement, a destructive step), not for things you can find out "
        "with the other tools. Offer two to four concrete `options` when you can; the user may always answer "
        "in their own words instead."), {
        "question": {"type": "string", "description": "The question, complete and specific, ending with a "
                     "question mark."},
        "options": {"type": "array", "maxItems": 4, "description": "Suggested answers.", "items": {
            "type": "object", "additionalProperties": False, "required": ["label"], "properties": {
                "label": {"type": "string", "description": "The answer, in a few words."},
                "description": {"type": "string", "description": "What choosing it means."}}}},
    }, ["question"]),
)

NAMES = tuple(tool["function"]["name"] for tool in TOOLS)
DIGEST = hashlib.sha256(json.dumps(TOOLS, sort_keys=True).encode()).hexdigest()[:16]
SETTINGS = ("agent", "none")  # bench/tune --tools: the set above, or no tools at all


def tools_for(setting: str) -> list[dict[str, Any]] | None:
    """What a request's `tools` carries under this --tools setting (None: the key is left out)."""
    return [dict(tool) for tool in TOOLS] if setting == "agent" else None

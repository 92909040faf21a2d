"""`scripts/install-systemd`: carry out (or, with --dry-run, print) the steps `systemd_plan` decides.

Exit codes follow the launcher's: 0 done, 78 a profile or secret that cannot be installed, 2 misuse, 1 a
step that failed (its command and output are printed; the steps before it stay done, and a re-run is safe).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from launcher.config import document
from launcher.config.load import load, loads
from launcher.config.profile import Profile
from launcher.deploy.invoker import Invoker, invoker, read_secret
from launcher.deploy.systemd_plan import (
    CREDS,
    DEFAULT_PREFIX,
    InstallOptions,
    MakeDir,
    Remove,
    Run,
    Step,
    WriteFile,
    absolute_paths,
    install_steps,
    secret_sources,
    secret_values,
    secrets_used,
    uninstall_steps,
    writable_paths,
)
from launcher.errors import EX_ARGPARSE_USAGE, EX_CONFIG, ConfigError
from launcher.statedir import write_text_atomic

PROJECT = Path(__file__).resolve().parents[2]
TEMPLATE = PROJECT / "systemd" / "vllm-launch@.service"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/install-systemd",
                                     description="Install a profile as the systemd service vllm-launch@NAME.")
    parser.add_argument("profile", help="the profile to install; NAME is its file name without .yaml")
    parser.add_argument("--dry-run", action="store_true", help="print every step as a command; change nothing")
    parser.add_argument("--root", help="install into this directory tree instead of / (as systemctl --root)")
    parser.add_argument("--user", default="vllm", help="the service user, created if missing (default vllm)")
    parser.add_argument("--prefix", default=str(DEFAULT_PREFIX), help="where the venv goes (default %(default)s)")
    parser.add_argument("--vllm", help="an existing vllm executable to use instead of installing vLLM")
    parser.add_argument("--no-venv", action="store_true", help="the launcher is already in PREFIX/venv")
    parser.add_argument("--uninstall", action="store_true",
                        help="stop and remove this instance (template, venv, user and caches stay)")
    return parser


def _under(root: str | None, path: PurePosixPath) -> Path:
    return Path(root) / path.relative_to("/") if root else Path(path)


def _remove(root: str | None, step: Remove) -> None:
    target = _under(root, step.path)
    if target.is_dir():
        for child in sorted(target.rglob("*"), reverse=True):
            child.rmdir() if child.is_dir() else child.unlink()
        target.rmdir()
    else:
        target.unlink(missing_ok=True)


def carry_out(steps: Sequence[Step], root: str | None) -> None:
    for step in steps:
        if isinstance(step, Run):
            if root and step.live_only:
                continue
            done = subprocess.run(step.argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"`{step.shell()}` exited {done.returncode}: {(done.stderr or done.stdout).strip()}")
        elif isinstance(step, MakeDir):
            path = _under(root, step.path)
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(step.mode)
        elif isinstance(step, WriteFile):
            write_text_atomic(_under(root, step.path), step.content, step.mode)
        else:
            _remove(root, step)


def _secrets(profile: Profile, environ: Mapping[str, str], existing: set[str], who: Invoker, *,
             dry_run: bool) -> dict[str, str]:
    """A dry run goes on without the secrets (they are never printed anyway) but says a real run would stop.
    A `{file:}` secret is read with the rights of whoever ran sudo (`who`), never root's."""
    try:
        return secret_values(profile, environ, existing, lambda key, path: read_secret(key, path, who))
    except ConfigError as exc:
        if not dry_run:
            raise
        print(f"install-systemd: a real install would stop here: {exc}", file=sys.stderr)
        return {key: "" for key in secrets_used(profile) if key not in existing}


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = _parser().parse_args(argv)
    environ = os.environ if environ is None else environ
    if args.root and not Path(args.root).is_dir():
        print(f"install-systemd: --root {args.root} is not a directory; create it first", file=sys.stderr)
        return EX_ARGPARSE_USAGE
    try:
        profile = load(args.profile)
        text, notes = absolute_paths(document.read_text(args.profile), profile.source, str(Path.cwd()),
                                     lambda model: Path(model).exists())
        if notes:  # what the unit will read: checked again, and the drop-in built from it
            profile = loads(text, source=profile.source, name=profile.name)
        options = InstallOptions(project=str(PROJECT), user=args.user, prefix=PurePosixPath(args.prefix),
                                 vllm=args.vllm, root=args.root, venv=not args.no_venv)
        if args.uninstall:
            steps = uninstall_steps(profile.name, args.root)
        else:
            existing = {key for key in ("api_key", "hf_token")
                        if _under(args.root, CREDS / f"{profile.name}.{key}").exists()}
            who = invoker(environ)
            secrets = _secrets(profile, environ, existing, who, dry_run=args.dry_run)
            sources = {key: source if source.startswith("$") else f"{source} (read with {who.describe()})"
                       for key, source in secret_sources(profile).items()}
            steps = install_steps(profile, text, TEMPLATE.read_text(encoding="utf-8"), options, secrets, sources)
    except ConfigError as exc:
        print(f"install-systemd: {exc}", file=sys.stderr)
        return EX_CONFIG
    except OSError as exc:  # e.g. not root: /etc/vllm-launch/creds is root-only
        print(f"install-systemd: {exc}; run it with sudo (or --root DIR for a directory tree)", file=sys.stderr)
        return 1
    for note in [] if args.uninstall else notes:
        print(f"note: {note}")
    if args.dry_run:
        if args.root:
            print(f"# every path below is under --root {args.root}")
        for step in steps:
            skipped = isinstance(step, Run) and step.live_only and args.root
            print(("# skipped with --root: " if skipped else "") + step.shell())
        return 0
    try:
        carry_out(steps, args.root)
    except (OSError, RuntimeError) as exc:
        print(f"install-systemd: {exc}", file=sys.stderr)
        return 1
    unit = f"vllm-launch@{profile.name}"
    if args.uninstall:
        print(f"{unit}: stopped and removed; the template unit, {args.prefix}/venv, user {args.user} and the caches "
              "under /var/cache/vllm-launch stay")
    else:
        for path in writable_paths(profile):
            print(f"note: the profile writes under {path}; the unit allows it (ReadWritePaths=-{path}), "
                  "and skips it where it does not exist")
        print(f"{unit}: installed" + ("" if args.root else f"; follow it with: journalctl -u {unit} -f"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The project speaks only of itself, and the README's commands exist as written.

1. No file of the tree refers to numbered work rounds or numbered issues: such numbers mean nothing outside
   the team that wrote them (dates, run directories or commits say the same thing to anyone). Upstream
   projects' issues stay fine when they name the project ("LettuceDetect#56").
2. Every `python -m MODULE ...`, `python scripts/X.py ...` and console-script line in the bash blocks of the
   README and of docs/ names a module that runs, and each long flag it uses is listed by its `--help`; relative
   links point at files and headings that exist.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The same expression as the review's `git grep -i -E`, plus its hyphenated spellings.
WORK_ROUND = re.compile("sessions? [0-9]+|issues? #?[0-9]+|session-[0-9]+|issue-[0-9]+", re.IGNORECASE)
SKIP_DIRS = {".git", ".venv", "runs", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache", ".gpu"}
SKIP_SUFFIXES = {".png", ".jpg", ".gif", ".onnx", ".safetensors", ".zip", ".gz", ".tgz", ".parquet", ".pyc"}


def tree_files() -> list[Path]:
    """The files of the tree: git's tracked and untracked-but-not-ignored files, else a walk of the checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                             capture_output=True, check=True, timeout=60).stdout
        paths = [REPO / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        paths = [Path(root) / name for root, dirs, names in os.walk(REPO)
                 for name in names if not dirs.__setitem__(slice(None), [d for d in dirs if d not in SKIP_DIRS])]
    return [p for p in paths if p.is_file() and p.suffix.lower() not in SKIP_SUFFIXES
            and not any(part in SKIP_DIRS for part in p.relative_to(REPO).parts)]


def test_no_numbered_work_rounds_or_issues_in_the_tree():
    offenders = []
    files = tree_files()
    assert len(files) > 50, f"found only {len(files)} files under {REPO}"
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            match = WORK_ROUND.search(line)
            if match:
                offenders.append(f"{path.relative_to(REPO)}:{lineno}: {match.group(0)!r} in {line.strip()[:120]}")
    assert not offenders, ("numbered work rounds / issues (use a date, a run directory or a commit):\n"
                           + "\n".join(offenders))


def test_the_round_pattern_matches_what_it_should():
    assert WORK_ROUND.search("as measured in " + "Session" + " 41")
    assert WORK_ROUND.search("see " + "issue" + " #57") and WORK_ROUND.search("the " + "issues" + " 11 and 12")
    assert not WORK_ROUND.search("semantic-router#3365, LettuceDetect#56, a session of training, issue 'x'")


# -- the README's commands -------------------------------------------------------------------------------------

SHELL_OPERATORS = {"&&", "||", ";", "|"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def bash_blocks(markdown: str) -> list[str]:
    """Logical lines of the ```bash blocks: continuation lines joined, empty lines dropped."""
    lines, block, current = [], False, ""
    for raw in markdown.splitlines():
        stripped = raw.strip()
        if stripped.startswith("```"):
            block = stripped in ("```bash", "```sh", "```shell", "```console") and not block
            current = ""
            continue
        if not block:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        current += stripped
        if current.strip():
            lines.append(current.strip())
        current = ""
    return lines


def commands(line: str) -> list[list[str]]:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # one line of a multi-line shell string (curl -d '{...}'): no Python entry point
        return []
    out, cmd = [], []
    for token in tokens:
        if token in SHELL_OPERATORS:
            out.append(cmd)
            cmd = []
        else:
            cmd.append(token)
    out.append(cmd)
    return [c for c in out if c]


@functools.cache
def console_scripts() -> dict[str, str]:
    """The console scripts the installed package declares (pyproject.toml's [project.scripts])."""
    return {ep.name: ep.value for ep in metadata.distribution("halugate").entry_points
            if ep.group == "console_scripts"}


def launcher(cmd: list[str]) -> tuple[list[str], list[str]] | None:
    """(the argv that runs the command's program, the arguments after it), or None for a command that is not a
    Python entry point of this repository (make, pip, accelerate, ...)."""
    while cmd and (ENV_ASSIGNMENT.match(cmd[0]) or cmd[0] == "env"):
        cmd = cmd[1:]
    if not cmd:
        return None
    program = Path(cmd[0]).name
    if re.fullmatch(r"python(3(\.\d+)?)?", program):
        if len(cmd) > 2 and cmd[1] == "-m":
            return [sys.executable, "-m", cmd[2]], cmd[3:]
        if len(cmd) > 1 and cmd[1].endswith(".py"):
            return [sys.executable, str(REPO / cmd[1])], cmd[2:]
        return None
    if program in console_scripts():
        module, func = console_scripts()[program].split(":")
        code = f"import sys; sys.argv[0] = {program!r}; from {module} import {func}; sys.exit({func}())"
        return [sys.executable, "-c", code], cmd[1:]
    return None


def split_arguments(args: list[str]) -> tuple[list[str], list[str]]:
    """(the positional words before the first option: subcommands, which `--help` needs; the long flags used)."""
    positionals = []
    for arg in args:
        if arg.startswith("-"):
            break
        positionals.append(arg)
    flags = [a.strip("[]").split("=")[0] for a in args if a.strip("[]").startswith("--")]
    return positionals, flags


@functools.cache
def help_text(argv: tuple[str, ...]) -> tuple[int, str]:
    proc = subprocess.run([*argv, "--help"], check=False, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return proc.returncode, proc.stdout + proc.stderr


def documented_commands(path: str) -> list[tuple[str, list[str], list[str], list[str]]]:
    found = []
    for line in bash_blocks((REPO / path).read_text(encoding="utf-8")):
        for cmd in commands(line):
            run = launcher(cmd)
            if run:
                positionals, flags = split_arguments(run[1])
                found.append((" ".join(cmd), run[0], positionals, flags))
    return found


def test_readme_parsing_finds_the_entry_points():
    names = [c[0] for c in documented_commands("README.md")]
    assert len(names) >= 5, names
    assert any("training.export" in n for n in names) and any("inference.detect" in n for n in names), names
    assert bash_blocks("```bash\npython -m a.b --x 1 \\\n    --y 2   # --z\nmake demo\n```\n") == [
        "python -m a.b --x 1 --y 2   # --z", "make demo"]
    assert split_arguments(["mmlu", "--limit", "3", "[--private]", "--out=D"]) == (["mmlu"], ["--limit", "--private", "--out"])


MARKDOWN = ["README.md"] + sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))


@pytest.mark.parametrize("path", MARKDOWN)
def test_documented_commands_exist_and_their_flags_are_in_their_help(path):
    problems = []
    for text, argv, positionals, flags in documented_commands(path):
        code, out = help_text(tuple(argv + positionals))
        if code != 0:
            problems.append(f"{text}\n    `--help` exited {code}: {out.strip().splitlines()[-1:] or out!r}")
            continue
        missing = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", out)]
        if missing:
            problems.append(f"{text}\n    not in its --help: {', '.join(missing)}")
    assert not problems, f"{path}: commands that do not run as written:\n" + "\n".join(problems)


def test_a_flag_missing_from_the_help_is_caught():
    code, out = help_text((sys.executable, "-m", "inference.detect"))
    assert code == 0
    present = [f for f in ("--config", "--no-such-flag") if re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", out)]
    assert present == ["--config"]


# -- links between the documents -------------------------------------------------------------------------------

def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", re.sub(r"```.*?```", "", markdown, flags=re.DOTALL), re.MULTILINE):
        out.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("path", MARKDOWN)
def test_relative_links_point_at_files_and_headings(path):
    base = (REPO / path).parent
    text = (REPO / path).read_text(encoding="utf-8")
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        file = (base / target) if target else REPO / path
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target}#{anchor} (no such heading)")
    assert not broken, f"{path}: broken links: {broken}"

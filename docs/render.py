"""Run every command and Python snippet in README.md and docs/*.md; write what they print.

    python docs/render.py            # rerun everything and rewrite the docs in place
    python docs/render.py --check    # exit 1 (with a diff) if a doc is not what a run prints now
    python docs/render.py --list     # every block: run, or skipped and why
    python docs/render.py docs/training.md      # only some files

The numbers in the docs' transcripts are generated, never typed: when the cost model changes,
one run of this script rewrites them all, and ``tests/test_docs.py`` fails until it has been
run. Fenced blocks are read by their info string and by a directive, an HTML comment on the
line before the fence (``<!-- docs: head 12 -->``; several are joined with ``;``):

``console``
    A transcript. Each line starting with ``$ rackmath`` is a command (continued by a
    trailing ``\\``); what follows it, up to the next ``$`` line, is its output, rewritten
    from an in-process run (``rackmath.cli.main.run``) at :data:`COLUMNS` columns, stdout and
    stderr in the order printed, ``(exit code N)`` after a failing one. Excerpts are
    directives, applied to each command's output: ``head N``, ``tail N``, ``from REGEX``
    (start at the first matching line), ``until REGEX`` (stop before the first matching line
    after the start), ``grep REGEX`` (only matching lines), ``omit START .. END`` (drop from
    the first line matching START up to the next matching END); a ``...`` line marks each cut.
``python``
    Executed (one namespace per document, in order); a block that raises fails the check.
    A later block under ``<!-- docs: output -->`` is rewritten with what the last Python
    block printed, plus the value of its last line when that is an expression (as Jupyter).
``<!-- docs: markdown -->`` ... ``<!-- docs: end -->``
    Not a fenced block: the Markdown between the two comments (a table, a list of figures in
    prose) is rewritten with what the last Python block printed, so a table a reader sees
    rendered is generated too.
``<!-- docs: file PATH -->``
    The block is the repository file ``PATH``, copied in (so a spec shown is the spec run).
``<!-- docs: write PATH -->``
    The block's text is written to ``PATH`` in the run's folder before the commands after it
    run (so an example file a reader copies is the one that was tested).
``<!-- docs: skip REASON -->``
    Not run; ``--list`` prints the reason. Shell blocks (``bash``, ``sh``, ``shell``) and
    blank-info blocks with ``$`` lines must be a ``console`` transcript or say why not.

Each document runs in a fresh temporary folder holding copies of ``examples/`` and
``docs/data/`` (:data:`SHARED_FOLDERS`) and an empty ``artifacts/``. ``docs/web.md`` is left
to its own owner (:data:`NOT_RENDERED`). The README's benchmark table between its markers is
rewritten too, by ``benchmarks/render_readme.py``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import importlib.util
import io
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Repository folders copied into each document's run folder, at the same relative paths.
SHARED_FOLDERS = ("examples", "docs/data")
#: Width of every transcript: what a 100-column terminal shows (tables wider than this split).
COLUMNS = 100
#: Documents not rendered here, with the reason (kept short and visible).
NOT_RENDERED = {"docs/web.md": "owned by the web pages' maintainer (rendered with this script once marked)"}
SHELLS = ("bash", "sh", "shell", "zsh")
FENCE = re.compile(r"^(`{3,})(.*)$")
DIRECTIVE = re.compile(r"^<!--\s*docs:\s*(.*?)\s*-->$")
EXCERPTS = ("head", "tail", "from", "until", "grep", "omit")


class DocError(Exception):
    """A block that cannot be rendered: a bad directive, a command that is not rackmath's, a
    Python snippet that raises."""


def documents() -> list[Path]:
    """README.md and docs/*.md, less :data:`NOT_RENDERED`."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [d for d in docs if _rel(d) not in NOT_RENDERED]


def _rel(path: Path) -> str:
    """``path`` relative to the repository (as the docs name each other), else as given."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


@dataclass
class Block:
    """One fenced block: ``lines[start]`` is the opening fence, ``lines[end]`` the closing."""

    start: int
    end: int
    fence: str
    info: str
    body: list[str]
    directives: list[tuple[str, str]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.info.split()[0].lower() if self.info.split() else ""

    def directive(self, word: str) -> str | None:
        return next((arg for w, arg in self.directives if w == word), None)


def parse_directives(text: str) -> list[tuple[str, str]]:
    """``head 12; from ^Answer`` -> ``[("head", "12"), ("from", "^Answer")]``; ``skip``
    takes the whole rest as its reason."""
    if text.split(" ", 1)[0].lower() == "skip":
        return [("skip", text[4:].strip())]
    out = []
    for part in (p.strip() for p in text.split(";")):
        if part:
            word, _, arg = part.partition(" ")
            out.append((word.lower(), arg.strip()))
    return out


def _is_directive(line: str, word: str) -> bool:
    """Whether ``line`` is the comment ``<!-- docs: WORD -->``."""
    d = DIRECTIVE.match(line.strip())
    return d is not None and d.group(1).strip().lower() == word


#: The info string of a generated Markdown region (``<!-- docs: markdown -->`` ... ``end``).
MARKDOWN_REGION = "<markdown region>"


def blocks(lines: list[str]) -> list[Block]:
    """Every fenced block of a Markdown document, with the directive above it, and every
    generated Markdown region (:data:`MARKDOWN_REGION`: ``lines[start]`` is the opening
    comment, ``lines[end]`` the closing one)."""
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if _is_directive(lines[i], "markdown"):
            end = next((j for j in range(i + 1, len(lines)) if _is_directive(lines[j], "end")), None)
            if end is None:
                raise DocError(f"line {i + 1}: a markdown region with no <!-- docs: end -->")
            found.append(Block(i, end, "", MARKDOWN_REGION, lines[i + 1 : end]))
            i = end + 1
            continue
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
        if end is None:
            raise DocError(f"line {i + 1}: a fence that is never closed")
        above = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        d = DIRECTIVE.match(above)
        found.append(
            Block(i, end, fence, info, lines[i + 1 : end], parse_directives(d.group(1)) if d else [])
        )
        i = end + 1
    return found


# ----------------------------------------------------------------------------- running


@contextlib.contextmanager
def _environment(folder: Path) -> Iterator[None]:
    """Commands run in ``folder`` at :data:`COLUMNS` columns, with no progress bars."""
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "RACKMATH_PROGRESS", "RACKMATH_DEBUG")}
    cwd = Path.cwd()
    os.environ.update(COLUMNS=str(COLUMNS), RACKMATH_PROGRESS="0")
    os.environ.pop("RACKMATH_DEBUG", None)
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_command(argv: list[str]) -> list[str]:
    """``rackmath ARGV...`` in this process: the lines it prints (stdout and stderr in order)."""
    from rackmath.cli.main import run

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = run(argv)
    lines = [line.rstrip() for line in out.getvalue().rstrip("\n").splitlines()]
    return lines + ([f"(exit code {code})"] if code else [])


def excerpt(lines: list[str], directives: list[tuple[str, str]]) -> list[str]:
    """``lines`` cut by the block's excerpt directives; ``...`` marks each cut."""
    keep = [True] * len(lines)
    for word, arg in directives:
        if word in ("head", "tail") and not arg.isdigit():
            raise DocError(f"{word} {arg!r}: wants a number of lines")
        if word == "head":
            keep = [k and i < int(arg) for i, k in enumerate(keep)]
        elif word == "tail":
            keep = [k and i >= len(lines) - int(arg) for i, k in enumerate(keep)]
        elif word == "grep":
            keep = [k and bool(re.search(arg, line)) for k, line in zip(keep, lines, strict=True)]
        elif word == "omit":
            start_re, _, end_re = arg.partition(" .. ")
            first = next((i for i, line in enumerate(lines) if re.search(start_re, line)), None)
            if first is None or not end_re:
                raise DocError(f"omit {arg!r}: wants START .. END, with START matching a line")
            last = next((i for i in range(first + 1, len(lines)) if re.search(end_re, lines[i])), len(lines))
            keep = [k and not first <= i < last for i, k in enumerate(keep)]
        elif word in ("from", "until"):
            hits = [i for i, line in enumerate(lines) if re.search(arg, line)]
            if not hits:
                raise DocError(f"{word} {arg!r}: no line of the output matches")
            start = next((i for i, k in enumerate(keep) if k), len(lines))
            after = [i for i in hits if i > start] if word == "until" else [i for i in hits if i >= start]
            if not after:
                raise DocError(f"{word} {arg!r}: no line after the excerpt's start matches")
            if word == "from":
                keep = [k and i >= after[0] for i, k in enumerate(keep)]
            else:
                keep = [k and i < after[0] for i, k in enumerate(keep)]
    if all(keep):
        return lines
    out: list[str] = []
    for i, line in enumerate(lines):
        if keep[i]:
            out.append(line)
        elif not out or out[-1] != "...":
            out.append("...")
    if not any(keep):
        raise DocError("the excerpt keeps no line of the output")
    return out


def render_console(block: Block) -> list[str]:
    """The transcript with every command's output rewritten."""
    commands: list[list[str]] = []
    for line in block.body:
        if line.startswith("$ "):
            commands.append([line])
        elif commands and commands[-1][-1].endswith("\\"):
            commands[-1].append(line)
    if not commands:
        raise DocError("a console block with no `$ ` command")
    excerpts = [(w, a) for w, a in block.directives if w in EXCERPTS]
    out: list[str] = []
    for i, typed in enumerate(commands):
        text = " ".join(part.rstrip("\\").strip() for part in typed)[2:]
        argv = shlex.split(text, comments=True)
        if not argv or argv[0] != "rackmath":
            raise DocError(f"`{text}`: a console block runs `rackmath` commands only (else skip it)")
        if i:
            out.append("")
        out += typed + excerpt(run_command(argv[1:]), excerpts)
    return out


def run_python(source: str, namespace: dict[str, Any], where: str) -> list[str]:
    """Execute ``source``; what it printed, and the value of a last-line expression."""
    tree = ast.parse(source, filename=where)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(tree, where, "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), where, "eval"), namespace)
                if value is not None:
                    print(repr(value))
    except Exception as exc:  # a snippet that raises is a broken doc, reported with where
        raise DocError(f"{where}: the Python block raises {type(exc).__name__}: {exc}") from exc
    return [line.rstrip() for line in out.getvalue().rstrip("\n").splitlines()]


def _python_namespace() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    with contextlib.suppress(ImportError):
        import pandas as pd

        pd.set_option("display.width", COLUMNS)
        pd.set_option("display.max_columns", None)
    return namespace


def _readme_benchmarks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_readme", ROOT / "benchmarks" / "render_readme.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Report:
    """What rendering one document did: blocks run, blocks skipped (with why)."""

    path: str
    ran: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def render_document(path: Path, text: str | None = None) -> tuple[str, Report]:
    """The document at ``path`` (or ``text``) with every generated block rewritten."""
    rel = _rel(path)
    text = path.read_text(encoding="utf-8") if text is None else text
    lines = text.split("\n")
    report = Report(rel)
    replaced: dict[int, tuple[int, list[str]]] = {}
    namespace = _python_namespace()
    last_output: list[str] | None = None
    with tempfile.TemporaryDirectory(prefix="rackmath-docs-") as tmp:
        folder = Path(tmp)
        for shared in SHARED_FOLDERS:  # what a reader at the repository root can read too
            if (ROOT / shared).is_dir():
                shutil.copytree(ROOT / shared, folder / shared)
        (folder / "artifacts").mkdir()
        with _environment(folder):
            for b in blocks(lines):
                where = f"{rel}:{b.start + 1}"
                try:
                    last_output = _render_block(b, where, folder, namespace, last_output, replaced, report)
                except DocError as exc:
                    raise DocError(f"{where}: {exc}") from exc
    for start, (end, body) in sorted(replaced.items(), reverse=True):
        lines[start + 1 : end] = body
    out = "\n".join(lines)
    if rel == "README.md":
        out = _readme_benchmarks().render(out)
    return out, report


def _render_block(
    b: Block,
    where: str,
    folder: Path,
    namespace: dict[str, Any],
    last_output: list[str] | None,
    replaced: dict[int, tuple[int, list[str]]],
    report: Report,
) -> list[str] | None:
    known = {"skip", "output", "file", "write", *EXCERPTS}
    unknown = [w for w, _ in b.directives if w not in known]
    if unknown:
        raise DocError(f"unknown directive {unknown[0]!r} (known: {', '.join(sorted(known))})")
    reason = b.directive("skip")
    if reason is not None:
        if not reason:
            raise DocError("`skip` needs a reason")
        report.skipped.append((where, reason))
        return last_output
    path = b.directive("file")
    if path is not None:
        replaced[b.start] = (b.end, (ROOT / path).read_text(encoding="utf-8").rstrip("\n").split("\n"))
        report.ran.append(f"{where} file {path}")
        return last_output
    target = b.directive("write")
    if target is not None:
        (folder / target).parent.mkdir(parents=True, exist_ok=True)
        (folder / target).write_text("\n".join(b.body) + "\n", encoding="utf-8")
        report.ran.append(f"{where} write {target}")
        return last_output
    if b.info == MARKDOWN_REGION or b.directive("output") is not None:
        if last_output is None:
            raise DocError("an output block with no Python block before it")
        replaced[b.start] = (b.end, last_output)
        return None
    if b.kind == "console":
        replaced[b.start] = (b.end, render_console(b))
        report.ran.append(f"{where} console")
        return last_output
    if b.kind == "python":
        report.ran.append(f"{where} python")
        return run_python("\n".join(b.body), namespace, where)
    if b.kind in SHELLS or (not b.kind and any(line.startswith("$ ") for line in b.body)):
        raise DocError(
            "commands in a shell block: make it a `console` transcript or add <!-- docs: skip REASON -->"
        )
    return last_output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="documents (default: README.md and docs/*.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a document is not what a run prints")
    parser.add_argument("--list", action="store_true", help="list every block run or skipped")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    paths = [p.resolve() for p in args.files] or documents()
    stale = 0
    for path in paths:
        try:
            fresh, report = render_document(path)
        except DocError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        current = path.read_text(encoding="utf-8")
        if args.list:
            for what in report.ran:
                print(f"ran      {what}")
            for where, why in report.skipped:
                print(f"skipped  {where}: {why}")
        if fresh == current:
            continue
        if args.check:
            stale += 1
            diff = difflib.unified_diff(
                current.splitlines(),
                fresh.splitlines(),
                f"{report.path} (as written)",
                f"{report.path} (as run)",
                n=1,
                lineterm="",
            )
            print("\n".join(list(diff)[:60]), file=sys.stderr)
        elif not args.list:
            path.write_text(fresh, encoding="utf-8")
            print(f"rewrote {report.path}")
    if stale:
        print(f"{stale} document(s) are stale: run python docs/render.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

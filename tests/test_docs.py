"""Every command the README and the user guide show is run, so a page cannot show one that fails.

A fenced ``sh``, ``bash`` or ``python`` block of ``README.md`` or ``docs/**/*.md`` is marked
by an HTML comment on the line just before its opening fence (invisible on GitHub and in the
built guide):

- ``<!-- run -->``: the block is run;
- ``<!-- run: ARGS -->``: run, with ``ARGS`` (small settings, e.g. ``--set revolutions=1``)
  appended to every ``lidar-sim`` call of the block;
- ``<!-- fails: CODE -->``: each command line of the block is run on its own and must exit
  with ``CODE``, printing one line on stderr that starts ``error:``, and no traceback (the
  bad-input page shows what a user gets);
- ``<!-- skip: REASON -->``: not run, and why (a display, the network, a real capture the
  repository does not ship, a synopsis with placeholders, a benchmark that takes minutes).

Every block carries one of the two (``test_every_block_is_marked``). The runnable blocks of a
page run in order in one temporary copy of the repository per page (its ``configs/``,
``scenes/``, ``docs/`` and ``benchmarks/``; the package is the installed one), so a block may
use what an earlier block of its page wrote; a page's blocks are one xdist group (one worker,
one process), the pages spread over the workers. A block leaves the repository as it was:
it fails if it changes or removes a file of the copy or writes a file outside ``out/``
(:func:`changes_outside_out`; a guide's command writes into ``out/`` or a folder it names
there, never over a committed file or into the repository's root). A shell block runs under
``bash -e -o pipefail`` with the environment's ``lidar-sim`` and ``python`` first on the path,
a Python block as a script; a non-zero exit fails the block's test with its output. A shell
block made of plain ``lidar-sim`` calls alone (no variables, pipes, redirections or globs
that match a file) runs each call in the test's process (:func:`conftest.lidar_sim`, the
CLI's ``main`` as the entry point calls it, with the block's ARGS appended), saving the
child's start; ``render`` and ``view`` (the offscreen renderer and the window never live in
the test process) and any other block keep the child process.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import lidar_sim

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COPIED = ("configs", "scenes", "docs", "benchmarks")
LANGUAGES = ("sh", "bash", "python")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[^`]*)$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>run|skip|fails)(?::\s*(?P<arg>.*?))?\s*-->\s*$")
BLOCK_TIMEOUT_S = 180
#: Commands whose process is part of what is shown: the offscreen renderer and the viewer's
#: window never live in the test process.
CHILD_ONLY = frozenset({"render", "view"})


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # "run", "skip" or None
    arg: str  # the marker's text after the colon

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The ``sh``/``bash``/``python`` blocks of a Markdown page, with their markers."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        language = m["info"].split("{")[0].strip().split(" ")[0].lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        if language in LANGUAGES:
            previous = lines[i - 1] if i > 0 else ""
            mark = MARKER.match(previous)
            code = "\n".join(line[indent:] for line in lines[i + 1 : j]) + "\n"
            blocks.append(
                Block(
                    page,
                    i + 1,
                    language,
                    code,
                    mark["kind"] if mark else None,
                    (mark["arg"] or "") if mark else "",
                )
            )
        i = j + 1
    return blocks


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]
RUNNABLE = [block for block in ALL_BLOCKS if block.marker in ("run", "fails")]


def test_every_block_is_marked() -> None:
    """Each shell or Python block says whether it is run, and a skipped one says why."""
    unmarked = [b.id for b in ALL_BLOCKS if b.marker is None]
    bad_code = [b.id for b in ALL_BLOCKS if b.marker == "fails" and not b.arg.isdigit()]
    assert not bad_code, f"<!-- fails: CODE --> needs an exit code: {bad_code}"
    assert not unmarked, (
        "blocks with neither <!-- run --> nor <!-- skip: REASON --> on the line before "
        f"their fence: {unmarked}"
    )
    no_reason = [b.id for b in ALL_BLOCKS if b.marker == "skip" and not b.arg]
    assert not no_reason, f"<!-- skip --> needs a reason (<!-- skip: REASON -->): {no_reason}"


def test_the_blocks_are_found() -> None:
    """The collector sees the pages' blocks (a parser that found none would pass everything)."""
    pages = {b.page.relative_to(ROOT).as_posix() for b in RUNNABLE}
    assert {"README.md", "docs/getting-started.md", "docs/weather.md"} <= pages
    assert any(b.language == "python" for b in RUNNABLE)
    assert all(b.code.strip() for b in ALL_BLOCKS)


LINK = re.compile(r"\]\((?!https?://|mailto:)(?P<path>[^)#\s]*)(?:#(?P<anchor>[^)\s]+))?\)")


def _slug(heading: str) -> str:
    """A heading's anchor, as GitHub and MkDocs' toc make it for these pages' headings."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", text))


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, flags=re.M)}


def test_readme_links_resolve() -> None:
    """The README's links and pictures (not built by MkDocs, whose strict build checks the
    guide's) point to files that exist, and to headings those pages have."""
    readme = ROOT / "README.md"
    broken = []
    for m in LINK.finditer(readme.read_text(encoding="utf-8")):
        target = (ROOT / m["path"]) if m["path"] else readme
        heading = m["anchor"] and target.suffix == ".md"
        if not target.exists() or (heading and m["anchor"] not in _anchors(target)):
            broken.append(m[0])
    assert not broken, f"README.md links to nothing: {broken}"


def _tool_dir(folder: Path, args: str) -> Path:
    """A folder holding a ``lidar-sim`` that appends ``args`` to every call (beside the
    repository's copy ``folder``, not in it)."""
    bindir = folder.parent / f".doc-bin-{len(args)}-{abs(hash(args))}"
    bindir.mkdir(exist_ok=True)
    exe = Path(sys.executable).parent / "lidar-sim"
    real = str(exe) if exe.exists() else shutil.which("lidar-sim")
    assert real, "lidar-sim is not installed"
    extra = " ".join(shlex.quote(a) for a in shlex.split(args))
    script = bindir / "lidar-sim"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(real)} "$@" {extra}\n')
    script.chmod(0o755)
    return bindir


def run_block(
    block: Block, folder: Path, code: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one block (or ``code`` in its place) in ``folder``, a copy of the repository: in
    this process when it is plain ``lidar-sim`` calls (:func:`plain_calls`), else in a child
    (its helper files beside ``folder``, not in it)."""
    extra = block.arg if block.marker == "run" else ""
    calls = plain_calls(code or block.code, folder) if block.language != "python" else None
    if calls is not None:
        return run_in_process(calls, folder, extra)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(
        [
            str(_tool_dir(folder, extra)),
            str(Path(sys.executable).parent),
            env["PATH"],
        ]
    )
    env["MPLBACKEND"] = "Agg"
    # A worker a core: a thread each (the output is the same for any number of threads).
    env.setdefault("NUMBA_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the copy
    if block.language == "python":
        script = folder.parent / f".doc-block-{block.line}.py"
        script.write_text(block.code)
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", code or block.code]
    return subprocess.run(
        command,
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def plain_calls(code: str, folder: Path) -> list[list[str]] | None:
    """The ``lidar-sim`` calls of a shell block (each its arguments) when every command of
    the block is one, with nothing the shell would change (a variable, a substitution, a
    pipe, a redirection, a glob that matches a file, ``~``); else None."""
    calls = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        try:
            words = list(lexer)
        except ValueError:  # an unclosed quote: the shell's to report
            return None
        if not words:
            continue
        if words[0] != "lidar-sim" or len(words) < 2 or words[1] in CHILD_ONLY:
            return None
        for word in words:
            if set(word) & set("|&;<>()$`") or word.startswith("~"):
                return None
            if set(word) & set("*?[") and glob.glob(word, root_dir=folder):
                return None
        calls.append(words[1:])
    return calls or None


def run_in_process(
    calls: list[list[str]], folder: Path, extra: str
) -> subprocess.CompletedProcess[str]:
    """``lidar-sim`` calls run in this process in ``folder``, as ``bash -e`` runs them: in
    order, to the first that exits non-zero; the outputs of all those run."""
    code, out, err = 0, [], []
    for call in calls:
        ran = lidar_sim(*call, *shlex.split(extra), cwd=folder)
        code = ran.returncode
        out.append(ran.stdout)
        err.append(ran.stderr)
        if code != 0:
            break
    return subprocess.CompletedProcess(calls, code, "".join(out), "".join(err))


def files_of(folder: Path) -> dict[str, tuple[str, int, int]]:
    """Every file under ``folder``: its path relative to it -> the SHA-256 of its bytes, its
    modification time (ns) and its inode (a file written anew, even with the same bytes,
    has another of either)."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            st = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            files[path.relative_to(folder).as_posix()] = (digest, st.st_mtime_ns, st.st_ino)
    return files


#: Where a guide's command may write: ``out/`` and any folder it names under it.
OUTPUT_FOLDER = "out"


def changes_outside_out(
    before: dict[str, tuple[str, int, int]], after: dict[str, tuple[str, int, int]]
) -> list[str]:
    """What a block did to the repository's copy beyond writing into ``out/``: the files of
    the repository it changed, wrote over with the same bytes, or removed, and the files it
    wrote elsewhere."""
    done = []
    for name, (digest, *stat) in before.items():
        if name.startswith(f"{OUTPUT_FOLDER}/"):
            continue
        if name not in after:
            done.append(f"removed {name}")
        elif after[name][0] != digest:
            done.append(f"changed {name}")
        elif list(after[name][1:]) != stat:
            done.append(f"wrote over {name} (the same bytes)")
    for name in after:
        if name not in before and not name.startswith(f"{OUTPUT_FOLDER}/"):
            done.append(f"wrote {name}")
    return done


def run_page(blocks: list[Block], folder: Path) -> dict[str, str | None]:
    """Run a page's blocks in order in a fresh copy of the repository (``folder/repo``):
    per block, None if it exited 0 and left the copy as it was but for ``out/``, else what
    went wrong (the blocks after a failed one are not run)."""
    repo = folder / "repo"
    for name in COPIED:
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("out"))
    outcome: dict[str, str | None] = {}
    failed = None
    for block in blocks:
        if failed:
            outcome[block.id] = f"not run: the page's earlier block {failed} failed"
            continue
        before = files_of(repo)
        if block.marker == "fails":
            problem = _check_failures(block, repo)
        else:
            problem = _run_problem(block, repo)
        left = changes_outside_out(before, files_of(repo))
        if problem is None and left:
            problem = (
                f"left the repository changed (a guide's command writes into {OUTPUT_FOLDER}/ "
                f"or a folder it names there): {', '.join(left)}\n{block.code}"
            )
        outcome[block.id] = problem
        if problem is not None:
            failed = block.id
    return outcome


def _run_problem(block: Block, repo: Path) -> str | None:
    """None if the block exits 0 in ``repo``, else what went wrong."""
    try:
        result = run_block(block, repo)
    except subprocess.TimeoutExpired:
        return f"timed out after {BLOCK_TIMEOUT_S} s"
    if result.returncode == 0:
        return None
    return (
        f"exited {result.returncode}:\n{block.code}\n"
        f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
    )


def _check_failures(block: Block, folder: Path) -> str | None:
    """Each command of a ``fails`` block exits with the stated code and one error line."""
    commands = [
        line
        for line in block.code.replace("\\\n", " ").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    for command in commands:
        result = run_block(block, folder, command)
        lines = result.stderr.strip().splitlines()
        if (
            result.returncode != int(block.arg)
            or len(lines) != 1
            or not lines[0].startswith("error:")
            or "Traceback" in result.stderr
        ):
            return (
                f"{command!r} exited {result.returncode} (expected {block.arg} and one line "
                f"'error: ...'):\n--- stderr\n{result.stderr[-3000:]}"
            )
    return None


@pytest.fixture(scope="module")
def page_outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Path], dict[str, str | None]]:
    """A page's blocks' outcomes, the page run on first asking (once a process): its
    blocks in order, up to its last selected one."""
    selected = {
        item.callspec.params["block"].id
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_block_runs"
    }
    pages: dict[Path, list[Block]] = {}
    for block in RUNNABLE:
        pages.setdefault(block.page, []).append(block)
    done: dict[Path, dict[str, str | None]] = {}

    def outcome(page: Path) -> dict[str, str | None]:
        if page not in done:
            blocks = pages[page]
            last = max(i for i, b in enumerate(blocks) if b.id in selected)
            done[page] = run_page(blocks[: last + 1], tmp_path_factory.mktemp(page.stem))
        return done[page]

    return outcome


#: Each block with its page's xdist group: a page's blocks run on one worker, in order.
BY_PAGE = [
    pytest.param(b, marks=pytest.mark.xdist_group(f"docs:{b.page.relative_to(ROOT)}"), id=b.id)
    for b in RUNNABLE
]


@pytest.mark.parametrize("block", BY_PAGE)
def test_block_runs(block: Block, page_outcomes: Callable[[Path], dict[str, str | None]]) -> None:
    """The block exits 0 (after the page's earlier runnable blocks, which it may rely on)."""
    problem = page_outcomes(block.page)[block.id]
    if problem is not None:
        pytest.fail(f"{block.id} ({block.language}) {problem}", pytrace=False)


def test_a_block_that_changes_the_repository_fails(tmp_path: Path) -> None:
    """The check itself: a block that overwrites a committed file, removes one, or leaves a
    file outside ``out/`` fails with what it did; one that writes into ``out/`` (or a
    folder it names there) passes, and a later block of its page may read it."""
    page = ROOT / "docs" / "index.md"

    def block(code: str, line: int) -> Block:
        return Block(page, line, "sh", code, "run", "")

    cases = {
        "over": "cp docs/index.md docs/scan.md\n",
        "same": "cp docs/scan.md x.md && mv x.md docs/scan.md\n",
        "gone": "rm scenes/farm/survey.yaml\n",
        "root": "mkdir my_scene && echo x > my_scene/scene.yaml && echo y > my_scanner.yaml\n",
        "fine": "mkdir -p out/my_scene && echo x > out/my_scene/scene.yaml\n",
    }
    outcome = {}
    for k, (name, code) in enumerate(cases.items()):
        result = run_page([block(code, k + 1)], tmp_path / name)
        outcome[name] = result[f"docs/index.md:{k + 1}"]
    assert "left the repository changed" in str(outcome["over"])
    assert "changed docs/scan.md" in str(outcome["over"])
    assert "wrote over docs/scan.md (the same bytes)" in str(outcome["same"])
    assert "removed scenes/farm/survey.yaml" in str(outcome["gone"])
    assert "wrote my_scanner.yaml, wrote my_scene/scene.yaml" in str(outcome["root"])
    assert outcome["fine"] is None
    later = run_page(
        [block(cases["fine"], 1), block("test -s out/my_scene/scene.yaml\n", 2)],
        tmp_path / "later",
    )
    assert later == {"docs/index.md:1": None, "docs/index.md:2": None}


def test_the_guide_links_pages_as_html_files() -> None:
    """``use_directory_urls: false``: the built guide's links are ``page.html`` files, so it
    works opened from disk (``site/index.html``), not only served."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^use_directory_urls:\s*false\s*$", text, flags=re.M)


HREF = re.compile(r"""(?:href|src)=["']?(?P<url>[^"' >]+)""")


def test_the_built_guide_opens_from_disk(tmp_path: Path) -> None:
    """Built (``mkdocs build --strict``, as ``make docs``), every page's links to other
    pages, pictures and styles are relative paths to files of the site: none a folder
    (which a browser shows as "Index of ...") and none missing."""
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists():
        pytest.skip("mkdocs is not installed (the [dev] extra)")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    bad, pages = [], 0
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":  # served by a web server for any missing path
            continue
        pages += 1
        for m in HREF.finditer(page.read_text(encoding="utf-8")):
            url = m["url"].split("#")[0].split("?")[0]
            if not url or re.match(r"^[a-z][a-z0-9+.-]*:", url) or url.startswith("//"):
                continue  # an anchor on the page, or another site
            target = page.parent / url
            if url.endswith("/") or target.is_dir() or not target.is_file():
                bad.append(f"{page.relative_to(site)} -> {m['url']}")
    assert pages >= 15
    assert not bad, f"links a browser cannot open from disk: {bad[:20]}"

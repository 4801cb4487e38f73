"""`metis-lite index BASE --watch`: a base that follows its folder (indexing/watch.py,
cli/watch.py). The command runs in a process of its own, its base inside the folder it
watches (so a run that woke itself would never stop); another process searches it."""

from __future__ import annotations

import errno
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import watchfiles

from metis_lite.indexing import watch
from metis_lite.indexing.watch import Root, Watcher

ROOT = Path(__file__).resolve().parent.parent
WORDS_ONLY = ("--embedding", "tei", "--embedding-url", "http://127.0.0.1:9")
"""No model answers (nothing listens on port 9): runs are fast, searches go by words."""

FOUND_WITHIN_S = 20.0
"""The longest a test waits for a change to be searchable (the aim is 2 s: bench_watch.py)."""

RUN = re.compile(r"^watching \S+: run (\d+) \(([^)]*)\)")


class Watching:
    """`metis-lite index BASE FOLDER --watch` running, its stderr read line by line."""

    def __init__(self, base: Path, folder: Path, *extra: str) -> None:
        self.base = base
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "metis_lite", "index", str(base), str(folder), *WORDS_ONLY]
            + ["--watch", *extra],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __enter__(self) -> Watching:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join()
        assert self.proc.stderr is not None
        self.proc.stderr.close()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            self._new.put(line)

    def line(self, pattern: str, *, after: int = 0, within: float = FOUND_WITHIN_S) -> str:
        """The first line from `after` on that matches `pattern`, waited for."""
        deadline = time.monotonic() + within
        while True:
            for line in self.lines[after:]:
                if re.search(pattern, line):
                    return line
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and self._new.empty():
                raise AssertionError(f"no line {pattern!r} in:\n" + "\n".join(self.lines))
            try:
                self._new.get(timeout=min(left, 0.5))
            except queue.Empty:
                pass

    def runs(self, after: int = 0) -> list[str]:
        return [line for line in self.lines[after:] if RUN.match(line)]

    def stop(self) -> tuple[int, float]:
        """SIGINT, as Ctrl-C sends: (exit code, seconds it took to end)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=30)
        return code, time.monotonic() - started


def search(base: Path, word: str) -> list[str]:
    """The documents a search by words finds, from a process of its own."""
    out = subprocess.run(
        [sys.executable, "-m", "metis_lite", "search", str(base), word, "--mode", "keyword"]
        + ["--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [r["citation"]["document"] for r in json.loads(out.stdout)["results"]]


def found_after(base: Path, word: str, started: float) -> float:
    """Seconds from `started` until a search finds `word` (fails after FOUND_WITHIN_S)."""
    while not search(base, word):
        assert time.monotonic() - started < FOUND_WITHIN_S, f"{word} never found"
    return time.monotonic() - started


@pytest.fixture
def watching(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "first.md").write_text("# First\n\nan apple a day\n")
    (folder / ".gitignore").write_text("drafts/\n*.tmp.md\n")
    with Watching(folder / "kb.db", folder) as running:  # the base inside its own folder
        running.line(r"^watching .*kb\.db: 1 source \(file-system events\)")
        yield running, folder


def test_a_change_is_searchable_at_once_and_a_save_by_rename_is_one(watching):
    running, folder = watching
    assert search(running.base, "apple")
    started = time.monotonic()
    (folder / "new.md").write_text("a banana split\n")
    latency = found_after(running.base, "banana", started)
    print(f"new file searchable after {latency:.2f} s")
    mark = len(running.lines)
    temporary = folder / "first.md.tmp-81"  # an editor's save: written aside, renamed over it
    temporary.write_text("# First\n\na cherry a day\n")
    os.replace(temporary, folder / "first.md")
    assert found_after(running.base, "cherry", time.monotonic()) < FOUND_WITHIN_S
    assert not search(running.base, "apple")
    # What a run does not read asks for none: hidden, ignored, of no kind read, the base's own
    # files (written by every run: the base lies in the folder it watches).
    (folder / ".hidden.md").write_text("hidden")
    (folder / "drafts").mkdir()
    (folder / "drafts" / "draft.md").write_text("draft")
    (folder / "notes.tmp.md").write_text("ignored")
    (folder / "data.bin").write_bytes(b"\0" * 10)
    (folder / "last.md").write_text("a date palm\n")
    running.line(r"run \d+ \(1 change\): 1 added", after=mark + 1)
    runs = running.runs(mark)
    assert [RUN.match(r).group(2) for r in runs] == ["1 change", "1 change"], runs
    time.sleep(2.5)  # no run wakes another: nothing more comes (an absence has no event)
    assert running.runs(mark) == runs
    assert search(running.base, "draft") == []
    code, seconds = running.stop()
    assert code == 130 and seconds < 10, running.lines
    assert running.lines[-1] == "interrupted"
    assert not any("Traceback" in line for line in running.lines)


def test_a_thousand_files_at_once_are_a_few_runs(watching):
    running, folder = watching
    mark = len(running.lines)
    started = time.monotonic()
    for n in range(1000):
        (folder / f"f{n:04}.txt").write_text(f"file number {n} word{n}\n")
    running.line(r"· last event", after=mark)
    seconds = found_after(running.base, "word999", started)
    runs = running.runs(mark)
    added = sum(int(re.search(r": (\d+) added", r).group(1)) for r in runs)
    print(f"1,000 files: {len(runs)} runs, searchable after {seconds:.2f} s")
    assert added == 1000 and len(runs) <= 5, runs


def test_a_source_folder_gone_is_said_and_its_documents_kept(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "first.md").write_text("an apple a day\n")
    with Watching(tmp_path / "kb.db", folder, "--rescan", "1") as running:
        running.line(r"^watching .*: 1 source")
        moved = tmp_path / "elsewhere"
        folder.rename(moved)  # moved away (or deleted, or unmounted: the same here)
        running.line(r"source docs is missing .*its documents are kept")
        mark = len(running.lines)
        running.line(r"run \d+ \(rescan\)", after=mark)  # rescans go on, and remove nothing
        assert running.proc.poll() is None
        assert search(running.base, "apple") == ["first.md"]
        moved.rename(folder)
        running.line(r"source docs is back")
        running.line(r"run \d+ \(docs back\)")
        (folder / "second.md").write_text("a banana\n")
        found_after(running.base, "banana", time.monotonic())
        assert search(running.base, "apple") == ["first.md"]
        assert running.stop()[0] == 130


def test_a_file_source_is_watched_through_its_folder(tmp_path):
    (tmp_path / "one.md").write_text("an apple\n")
    (tmp_path / "other.md").write_text("a banana\n")
    with Watching(tmp_path / "kb.db", tmp_path / "one.md") as running:
        running.line(r"^watching .*: 1 source")
        mark = len(running.lines)
        (tmp_path / "other.md").write_text("a banana split\n")  # not a source: no run
        (tmp_path / "one.md").write_text("a cherry\n")
        found_after(running.base, "cherry", time.monotonic())
        assert [RUN.match(r).group(2) for r in running.runs(mark)] == ["1 change"]
        assert search(running.base, "banana") == []
        assert running.stop()[0] == 130


def test_watch_options_are_checked(tmp_path, capsys):
    from metis_lite import cli

    folder = tmp_path / "docs"
    folder.mkdir()
    base = str(tmp_path / "kb.db")
    assert cli.main(["index", base, str(folder), "--rescan", "5"]) == 2
    assert cli.main(["index", base, str(folder), "--watch", "--json"]) == 2
    assert cli.main(["index", base, str(folder), "--watch", "--rescan", "0"]) == 2
    err = capsys.readouterr().err
    assert "--rescan and --poll-files go with --watch" in err
    assert "not with --json" in err and "from 1 to 86400" in err
    assert not Path(base).exists()


def test_the_watch_limit_falls_back_to_polling(tmp_path, monkeypatch):
    """inotify's max_user_watches reached (ENOSPC, as a folder of 100,000 files in many
    folders reaches it): said once, and the source polled, its changes still seen."""
    watched = watchfiles.watch

    def limited(*paths, force_polling=None, **options):
        if not force_polling:
            raise OSError(errno.ENOSPC, "OS file watch limit reached")
        return watched(*paths, force_polling=force_polling, **options)

    monkeypatch.setattr(watchfiles, "watch", limited)
    monkeypatch.setattr(watch, "POLL_DELAY_MS", 100)
    said: list[str] = []
    watcher = Watcher(tmp_path / "kb.db", say=said.append)
    try:
        watcher.follow([Root("docs", tmp_path)])
        assert watcher.wait(0.5) is None
        assert len(said) == 1 and "limit of watched folders" in said[0], said
        assert "polled" in watcher.how
        time.sleep(0.3)  # the poller's first listing, which changes are compared with
        (tmp_path / "new.md").write_text("new")
        batch = watcher.wait(FOUND_WITHIN_S)
        assert batch is not None and batch.changes == 1 and batch.sources == ("docs",)
    finally:
        watcher.stop()


def test_which_changes_ask_for_a_run(tmp_path):
    (tmp_path / ".gitignore").write_text("build/\n*.draft.md\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".ignore").write_text("secret.md\n")
    root = Root("docs", tmp_path, excludes=("*.pdf",))
    relevance = watch._Relevance(root, frozenset({str(tmp_path / "kb.db-wal")}))
    added, deleted = watchfiles.Change.added, watchfiles.Change.deleted
    reads = {
        "a.md": True,
        "sub/b.txt": True,
        "sub": True,  # a folder moved in
        "gone": True,  # deleted, of no kind: a folder moved out, perhaps
        "gone.tmp": True,
        ".gitignore": True,  # what a run leaves out changes
        "sub/.ignore": True,
        "objects.inv": True,  # a Sphinx build's mark: its _sources/ left out, or read again
        "sub/searchindex.js": True,
        ".hidden.md": False,
        ".git/x.md": False,
        "build/c.md": False,
        "x.draft.md": False,
        "sub/secret.md": False,
        "c.pdf": False,
        "kb.db-wal": False,
        "data.bin": False,
    }
    for name, expected in reads.items():
        change = deleted if name.startswith("gone") else added
        got = relevance.read([(change, str(tmp_path / name))])[0] == 1
        assert got == expected, name
    file_root = Root("one", tmp_path / "a.md", file=True)
    only = watch._Relevance(file_root, frozenset())
    assert only.read([(added, str(tmp_path / "a.md")), (added, str(tmp_path / "b.md"))])[0] == 1
    saved = [(deleted, str(tmp_path / "a.md.tmp")), (added, str(tmp_path / "a.md"))]
    assert relevance.read(saved) == (1, frozenset(p for _, p in saved))  # a save by rename
    assert relevance.read([(deleted, str(tmp_path / "x")), (deleted, str(tmp_path / "y"))])[0] == 1


def test_a_network_mount_is_named(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw 0 0\nserver:/export /mnt/share nfs4 rw 0 0\n"
        "/dev/sdb1 /mnt/share/local ext4 rw 0 0\n"
    )
    assert watch.network_mount(Path("/mnt/share/docs"), mounts) == "nfs4"
    assert watch.network_mount(Path("/mnt/share/local/docs"), mounts) is None
    assert watch.network_mount(Path("/mnt/sharex"), mounts) is None
    assert watch.network_mount(Path("/home"), tmp_path / "none") is None


def test_the_base_is_kept_when_its_folder_is_deleted(tmp_path):
    """rm -r of the folder: its files' deletions come first, then the folder's; the run they
    ask for finds the folder missing and keeps every document."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "first.md").write_text("an apple\n")
    with Watching(tmp_path / "kb.db", folder) as running:
        running.line(r"^watching .*: 1 source")
        shutil.rmtree(folder)
        running.line(r"source docs is missing")
        assert running.proc.poll() is None
        assert search(running.base, "apple") == ["first.md"]
        assert running.stop()[0] == 130


def test_a_search_meanwhile_never_sees_half_a_document(watching):
    """A document of many chunks rewritten again and again while another process searches
    it: every answer holds one version of it, whole (a document is one transaction)."""
    running, folder = watching
    target = folder / "long.md"
    sections = 30

    def version(n: int) -> str:
        return "".join(
            f"## Part {s}\n\nversion{n} of part {s} beside {'filler ' * 80}\n\n"
            for s in range(sections)
        )

    target.write_text(version(0))
    found_after(running.base, "version0", time.monotonic())
    checker = subprocess.Popen(
        [sys.executable, "-c", SEARCHER, str(running.base)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    for n in range(1, 16):
        aside = folder / ".long.md.swp"
        aside.write_text(version(n))
        os.replace(aside, target)
        time.sleep(0.1)  # a writer saving every 0.1 s: faster than some runs end
    found_after(running.base, "version15", time.monotonic())
    checker.terminate()
    out, _ = checker.communicate(timeout=30)
    answers = [json.loads(line) for line in out.splitlines()]
    assert len(answers) > 10
    for versions in answers:
        assert len(versions) == 1 and list(versions.values()) == [sections], versions


SEARCHER = """
import json, re, sys
from metis_lite.base.core import Base
with Base(sys.argv[1]) as base:
    while True:
        answer = base.search("part beside filler", mode="keyword", top_k=100)
        versions = {}
        for result in answer.results:
            if result.citation.document == "long.md":
                n = re.search(r"version(\\d+)", result.text).group(1)
                versions[n] = versions.get(n, 0) + 1
        print(json.dumps(versions), flush=True)
"""


def test_serve_follows_its_sources(tmp_path, monkeypatch):
    """`serve`'s indexer is woken by its sources' changes, long before its --poll (the full
    rescan's interval) comes round, for a pass of the paths that changed (no walk)."""
    import httpx
    from conftest import words_only_base
    from serving import served

    from metis_lite.indexing import changed

    walked: list[Path] = []
    real = changed.walk
    monkeypatch.setattr(
        changed, "walk", lambda root, *a, **o: walked.append(root) or real(root, *a, **o)
    )

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "first.md").write_text("an apple\n")
    with words_only_base(tmp_path / "kb.db", folder) as base:
        base.index()
    logs: list[str] = []
    with served([str(tmp_path / "kb.db")], poll_s=600, log=logs.append) as server:

        def found(word: str) -> bool:
            asked = {"question": word, "mode": "keyword"}
            answer = httpx.post(f"{server.url}/v1/bases/kb/search", json=asked).json()
            return bool(answer["results"])

        deadline = time.monotonic() + FOUND_WITHIN_S
        while not found("apple"):
            assert time.monotonic() < deadline, logs
            time.sleep(0.05)
        time.sleep(0.5)  # the watch begins
        walks = len(walked)  # the index above, and serve's first pass
        started = time.monotonic()
        (folder / "second.md").write_text("a banana\n")
        while not found("banana"):
            assert time.monotonic() - started < FOUND_WITHIN_S, logs
            time.sleep(0.05)
        print(f"serve: a new file searchable after {time.monotonic() - started:.2f} s")
        assert walked == [folder] * walks  # the change's pass walked nothing


def test_a_file_changing_faster_than_the_debounce(watching):
    """A file rewritten every 10 ms for 3 s: at most a run every RUN_GAP_S, never one a
    write; its last version is what is found once it stops."""
    from metis_lite.cli.watch import RUN_GAP_S

    running, folder = watching
    mark = len(running.lines)
    target = folder / "busy.md"
    for n in range(300):
        target.write_text(f"busy writer version{n} {'padding ' * 50}\n")
        time.sleep(0.01)  # the writer's own pace, the input of this test
    found_after(running.base, "version299", time.monotonic())
    runs = running.runs(mark)
    print(f"300 writes in 3 s: {len(runs)} runs")
    assert 1 <= len(runs) <= 3 / RUN_GAP_S + 3, runs
    assert running.proc.poll() is None


def test_an_unmounted_folder_holds_the_runs(tmp_path):
    """A source that is a mount point: unmounted, its empty folder is left, which a run would
    read as every file deleted. It is said, and no run comes (the rescans wait) until it is
    mounted again, with its files: then it is watched again, with a run."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "mnt"
    mount.mkdir()

    def mounted() -> None:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)])
        if done.returncode != 0:
            pytest.skip("mount is not permitted here")

    mounted()
    try:
        (mount / "first.md").write_text("an apple\n")
        with Watching(tmp_path / "kb.db", mount, "--rescan", "1") as running:
            running.line(r"^watching .*: 1 source")
            subprocess.run(["umount", "-l", str(mount)], check=True)
            running.line(r"source mnt is on another file system now .*unmounted")
            mark = len(running.lines)
            time.sleep(2.5)  # two rescans due: none runs (an absence has no event)
            assert running.runs(mark) == [] and running.proc.poll() is None
            assert search(running.base, "apple") == ["first.md"]
            mounted()  # mounted again (a new device number), with its files
            (mount / "first.md").write_text("an apple\n")
            running.line(r"source mnt is back")
            running.line(r"run \d+ \(mnt back\)", after=mark)
            assert search(running.base, "apple") == ["first.md"]
            assert running.stop()[0] == 130
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


MANY = 3000
"""Files of the source a batch's run must not walk (a few thousand: a walk would stat them
all; the listing of a batch stats its own paths alone)."""


@pytest.fixture
def many(tmp_path, monkeypatch):
    """A words-only base of MANY small files, indexed; then walking the source fails the test
    unless `walks` is allowed (each walk counted)."""
    from conftest import words_only_base

    from metis_lite.indexing import changed

    folder = tmp_path / "docs"
    for n in range(MANY):
        sub = folder / f"part{n // 500}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{n:04}.txt").write_text(f"file number {n} word{n}\n")
    (folder / ".gitignore").write_text("*.tmp.md\n")
    base = words_only_base(tmp_path / "kb.db", folder)
    assert base.index().added == MANY
    walked: list[Path] = []
    real = changed.walk

    def walk(root, *args, **options):
        walked.append(root)
        return real(root, *args, **options)

    monkeypatch.setattr(changed, "walk", walk)
    try:
        yield base, folder, walked
    finally:
        base.close()


def batch_run(base, *paths: Path):
    """The run of a watch batch that names `paths` (absolute), of source docs."""
    return base.index(only={"docs": frozenset(str(p) for p in paths)})


def found(base, word: str) -> list[str]:
    return [r.citation.document for r in base.search(word, mode="keyword").results]


def test_a_batch_reads_its_paths_without_walking_the_folder(many):
    base, folder, walked = many
    edited = folder / "part3" / "f1600.txt"
    edited.write_text("file number 1600 apricot\n")
    report = batch_run(base, edited)
    assert (report.added, report.updated, report.removed, report.unchanged) == (0, 1, 0, 0)
    assert walked == [] and found(base, "apricot") == ["part3/f1600.txt"]
    assert found(base, "word1601") == ["part3/f1601.txt"]  # the others kept as they were

    gone = folder / "part0" / "f0007.txt"  # deleted: its document leaves the base
    gone.unlink()
    assert batch_run(base, gone).removed == 1 and found(base, "word7") == []

    old, new = folder / "part1" / "f0500.txt", folder / "part1" / "renamed.txt"
    os.replace(old, new)  # renamed: the document moves
    report = batch_run(base, old, new)
    assert (report.added, report.removed) == (1, 1)
    assert found(base, "word500") == ["part1/renamed.txt"]

    ignored = folder / "draft.tmp.md"  # named, but the folder's rules leave it out
    ignored.write_text("a blueberry draft\n")
    hidden = folder / ".hidden.md"
    hidden.write_text("a blueberry secret\n")
    report = batch_run(base, ignored, hidden)
    assert report.added == 0 and found(base, "blueberry") == []

    shutil.rmtree(folder / "part5")  # a folder deleted: its documents go, nothing walked
    assert batch_run(base, folder / "part5").removed == 500
    assert found(base, "word2999") == [] and walked == []
    report = base.index()  # a full run finds nothing the batches missed
    assert (report.added, report.updated, report.removed, report.unchanged) == (0, 0, 0, MANY - 501)


def test_an_ignore_file_or_a_folder_in_a_batch_walks_the_source(many):
    base, folder, walked = many
    (folder / ".gitignore").write_text("*.tmp.md\npart0/\n")  # edited: re-applied everywhere
    report = batch_run(base, folder / ".gitignore")
    assert walked == [folder] and report.removed == 500 and found(base, "word3") == []
    moved_in = folder / "new"  # a folder moved in: its files made no event of their own
    (folder.parent / "outside").mkdir()
    (folder.parent / "outside" / "a.md").write_text("a cherry\n")
    os.replace(folder.parent / "outside", moved_in)
    assert batch_run(base, moved_in).added == 1 and found(base, "cherry") == ["new/a.md"]
    assert walked == [folder, folder]


def test_a_sphinx_builds_mark_in_a_batch_walks_and_its_sources_stay_out(tmp_path):
    from conftest import words_only_base

    folder = tmp_path / "docs"
    (folder / "_sources").mkdir(parents=True)
    (folder / "os.html").write_text("<html><body><main><p>The numbat.</p></main></body></html>")
    (folder / "_sources" / "os.rst.txt").write_text("The numbat, in its source.\n")
    with words_only_base(tmp_path / "kb.db", folder) as base:
        assert base.index().added == 2
        (folder / "objects.inv").write_text("")  # the build writes its inventory last
        assert batch_run(base, folder / "objects.inv").removed == 1
        assert found(base, "numbat") == ["os.html"]
        copy = folder / "_sources" / "os.rst.txt"
        copy.write_text("The numbat, in its source, rebuilt.\n")
        report = batch_run(base, copy)
        assert (report.added, report.updated) == (0, 0) and found(base, "rebuilt") == []


def test_a_batch_names_its_paths(tmp_path):
    (tmp_path / "docs").mkdir()
    watcher = Watcher(tmp_path / "kb.db", say=lambda line: None)
    try:
        watcher.follow([Root("docs", tmp_path / "docs")])
        time.sleep(0.2)  # the watch begins
        saved = tmp_path / "docs" / "a.md"
        aside = tmp_path / "docs" / "a.md.tmp"
        aside.write_text("a")
        os.replace(aside, saved)
        batch = watcher.wait(FOUND_WITHIN_S)
        assert batch is not None
        batch = watcher.join(batch)
        paths = batch.only["docs"]  # the save (its temporary file, perhaps: a deletion)
        assert list(batch.only) == ["docs"] and str(saved) in paths, batch
        assert paths <= {str(saved), str(aside)}, batch
    finally:
        watcher.stop()
    x, y = frozenset({"x"}), frozenset({"y"})  # batches joined: a source read whole stays so
    assert watch.joined({"a": x, "b": None}, {"a": y, "b": y, "c": None}) == {
        "a": x | y,
        "b": None,
        "c": None,
    }


def test_a_page_read_alone_loses_its_site_title_as_the_others_did(tmp_path):
    """The title suffix a site's pages share ("… — Guide") is cut from a page a batch reads
    alone: found from the source's pages as indexed, not from the batch's one page."""
    from conftest import words_only_base

    folder = tmp_path / "docs"
    folder.mkdir()
    page = "<html><head><title>{} — Guide</title></head><body><p>{}</p></body></html>"
    for name in ("intro", "setup", "usage"):
        (folder / f"{name}.html").write_text(page.format(name.title(), f"the {name} page"))
    with words_only_base(tmp_path / "kb.db", folder) as base:
        base.index()
        (folder / "setup.html").write_text(page.format("Setup", "the setup page, a melon"))
        assert batch_run(base, folder / "setup.html").updated == 1
        (answer,) = base.search("melon", mode="keyword").results
        assert answer.citation.title == "Setup"

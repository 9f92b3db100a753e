"""The ``threadrecall`` command: ``demo``, ``import``, ``recall``, ``eval`` and ``bench``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from importlib import resources
from itertools import islice
from pathlib import Path
from typing import Any

from . import __version__
from .errors import ThreadRecallError
from .memory import Memory
from .storage import DuckDBStorage
from .types import Message

__all__ = ["main"]

SAMPLE = "sample_conversation.jsonl"


class CommandError(Exception):
    """A mistake in the command line or its files, reported as one line."""


def read_jsonl(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CommandError(f"line {number}: not JSON ({exc.msg})") from None
            if not isinstance(value, dict):
                raise CommandError(f"line {number}: not a JSON object (one message per line)")
            yield value


def import_messages(memory: Memory, rows: Iterable[dict[str, Any]], *, total: int | None = None,
                    batch: int = 1000, progress: bool = True) -> int:
    """Save messages in batches (one transaction each), with a progress bar."""
    from tqdm import tqdm

    count = 0
    rows = iter(rows)
    with tqdm(total=total, unit="msg", disable=not progress, file=sys.stderr) as bar:
        while chunk := list(islice(rows, batch)):
            count += len(memory.save_messages(chunk))
            bar.update(len(chunk))
    return count


def sample_lines() -> list[str]:
    return resources.files("threadrecall").joinpath("data", SAMPLE).read_text("utf-8").splitlines()


def _line(message: Message) -> str:
    when = message.created_at.strftime("%Y-%m-%d %H:%M")
    return f"  {when}  {message.thread_id:<15} {message.role:<9} {message.text[:70]}"


def _show(title: str, messages: Sequence[Message], extra: str = "") -> None:
    print(f"\n{title}{extra}")
    for m in messages:
        print(_line(m))


def demo(db: Path) -> None:
    """Import the bundled sample conversation into a DuckDB file and recall from it."""
    for stale in db.parent.glob(db.name + "*"):
        stale.unlink()
    embedder = default_embedder()
    memory = Memory(storage=DuckDBStorage(db), embedder=embedder,
                    options={"semantic_recall": {"top_k": 2, "message_range": 1}})
    count = import_messages(memory, read_jsonl(sample_lines()), progress=False)
    threads = memory.list_threads(per_page=False)
    print(f"Stored {count} messages in {threads.total} threads in {db} (embedded with {embedder.model_id})")

    last = memory.recall("trip-planning", resource_id="alice", per_page=4)
    _show("Last 4 messages of trip-planning", last.messages,
          f" (total {last.total}, has_more {last.has_more})")
    page = memory.recall("trip-planning", per_page=4, page=1)
    _show("The page before them (per_page=4, page=1)", page.messages)
    dated = memory.recall("trip-planning", per_page=False, filter={"date_range": {
        "start": "2024-03-04T09:10:00Z", "end": "2024-03-04T09:20:00Z"}})
    _show("Between 09:10 and 09:20", dated.messages)
    tips = memory.recall("laptop-support", per_page=False, filter={"metadata": {"kind": "tip"}})
    _show('Messages with metadata kind == "tip"', tips.messages)
    context = memory.recall("book-club", per_page=0, include=[
        {"id": "trip-planning-06", "with_previous_messages": 1, "with_next_messages": 1}])
    _show("trip-planning-06 with one message either side", context.messages)
    query = "what will we eat, given my partner's diet?"
    similar = memory.recall("laptop-support", resource_id="alice", per_page=0, vector_search_string=query)
    _show(f'Semantic recall across alice\'s threads for "{query}"', similar.messages)
    memory.close()


def default_embedder() -> Any:
    """The offline MiniLM model when its extra is installed, else the hash embedder."""
    from .embedders import HashEmbedder, LocalEmbedder

    try:
        local = LocalEmbedder()
        local.embed(["warm up"])
        return local
    except ThreadRecallError:
        return HashEmbedder()


def _existing_database(path: str) -> Memory:
    """A memory over a database that must already exist (a typo must not create one)."""
    if not Path(path).exists():
        raise CommandError(f"no database at {path} (import messages into it first)")
    return Memory(storage=DuckDBStorage(path))


def _text_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text("utf-8").splitlines()
    except UnicodeDecodeError:
        raise CommandError(f"{path} is not UTF-8 text (expected one JSON message per line)") from None
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None


def _recall(args: argparse.Namespace) -> None:
    flt: dict[str, Any] = {}
    if args.metadata:
        try:
            flt["metadata"] = json.loads(args.metadata)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--metadata is not JSON ({exc.msg}): {args.metadata}") from None
    date_range = {k: v for k, v in (("start", args.start), ("end", args.end)) if v}
    if date_range:
        flt["date_range"] = date_range
    include = [{"id": i, "with_previous_messages": args.context, "with_next_messages": args.context}
               for i in args.include]
    per_page: int | bool | None = False if args.all else args.per_page
    with _existing_database(args.db) as memory:
        if memory.get_thread_by_id(args.thread_id) is None:
            raise CommandError(f"no thread {args.thread_id} in {args.db}")
        result = memory.recall(args.thread_id, resource_id=args.resource_id, per_page=per_page,
                               page=args.page, include=include or None, filter=flt or None)
    json.dump(result.to_dict(), sys.stdout, indent=2, ensure_ascii=False)
    print()


def _import(args: argparse.Namespace) -> None:
    rows = list(read_jsonl(_text_lines(args.file)))  # every line checked before the database opens
    with Memory(storage=DuckDBStorage(args.db)) as memory:
        count = import_messages(memory, rows, total=len(rows), progress=sys.stderr.isatty())
    print(f"imported {count} messages into {args.db}")


def _eval_locomo(args: argparse.Namespace) -> None:
    from .evaluation import locomo

    embedder = None
    if args.model:
        from .embedders import LocalEmbedder

        embedder = LocalEmbedder(args.model)
    report = locomo.run(
        args.path, conversations=args.conversations, modes=args.modes.split(","),
        ks=args.k, ranges=args.message_range,
        form=args.text, embedder=embedder, lexical_weight=args.lexical_weight,
    )
    print(f"LoCoMo evidence recall (%), {len(report['conversations'])} conversations, "
          f"{report['turns']} turns, text form {report['text_form']!r}, {report['embedder']}, "
          f"resource scope\n")
    print(report["markdown"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), "utf-8")
        print(f"\nwrote {args.json}")


class _Parser(argparse.ArgumentParser):
    """Reports a usage mistake as one line (and the exit status 2)."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


def _counts(text: str) -> list[int]:
    """A comma-separated list of whole numbers, e.g. ``5,10,25``."""
    return [_count(part.strip()) for part in text.split(",")]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="threadrecall", description="Conversation memory for AI agents.")
    parser.add_argument("--version", action="version", version=f"threadrecall {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("demo", help="import a sample conversation and show recall")
    p.add_argument("--db", type=Path, default=Path("threadrecall-demo.duckdb"),
                   help="the DuckDB file to (re)create for the demo (default: %(default)s)")
    p.set_defaults(run=lambda a: demo(a.db))

    p = sub.add_parser("import", help="import messages from a JSONL file (one message per line)")
    p.add_argument("file", help="the JSONL file: one message object per line")
    p.add_argument("--db", required=True, help="the DuckDB file to import into (created if missing)")
    p.set_defaults(run=_import)

    p = sub.add_parser("recall", help="recall a thread's messages as JSON")
    p.add_argument("thread_id", help="the thread to recall")
    p.add_argument("--db", required=True, help="an existing DuckDB file")
    p.add_argument("--resource-id", help="the resource that must own the thread")
    p.add_argument("--per-page", type=_count, help="messages per page (default: the last 10)")
    p.add_argument("--all", action="store_true", help="every message (per_page=False)")
    p.add_argument("--page", type=_count, default=0, help="the page, counted from 0 (default: 0)")
    p.add_argument("--start", help="ISO-8601 lower bound of created_at")
    p.add_argument("--end", help="ISO-8601 upper bound of created_at")
    p.add_argument("--metadata", help='JSON object, e.g. \'{"kind": "tip"}\'')
    p.add_argument("--include", action="append", default=[], help="a message id to include (repeatable)")
    p.add_argument("--context", type=_count, default=1, help="neighbours either side of each include")
    p.set_defaults(run=_recall)

    p = sub.add_parser("eval", help="measure retrieval quality on a benchmark")
    bench = p.add_subparsers(dest="benchmark", required=True, parser_class=_Parser)
    p = bench.add_parser("locomo", help="evidence recall@K on LoCoMo (give the path to locomo10.json)")
    p.add_argument("path", help="the locomo10.json file")
    p.add_argument("--conversations", type=_count, help="only the first N conversations")
    p.add_argument("--modes", default="vector,lexical,hybrid", help="comma-separated recall modes")
    p.add_argument("--k", type=_counts, default=[5, 10, 25], help="comma-separated top_k values")
    p.add_argument("--message-range", type=_counts, default=[0, 1],
                   help="comma-separated message_range values")
    p.add_argument("--text", default="speaker", choices=("plain", "speaker", "caption", "speaker+caption"),
                   help="what is indexed per turn")
    p.add_argument("--model", help="a model directory or package for LocalEmbedder (default: MiniLM)")
    p.add_argument("--lexical-weight", type=float, help="hybrid's weight of the BM25 ranking")
    p.add_argument("--json", help="also write the report as JSON to this file")
    p.set_defaults(run=_eval_locomo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; a mistake prints one line to stderr and returns a non-zero status."""
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
        sys.stdout.flush()
    except (ThreadRecallError, CommandError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

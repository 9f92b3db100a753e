"""Evidence recall of ``Memory.recall`` on LoCoMo (Maharana et al., ACL 2024).

LoCoMo holds ten long two-person conversations; each question names the dialogue turns
(``dia_id``) that hold its answer. Every conversation is stored through the public ``Memory``
API — one resource per conversation, one thread per session, one message per turn — and each
question is asked as a resource-scoped semantic recall. A question's score is the fraction of
its evidence turns among the returned messages; scores are averaged per category and overall.

The dataset (CC BY-NC 4.0) is read from a path given by the caller and never shipped.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError
from ..memory import Memory

__all__ = [
    "CATEGORIES",
    "DEFAULT_FORM",
    "TEXT_FORMS",
    "Conversation",
    "Question",
    "Score",
    "evaluate",
    "load",
    "markdown_table",
    "normalise_evidence",
    "parse_session_time",
    "store",
]

# The dataset's category numbers, in the order its authors report them.
CATEGORIES = {4: "single-hop", 1: "multi-hop", 2: "temporal", 3: "open-domain", 5: "adversarial"}
# What is indexed for a turn: its text alone; or after the speaker's name (the name is stored
# as ``metadata["speaker"]``, which ``Message.search_text`` puts first; otherwise it is kept
# as ``metadata["speaker_name"]``); or with the caption of the image it shared; or both.
TEXT_FORMS = ("plain", "speaker", "caption", "speaker+caption")
DEFAULT_FORM = "speaker"
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    caption: str | None


@dataclass(frozen=True)
class Session:
    number: int
    date: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]  # message ids


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    def message_id(self, dia_id: str) -> str:
        return f"{self.sample_id}:{dia_id}"

    def thread_id(self, session: int) -> str:
        return f"{self.sample_id}:session_{session}"


def parse_session_time(text: str) -> datetime:
    """A session's free-text time as UTC.

    >>> parse_session_time("1:56 pm on 8 May, 2023").isoformat()
    '2023-05-08T13:56:00+00:00'
    """
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def normalise_evidence(raw: Iterable[str], known: set[str]) -> list[str]:
    """Evidence ids split, repaired (``D:11:26`` → ``D11:26``, ``D30:05`` → ``D30:5``),
    de-duplicated and restricted to the turns in ``known``.

    >>> normalise_evidence(["D8:6; D9:17", "D:1:2", "D", "D30:05"], {"D8:6", "D9:17", "D1:2"})
    ['D8:6', 'D9:17', 'D1:2']
    """
    out: dict[str, None] = {}
    for item in raw:
        for session, turn in _EVIDENCE.findall(item):
            dia_id = f"D{int(session)}:{int(turn)}"
            if dia_id in known:
                out[dia_id] = None
    return list(out)


def load(path: str | Path) -> list[Conversation]:
    """The conversations of a ``locomo10.json`` file; any other file raises
    ``InvalidArgumentError`` saying what is wrong with it."""
    try:
        samples = json.loads(Path(path).read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgumentError(f"{path} is not a LoCoMo JSON file: {exc}") from None
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read the LoCoMo file {path}: {exc.strerror or exc}") from None
    try:
        if not isinstance(samples, list):
            raise TypeError("it holds no list of conversations")
        return [_conversation(sample) for sample in samples]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        detail = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise InvalidArgumentError(f"{path} is not a LoCoMo file ({detail})") from None


def _conversation(sample: Mapping[str, Any]) -> Conversation:
    conv = sample["conversation"]
    sessions = []
    for key, turns in conv.items():
        match = _SESSION.fullmatch(key)
        if match and isinstance(turns, list) and turns:
            number = int(match.group(1))
            sessions.append(Session(
                number, parse_session_time(conv[f"{key}_date_time"]),
                tuple(Turn(t["dia_id"], t["speaker"], t["text"], t.get("blip_caption")) for t in turns),
            ))
    sessions.sort(key=lambda s: s.number)
    known = {t.dia_id for s in sessions for t in s.turns}
    sid = sample["sample_id"]
    questions = tuple(
        Question(q["question"], int(q["category"]),
                 tuple(f"{sid}:{d}" for d in normalise_evidence(q.get("evidence") or (), known)))
        for q in sample["qa"]
    )
    return Conversation(sid, conv["speaker_a"], conv["speaker_b"], tuple(sessions), questions)


def turn_text(turn: Turn, form: str) -> str:
    """The text stored for a turn in one of ``TEXT_FORMS`` (the speaker goes in metadata)."""
    if "caption" in form and turn.caption:
        return f"{turn.text} [shares an image: {turn.caption}]"
    return turn.text


def store(memory: Memory, conversation: Conversation, form: str = DEFAULT_FORM) -> int:
    """Save a conversation: a thread per session, a message per turn; returns the turn count."""
    roles = {conversation.speaker_a: "user", conversation.speaker_b: "assistant"}
    messages = []
    for session in conversation.sessions:
        thread = conversation.thread_id(session.number)
        memory.create_thread(conversation.sample_id, thread_id=thread,
                             metadata={"session": session.number})
        for index, turn in enumerate(session.turns):
            speaker_key = "speaker" if form.startswith("speaker") else "speaker_name"
            metadata: dict[str, Any] = {speaker_key: turn.speaker, "dia_id": turn.dia_id}
            if turn.caption:
                metadata["image_caption"] = turn.caption
            messages.append({
                "id": conversation.message_id(turn.dia_id),
                "thread_id": thread,
                "resource_id": conversation.sample_id,
                "role": roles.get(turn.speaker, "user"),
                "content": turn_text(turn, form),
                "created_at": session.date + timedelta(seconds=index),
                "metadata": metadata,
            })
    memory.save_messages(messages)
    return len(messages)


@dataclass
class Score:
    """Evidence recall of one configuration (mode, message_range, top_k), summed per category."""

    mode: str
    message_range: int
    top_k: int
    sums: dict[int, float] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    returned: int = 0

    def add(self, category: int, recall: float, returned: int) -> None:
        self.sums[category] = self.sums.get(category, 0.0) + recall
        self.counts[category] = self.counts.get(category, 0) + 1
        self.returned += returned

    @property
    def questions(self) -> int:
        return sum(self.counts.values())

    def recall(self, category: int | None = None) -> float:
        """Mean evidence recall of one category, or of every question when None."""
        if category is None:
            n = self.questions
            return sum(self.sums.values()) / n if n else 0.0
        n = self.counts.get(category, 0)
        return self.sums.get(category, 0.0) / n if n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "message_range": self.message_range,
            "top_k": self.top_k,
            "questions": self.questions,
            "overall": round(self.recall(), 4),
            "per_category": {CATEGORIES[c]: round(self.recall(c), 4) for c in CATEGORIES if c in self.counts},
            "avg_returned": round(self.returned / self.questions, 2) if self.questions else 0.0,
        }


def evaluate(memory: Memory, conversations: Sequence[Conversation], *, modes: Sequence[str] = ("vector",),
             ks: Sequence[int] = (5, 10, 25), ranges: Sequence[int] = (0, 1),
             progress: bool = True, lexical_weight: float | None = None) -> list[Score]:
    """Ask every question with evidence under every (mode, message_range, top_k);
    ``lexical_weight`` is hybrid's (``semantic_recall.lexical_weight``)."""
    from tqdm import tqdm

    scores = {(mode, r, k): Score(mode, r, k) for mode in modes for r in ranges for k in ks}
    asked = [(c, q) for c in conversations for q in c.questions if q.evidence]
    for conversation, question in tqdm(asked, unit="q", disable=not progress, file=sys.stderr):
        thread = conversation.thread_id(conversation.sessions[0].number)
        wanted = set(question.evidence)
        for (mode, message_range, k), score in scores.items():
            result = memory.recall(
                thread, resource_id=conversation.sample_id, per_page=0,
                vector_search_string=question.text,
                thread_config={"semantic_recall": {
                    "top_k": k, "message_range": message_range, "scope": "resource", "mode": mode,
                    "lexical_weight": lexical_weight,
                }},
            )
            found = wanted.intersection(m.id for m in result.messages)
            score.add(question.category, len(found) / len(wanted), len(result.messages))
    return list(scores.values())


def markdown_table(scores: Sequence[Score]) -> str:
    """One row per configuration: recall per category and overall (in %), messages returned."""
    head = ["mode", "message_range", "top_k", *CATEGORIES.values(), "overall", "avg messages"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in scores:
        cells = [s.mode, str(s.message_range), str(s.top_k),
                 *(f"{100 * s.recall(c):.1f}" for c in CATEGORIES), f"**{100 * s.recall():.1f}**",
                 f"{s.returned / max(s.questions, 1):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(path: str | Path, *, conversations: int | None = None, modes: Sequence[str] = ("vector",),
        ks: Sequence[int] = (5, 10, 25), ranges: Sequence[int] = (0, 1), form: str = DEFAULT_FORM,
        embedder: Any = None, progress: bool = True,
        lexical_weight: float | None = None) -> dict[str, Any]:
    """Load, store and evaluate; returns the JSON report (with its markdown table).

    ``embedder`` defaults to ``LocalEmbedder``; none is used when every mode is lexical.
    """
    data = load(path)[:conversations]
    lexical_only = all(mode == "lexical" for mode in modes)
    if embedder is None and not lexical_only:
        from ..embedders import LocalEmbedder

        embedder = LocalEmbedder()
    semantic = {"mode": "lexical"} if embedder is None else True
    memory = Memory(embedder=embedder, options={"last_messages": False, "semantic_recall": semantic})
    started = time.perf_counter()
    turns = sum(store(memory, c, form) for c in data)
    stored = time.perf_counter() - started
    scores = evaluate(memory, data, modes=modes, ks=ks, ranges=ranges, progress=progress,
                      lexical_weight=lexical_weight)
    return {
        "dataset": str(path),
        "conversations": [c.sample_id for c in data],
        "turns": turns,
        "questions": sum(len(c.questions) for c in data),
        "questions_without_evidence": sum(not q.evidence for c in data for q in c.questions),
        "text_form": form,
        "embedder": getattr(embedder, "model_id", type(embedder).__name__) if embedder else "none",
        "store_seconds": round(stored, 1),
        "evaluate_seconds": round(time.perf_counter() - started - stored, 1),
        "results": [s.to_dict() for s in scores],
        "markdown": markdown_table(scores),
    }

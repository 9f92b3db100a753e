"""The LoCoMo evaluation's loading, storing and scoring, on a small made-up file in its format."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from threadrecall import Memory
from threadrecall.cli import main
from threadrecall.evaluation import locomo

SAMPLE = [{
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ana", "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound called Comet."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! How old is Comet?",
             "blip_caption": "a photo of a dog on a sofa", "img_url": ["x"]},
        ],
        "session_2_date_time": "10:04 am on 2 June, 2023",
        "session_2": [
            {"speaker": "Ben", "dia_id": "D2:1", "text": "My pottery class starts on Tuesday."},
            {"speaker": "Ana", "dia_id": "D2:2", "text": "Send me a photo of your first bowl."},
        ],
        "session_3_date_time": "9:00 am on 3 June, 2023",
        "session_3": [],
    },
    "qa": [
        {"question": "Which greyhound did Ana adopt?", "answer": "Comet", "evidence": ["D1:1"], "category": 4},
        {"question": "When does the pottery class start?", "answer": "Tuesday",
         "evidence": ["D2:1; D9:9", "D:1:2"], "category": 2},
        {"question": "What is Ben's favourite colour?", "evidence": [], "category": 3},
    ],
}]


@pytest.fixture
def path(tmp_path):
    file = tmp_path / "locomo.json"
    file.write_text(json.dumps(SAMPLE))
    return file


def test_load_repairs_evidence_and_keeps_sessions_with_turns(path):
    (conv,) = locomo.load(path)
    assert [s.number for s in conv.sessions] == [1, 2]
    assert [q.evidence for q in conv.questions] == [
        ("conv-x:D1:1",), ("conv-x:D2:1", "conv-x:D1:2"), ()]


def test_store_makes_a_thread_per_session_and_a_message_per_turn(path):
    (conv,) = locomo.load(path)
    memory = Memory(options={"semantic_recall": {"mode": "lexical"}})
    assert locomo.store(memory, conv, "speaker+caption") == 4
    threads = memory.list_threads(resource_id="conv-x", per_page=False).threads
    assert sorted(t.id for t in threads) == ["conv-x:session_1", "conv-x:session_2"]
    first, second = memory.recall("conv-x:session_1", per_page=False).messages
    assert first.id == "conv-x:D1:1" and first.role == "user" and second.role == "assistant"
    assert first.created_at == datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
    assert (second.created_at - first.created_at).total_seconds() == 1
    assert second.metadata == {"speaker": "Ben", "dia_id": "D1:2", "image_caption": "a photo of a dog on a sofa"}
    assert second.text == "Lovely! How old is Comet? [shares an image: a photo of a dog on a sofa]"
    assert second.search_text.startswith("Ben: Lovely!")


def test_plain_form_keeps_the_speaker_out_of_the_indexed_text(path):
    (conv,) = locomo.load(path)
    memory = Memory(options={"semantic_recall": {"mode": "lexical"}})
    locomo.store(memory, conv, "plain")
    message = memory.recall("conv-x:session_2", per_page=False).messages[0]
    assert message.metadata["speaker_name"] == "Ben" and message.search_text == message.text


def test_scores_are_evidence_fractions_per_category(path):
    report = locomo.run(path, modes=("lexical",), ks=(1, 3), ranges=(0,), progress=False)
    assert report["questions"] == 3 and report["questions_without_evidence"] == 1
    one, three = report["results"]
    assert one["questions"] == three["questions"] == 2  # the question without evidence is skipped
    assert one["per_category"]["single-hop"] == 1.0  # the greyhound turn ranks first
    # the pottery turn is found; the other evidence turn (D:1:2 repaired) shares no word
    assert three["per_category"]["temporal"] == 0.5
    assert set(one["per_category"]) == {"single-hop", "temporal"}
    assert "| lexical | 0 | 1 |" in report["markdown"]


def test_eval_command_prints_the_table_and_writes_json(path, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["eval", "locomo", str(path), "--modes", "lexical", "--k", "2",
                 "--message-range", "0", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| mode | message_range | top_k |" in printed and "| lexical | 0 | 2 |" in printed
    assert json.loads(out.read_text())["results"][0]["top_k"] == 2

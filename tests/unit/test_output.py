"""A run's output stays within its limit and always storable: a stream keeps its last bytes
(ring buffer), a return value its JSON (or repr) cut at the front, ``ctx.log`` its newest
lines with a count of the dropped ones; NUL, lone surrogates and bytes that are not UTF-8
are replaced, unicode round-trips exactly."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import pytest

from node.handlers.output import RunLog, TailBuffer, compose, fit, result_json

SNOWMAN = "☃"  # three bytes of UTF-8
EMOJI = "😀"  # four


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


# -- fit ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", range(0, 14))
def test_a_cut_keeps_whole_characters_within_the_limit(limit: int) -> None:
    text = f"a{SNOWMAN}b{EMOJI}c{SNOWMAN}"  # 1+3+1+4+1+3 = 13 bytes
    head, head_cut = fit(text, limit, tail=False)
    tail, tail_cut = fit(text, limit, tail=True)
    assert utf8_len(head) <= limit and utf8_len(tail) <= limit
    assert text.startswith(head) and text.endswith(tail)
    assert head_cut == tail_cut == (limit < 13)
    # As much as fits: at most one character (4 bytes) short of the limit.
    assert utf8_len(head) > limit - 4 and utf8_len(tail) > limit - 4


def test_unicode_fits_unchanged() -> None:
    text = f"Grüße, 世界 {EMOJI}\n\ttab"
    assert fit(text, 1000, tail=True) == (text, False)


def test_nul_and_lone_surrogates_are_replaced() -> None:
    assert fit("a\x00b", 100, tail=False) == ("a\ufffdb", False)
    assert fit("x\ud800y", 100, tail=False) == ("x\ufffdy", False)
    # A pair written as two surrogates is the character it stands for.
    assert fit("\ud83d\ude00", 100, tail=False) == (EMOJI, False)


# -- TailBuffer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [1, 7, 100, 4096])
def test_the_ring_buffer_keeps_the_last_bytes_written(capacity: int) -> None:
    rng = random.Random(capacity)
    buffer = TailBuffer(capacity)
    everything = bytearray()
    for _ in range(300):
        chunk = rng.randbytes(rng.choice([0, 1, 3, capacity - 1, capacity, capacity + 5, 999]))
        buffer.write(chunk)
        everything += chunk
        assert buffer.written == len(everything)
        assert bytes(buffer._data) == bytes(everything[-capacity:])
        assert len(buffer._data) <= capacity
    assert buffer.dropped == (len(everything) > capacity)


def test_nothing_written_is_no_text() -> None:
    assert TailBuffer(10).text(10) == (None, False)


def test_a_tail_that_starts_inside_a_character_drops_the_fragment() -> None:
    buffer = TailBuffer(5)
    buffer.write(f"{SNOWMAN}{SNOWMAN}".encode())  # six bytes: the first is lost
    assert buffer.text(5) == (SNOWMAN, True)  # no U+FFFD for the two orphan bytes


def test_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    buffer = TailBuffer(100)
    buffer.write(b"\xff\xfe\x00ok\n")
    assert buffer.text(100) == ("\ufffd\ufffd\ufffdok\n", False)


def test_replacement_characters_still_fit_the_limit() -> None:
    buffer = TailBuffer(30)
    buffer.write(b"\xff" * 30)  # thirty invalid bytes, thirty 3-byte U+FFFD
    text, cut = buffer.text(30)
    assert text == "\ufffd" * 10 and cut


# -- RunLog --------------------------------------------------------------------------------------


def test_the_log_keeps_the_newest_lines_and_counts_the_dropped() -> None:
    log = RunLog(20)
    for i in range(10):
        log.add(f"line {i}")  # six bytes each: three fit
    lines, cut = log.lines()
    assert lines == ["[7 earlier lines dropped]", "line 7", "line 8", "line 9"]
    assert cut


def test_a_log_within_the_limit_is_kept_whole() -> None:
    log = RunLog(1000)
    assert log.lines() == (None, False)
    log.add(f"über {EMOJI}")
    log.add(42)  # type: ignore[arg-type]  # anything is written as its str()
    assert log.lines() == ([f"über {EMOJI}", "42"], False)


def test_a_line_longer_than_the_limit_is_cut() -> None:
    log = RunLog(8)
    log.add("0123456789")
    assert log.lines() == (["01234567"], True)


def test_a_limit_of_zero_keeps_no_log() -> None:
    log = RunLog(0)
    log.add("x")
    assert log.lines() == (None, False)


def test_the_log_is_safe_from_many_threads() -> None:
    log = RunLog(1000)
    start = threading.Barrier(8)

    def write(n: int) -> None:
        start.wait()
        for i in range(2000):
            log.add(f"{n}:{i:04d}")  # six bytes each

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines, cut = log.lines()
    assert lines is not None and cut
    note, kept = lines[0], lines[1:]
    assert len(kept) == 1000 // 6
    assert note == f"[{8 * 2000 - len(kept)} earlier lines dropped]"
    for n in range(8):  # each thread's lines in its own order
        mine = [line for line in kept if line.startswith(f"{n}:")]
        assert mine == sorted(mine)


# -- result_json ---------------------------------------------------------------------------------


def stored(value: Any, limit: int = 1000) -> tuple[Any, bool]:
    text, cut = result_json(value, limit)
    kept = json.loads(text)
    # A JSON value within the limit, or a string (repr, cut JSON) within it once decoded.
    assert utf8_len(text) <= limit or utf8_len(kept) <= limit
    return kept, cut


class Thing:
    def __repr__(self) -> str:
        return "Thing(7)"


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no")


def test_json_values_are_kept_as_they_are() -> None:
    value = {"rows": 3, "names": ["Zoë", "世界", EMOJI], "ok": True, "ratio": 0.5, "none": None}
    assert stored(value) == (value, False)
    assert stored(0) == (0, False)
    assert stored("") == ("", False)
    assert stored((1, 2)) == ([1, 2], False)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Thing(), "Thing(7)"),
        ({1, 2}, "{1, 2}"),
        (float("nan"), "nan"),
        ({"when": Thing()}, "{'when': Thing(7)}"),
        (BadRepr(), "<BadRepr object: repr failed with RuntimeError>"),
    ],
)
def test_anything_else_is_kept_as_its_repr(value: Any, expected: str) -> None:
    assert stored(value) == (expected, False)


def test_a_cycle_is_kept_as_its_repr() -> None:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    assert stored(cycle) == ("[1, [...]]", False)


def test_a_large_result_keeps_the_start_of_its_json_as_a_string() -> None:
    value = {"items": list(range(1000))}
    kept, cut = stored(value, 50)
    assert cut
    assert kept == json.dumps(value)[:50]


def test_a_long_repr_is_cut() -> None:
    kept, cut = stored(set(range(1000)), 20)
    assert cut and kept == repr(set(range(1000)))[:20]


def test_nul_and_lone_surrogates_in_a_result_are_replaced() -> None:
    assert stored({"a\x00": ["x\ud800", "\x00"]}) == ({"a\ufffd": ["x\ufffd", "\ufffd"]}, False)


def test_a_literal_backslash_u0000_is_kept() -> None:
    assert stored("\\u0000") == ("\\u0000", False)


# -- compose -------------------------------------------------------------------------------------


def test_a_run_that_produced_nothing_has_no_output() -> None:
    assert compose(stdout=TailBuffer(10), stderr=TailBuffer(10), log=RunLog(10), limit=10) is None
    assert compose(result=None, limit=10) is None


def test_a_limit_of_zero_keeps_no_output() -> None:
    out = TailBuffer(10)
    out.write(b"hi")
    assert compose(stdout=out, result={"a": 1}, limit=0) is None


def test_the_output_object_has_every_part() -> None:
    out, err = TailBuffer(12), TailBuffer(100)
    out.write(b"0123456789" * 2)
    err.write("a warning: ☃\n".encode())
    log = RunLog(12)
    log.add("started")
    text = compose(stdout=out, stderr=err, result=[1, "two"], log=log, limit=12)
    assert text is not None
    # err's own buffer is larger than the limit: the stored part is cut to it.
    assert json.loads(text) == {
        "stdout": "890123456789",
        "stderr": "arning: ☃\n",
        "result": [1, "two"],
        "log": ["started"],
        "truncated": ["stdout", "stderr"],
    }


def test_output_text_never_holds_what_jsonb_refuses() -> None:
    out = TailBuffer(100)
    out.write(b"a\x00b")
    log = RunLog(100)
    log.add("\x00\ud800")
    text = compose(stdout=out, result={"\x00": "\ud800"}, log=log, limit=100)
    assert text is not None
    assert "\\u0000" not in text
    text.encode("utf-8")  # no lone surrogate

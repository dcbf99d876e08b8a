"""How the documentation's blocks of output are found and compared (tests/helpers/examples.py):
which blocks need a marker, text matched with placeholders, JSON compared by shape."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.examples import json_differs, matches, read_page

PAGE = """\
Commands only:

```sh
pulse jobs list
```

A diagram:

```text
a -> b
```

<!-- output: answer -->
```json
{"status": "recorded", "slot": "2026-03-01T01:30:00+00:00"}
```

```json
{"unmarked": true}
```

```
unmarked output
```

<!-- example: not run: needs a node -->
```
shown, not run
```

```console
$ pulse status
members: 0 alive
```
"""


def test_untagged_and_json_blocks_and_prompts_with_output_need_a_marker(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    path.write_text(PAGE, encoding="utf-8")
    page = read_page(path)
    lines = PAGE.splitlines()
    assert [lines[n - 1] for n in page.unmarked] == ["```json", "```", "```console"]
    assert page.outputs == {
        "answer": ['{"status": "recorded", "slot": "2026-03-01T01:30:00+00:00"}']
    }
    assert page.not_run == [
        (len(PAGE.split("needs a node -->")[0].splitlines()) + 1, "needs a node")
    ]


def test_numbers_match_any_number_only_when_asked() -> None:
    shown = ["sigkill        n3        +14.3s  1.2s  43", "...", "RESULT: PASS"]
    printed = ["sigkill  n1  +3.0s  10.25s  7", "other", "lines", "RESULT: PASS"]
    assert matches(shown, printed, numbers=True)
    assert not matches(shown, printed)
    assert not matches(shown, ["sigstop  n1  +3.0s  10.25s  7", "RESULT: PASS"], numbers=True)
    assert not matches(shown, [*printed[:-1], "RESULT: FAIL"], numbers=True)


def test_json_is_compared_by_keys_types_nulls_and_the_forms_of_ids_and_instants() -> None:
    shown = {
        "id": "4b6f2a1e-93c5-4d0b-8e7a-5f1c0d9b2a64",
        "slot": "2026-12-01T02:00:00+00:00",
        "attempt": 3,
        "error": "RuntimeError: upstream 503",
        "stdout": None,
        "log": ["a line"],
    }
    sent = {
        "id": "0e0c1f62-5d1b-4a53-9b7e-2c4d6a8f9b10",
        "slot": "2026-01-01T00:00:10+00:00",
        "attempt": 1,
        "error": "boom",
        "stdout": None,
        "log": ["one", "two"],
    }
    assert json_differs(shown, sent) == []
    assert json_differs(shown, {**sent, "zone": "a"}) == ["$: key 'zone' not shown"]
    assert json_differs({**shown, "...": "..."}, {**sent, "zone": "a"}) == []
    assert json_differs(shown, {k: v for k, v in sent.items() if k != "log"}) == ["$: no key 'log'"]
    assert json_differs(shown, {**sent, "slot": "soon"}) == [
        "$.slot: 'soon' has not the form of '2026-12-01T02:00:00+00:00'"
    ]
    assert json_differs(shown, {**sent, "stdout": "hi"}) == ["$.stdout: 'hi', the page shows None"]
    assert json_differs(shown, {**sent, "attempt": "1"}) == ["$.attempt: '1', the page shows 3"]
    assert json_differs(shown, {**sent, "log": [1]}) == ["$.log[0]: 1, the page shows 'a line'"]

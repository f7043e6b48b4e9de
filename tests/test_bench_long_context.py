"""scripts/bench_long_context.py: how a held-out answer's context is buried among other passages (the answer's
own context stays whole, the length is reached, the draw is seeded), and bad arguments exit 2 naming the flag.
The measurement itself needs CV fold models and the data; its figures are in docs/inference.md."""

from __future__ import annotations

import random

import pytest
from script_loader import load_script


def _script():
    return load_script("bench_long_context")


class WordTokenizer:
    """One token per whitespace-separated word (the script only counts tokens)."""

    class _Enc:
        def __init__(self, text):
            self.ids = text.split()

    def encode(self, text):
        return self._Enc(text)


CONTEXT = "The Eiffel Tower in Paris was built from 1887 to 1889."
OTHERS = [f"Passage {i} is about something else entirely, word word word." for i in range(20)]


def test_padded_context_keeps_the_context_whole_and_reaches_the_length():
    mod = _script()
    out = mod.padded_context(CONTEXT, OTHERS, WordTokenizer(), 50, random.Random(1))
    parts = out.split("\n\n")
    assert CONTEXT in parts  # untouched, as one passage: the gold spans of the answer stay right
    assert len(out.split()) >= 50
    assert all(p == CONTEXT or p in OTHERS for p in parts)
    # no more passages than the length needs: 11 + 4 x 10 words >= 50, 11 + 3 x 10 < 50
    assert len(parts) == 5


def test_padded_context_is_seeded_and_places_the_context_anywhere():
    mod = _script()
    tok = WordTokenizer()
    first = mod.padded_context(CONTEXT, OTHERS, tok, 60, random.Random(7))
    assert first == mod.padded_context(CONTEXT, OTHERS, tok, 60, random.Random(7))
    slots = {mod.padded_context(CONTEXT, OTHERS, tok, 60, random.Random(s)).split("\n\n").index(CONTEXT)
             for s in range(30)}
    assert len(slots) > 2 and 0 in slots


def test_length_zero_is_the_original_context():
    mod = _script()
    assert mod.padded_context(CONTEXT, OTHERS, WordTokenizer(), 0, random.Random(0)) == CONTEXT
    # the context itself is never used as its own distractor
    assert mod.padded_context(CONTEXT, [CONTEXT], WordTokenizer(), 500, random.Random(0)) == CONTEXT


@pytest.mark.parametrize("flag, value", [("--lengths", "0,2k"), ("--max-windows", "four")])
def test_bad_lists_exit_2_naming_the_flag(tmp_path, capsys, flag, value):
    mod = _script()
    with pytest.raises(SystemExit) as exc:
        mod.main(["--cv-dir", str(tmp_path), "--config", "x.yaml", "--out", str(tmp_path / "o"), flag, value])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


def test_missing_fold_models_exit_2_naming_the_dir(tmp_path, capsys):
    mod = _script()
    with pytest.raises(SystemExit) as exc:
        mod.main(["--cv-dir", str(tmp_path / "none"), "--config", "x.yaml", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert "none" in capsys.readouterr().err

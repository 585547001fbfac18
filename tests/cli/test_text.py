"""``zwarm.text``: what an agent or a user wrote can never drive the terminal."""

from __future__ import annotations

import pytest

from zwarm.text import ByteCleaner, brief, cells, clean, clip, cut, elide, oneline, pad, visible

pytestmark = pytest.mark.unit

NASTY = [
    ("red \x1b[31mRED\x1b[0m task", "red RED task"),  # SGR colours
    ("a\x1b]0;new title\x07b", "ab"),  # OSC: window title, BEL-terminated
    ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),  # OSC 8 hyperlink, ST-terminated
    ("x\x1b[2J\x1b[Hy", "xy"),  # clear screen, cursor home
    ("x\x9b31my", "xy"),  # 8-bit CSI
    ("\x1bPqsixel\x1b\\after", "after"),  # DCS string
    ("lone\x1b", "lone"),
    ("esc\x1bcreset", "escreset"),  # RIS (full reset)
    ("del\x7fx nul\x00x bell\x07x", "delx nulx bellx"),
    ("bidi \u202eevil\u202c \u2066iso\u2069", "bidi evil iso"),
]


@pytest.mark.parametrize(("raw", "want"), NASTY)
def test_clean_removes_escape_sequences_and_controls(raw: str, want: str) -> None:
    assert clean(raw) == want
    assert oneline(raw) == want
    assert all(c.isprintable() for c in clean(raw))


def test_newlines_and_tabs_kept_only_when_asked() -> None:
    text = "line 1\r\n\tline 2\nline 3"
    assert clean(text) == "line 1\n\tline 2\nline 3"
    assert clean(text, newlines=False) == "line 1  line 2 line 3"
    assert oneline(text) == "line 1 line 2 line 3"
    assert clean("over\rwrite") == "overwrite"  # a carriage return would overwrite the line
    assert oneline("over\rwrite") == "over write"


def test_visible_shows_what_clean_would_remove() -> None:
    assert (
        visible("a\x1b[31mb\x9bc\u202ed\te\x00") == "a\\u001b[31mb\\u009bc\\u202ed\\u0009e\\u0000"
    )
    assert visible("plain ünï 中") == "plain ünï 中"


def test_plain_text_is_untouched() -> None:
    for s in ("plain", "ünïcødé 中文 🎉", ""):
        assert clean(s) is s or clean(s) == s


def test_widths_are_terminal_cells() -> None:
    assert cells("abc") == 3
    assert cells("中文") == 4
    assert cells("e\u0301") == 1  # a combining accent takes no cell
    assert cut("中文字abc", 4) == "中…"
    assert cut("abcdef", 4) == "abc…"
    assert cut("abc", 4) == "abc"
    assert cells(cut("中文字中文字", 5)) <= 5
    assert pad("中", 4) == "中  "
    assert oneline("x" * 100, 10) == "x" * 9 + "…"


def test_byte_cleaner_handles_sequences_and_utf8_split_across_chunks() -> None:
    b = ByteCleaner()
    out = b.feed(b'{"a":"x\x1b[') + b.feed(b"31mred\xe4") + b.feed(b'\xb8\xad"}\n', final=True)
    assert out == '{"a":"xred中"}\n'.encode()
    b = ByteCleaner()
    assert b.feed(b"\x1b") + b.feed(b"", final=True) == b""


def test_clip_bounds_characters_not_cells() -> None:
    """A stored or sent bound (meta.json's error, a step served to a browser): characters."""
    assert clip("abc", 3) == "abc"
    assert clip("abcdef", 4) == "abc…" and len(clip("x" * 9000, 4000)) == 4000
    assert clip("中文字中文字", 4) == "中文字…"  # 4 characters, 7 cells: not ``cut``
    assert clip("abc", 0) == "…" and clip("", 0) == ""


def test_elide_keeps_head_and_tail_and_says_the_cut() -> None:
    """What a model reads: it knows text is missing, and how much."""
    text = "".join(chr(ord("a") + i % 26) for i in range(100))
    assert elide(text, 100) == text
    assert elide(text, 10) == f"{text[:5]} [... 90 chars cut ...] {text[-5:]}"
    assert elide(text, 11) == f"{text[:5]} [... 89 chars cut ...] {text[-6:]}"
    assert elide(text, 10, head=10) == f"{text[:10]} [... 90 chars cut ...]"
    assert elide(text, 9, head=6, sep="\n") == f"{text[:6]}\n[... 91 chars cut ...]\n{text[-3:]}"
    assert elide(text, 0) == " [... 100 chars cut ...]"


def test_brief_says_how_many_lines_and_chars_were_left_out() -> None:
    """A long message or output in the terminal (``zwarm trajectory`` without ``--full``)."""
    assert brief("a\nb", 2, 10) == "a\nb"
    assert brief("a\nb\nc\nd", 2, 100) == "a\nb\n… (2 more lines)"
    assert brief("x" * 30, 5, 10) == "x" * 10 + "… (20 more chars)"


def test_serve_cuts_a_steps_text_to_the_documented_4000_characters() -> None:
    """docs/serve.md: a trajectory's long texts are cut to 4,000 characters (they were 4,001:
    4,000 and the …); ``truncated`` names the fields cut."""
    from zwarm.serve.app import CUT, _cut

    step = {"kind": "command", "output": "x" * 9000, "command": "y" * 10}
    _cut(step)
    assert CUT == 4000 and len(step["output"]) == CUT and step["output"].endswith("…")
    assert step["command"] == "y" * 10 and step["truncated"] == ["output"]

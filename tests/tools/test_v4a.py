"""The V4A applier: documented diffs, clear refusals, and before→after round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bubu.errors import ToolError
from bubu.tools.v4a import DiffError, Operation, apply_diff, make_diff, parse_patch
from hypo import examples

SOURCE = """def greet():
    print("Hi")


def main():
    greet()
    return 0
"""


def test_a_documented_update_applies_after_its_anchor() -> None:
    diff = '@@ def greet():\n-    print("Hi")\n+    print("Hello, world!")\n'
    assert apply_diff(SOURCE, diff) == SOURCE.replace('"Hi"', '"Hello, world!"')


def test_context_lines_place_the_change_and_several_sections_apply_in_order() -> None:
    diff = (
        "@@\n"
        " def greet():\n"
        '-    print("Hi")\n'
        '+    print("Hey")\n'
        "@@ def main():\n"
        "     greet()\n"
        "+    greet()\n"
        "     return 0\n"
    )
    assert apply_diff(SOURCE, diff) == (
        'def greet():\n    print("Hey")\n\n\ndef main():\n    greet()\n    greet()\n    return 0\n'
    )


def test_matching_forgives_trailing_whitespace_then_indentation() -> None:
    text = "a = 1   \n    b = 2\nc = 3\n"
    assert apply_diff(text, "@@\n a = 1\n-b = 2\n+b = 20\n") == "a = 1   \nb = 20\nc = 3\n"


def test_end_of_file_places_a_section_at_the_end() -> None:
    text = "x\ny\nx\ny\n"
    assert apply_diff(text, "@@\n x\n-y\n+z\n*** End of File\n") == "x\ny\nx\nz\n"


def test_an_empty_line_in_a_diff_is_an_empty_context_line() -> None:
    text = "a\n\nb\n"
    assert apply_diff(text, "@@\n a\n\n-b\n+c\n") == "a\n\nc\n"


def test_a_unified_hunk_header_is_read_as_a_bare_section() -> None:
    assert apply_diff("a\nb\n", "@@ -1,2 +1,2 @@\n a\n-b\n+c\n") == "a\nc\n"


def test_a_file_without_a_final_newline_keeps_it_so() -> None:
    assert apply_diff("a\nb", "@@\n a\n-b\n+c\n") == "a\nc"


def test_a_created_file_is_its_plus_lines() -> None:
    assert apply_diff("", "+line one\n+\n+line three\n", create=True) == "line one\n\nline three\n"
    assert apply_diff("", "", create=True) == ""


def test_a_create_diff_with_a_line_not_added_is_refused() -> None:
    with pytest.raises(DiffError, match=r"line 2 .* does not start with '\+'"):
        apply_diff("", "+ok\n oops\n", create=True)


@pytest.mark.parametrize(
    ("diff", "says"),
    [
        ("@@\n greet()\n-nothing like this\n+x\n", "does not match the file"),
        ("@@ def missing():\n-    greet()\n+    pass\n", "'def missing\\(\\):', which is not"),
        ("@@\n def greet():\n", "changes nothing"),
        ("@@\n?what\n", "starts with neither"),
    ],
)
def test_a_diff_that_does_not_apply_says_why(diff: str, says: str) -> None:
    with pytest.raises(DiffError, match=says):
        apply_diff(SOURCE, diff)


def test_a_diff_error_is_a_tool_error_the_model_sees() -> None:
    assert issubclass(DiffError, ToolError)


def test_the_whole_patch_form_splits_into_file_operations() -> None:
    patch = (
        "*** Begin Patch\n"
        "*** Add File: hello.txt\n"
        "+Hello world\n"
        "*** Update File: src/app.py\n"
        "*** Move to: src/main.py\n"
        "@@ def greet():\n"
        '-print("Hi")\n'
        '+print("Hello, world!")\n'
        "*** Delete File: obsolete.txt\n"
        "*** End Patch\n"
    )
    assert parse_patch(patch) == [
        Operation(kind="create_file", path="hello.txt", diff="+Hello world\n"),
        Operation(
            kind="update_file",
            path="src/app.py",
            diff='@@ def greet():\n-print("Hi")\n+print("Hello, world!")\n',
            move_to="src/main.py",
        ),
        Operation(kind="delete_file", path="obsolete.txt"),
    ]


@pytest.mark.parametrize(
    ("patch", "says"),
    [
        ("*** Update File: a\n*** End Patch\n", "starts with"),
        ("*** Begin Patch\n*** Add File: a\n+x\n", "ends with"),
        ("*** Begin Patch\n+x\n*** End Patch\n", "before any"),
        ("*** Begin Patch\n*** Delete File: a\n+x\n*** End Patch\n", "takes none"),
        ("*** Begin Patch\n*** End Patch\n", "no file operation"),
    ],
)
def test_a_malformed_patch_says_why(patch: str, says: str) -> None:
    with pytest.raises(DiffError, match=says):
        parse_patch(patch)


_LINES = st.lists(
    st.sampled_from(["a", "b", "c", "", "  d", "def f():", "    return 1"]), max_size=12
)


def _text(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


@settings(max_examples=examples(300), deadline=None)
@given(before=_LINES, after=_LINES)
def test_a_diff_made_from_before_to_after_gives_after(before: list[str], after: list[str]) -> None:
    diff = make_diff(_text(before), _text(after))
    if before == after:
        assert diff == ""
        return
    assert apply_diff(_text(before), diff) == _text(after)


@settings(max_examples=examples(200), deadline=None)
@given(before=_LINES, after=_LINES, line=st.text(alphabet="xyz", min_size=1, max_size=5))
def test_a_diff_whose_removed_line_is_absent_never_applies(
    before: list[str], after: list[str], line: str
) -> None:
    # "x…" lines are never in the file, so a section that removes one cannot match.
    diff = make_diff(_text(before), _text(after)) + f"@@\n-{line}\n+new\n"
    with pytest.raises(DiffError):
        apply_diff(_text(before), diff)

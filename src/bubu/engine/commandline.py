"""A shell command line taken apart by a real parser, for the allow-list.

`parse` reads a command line with the bash grammar of tree-sitter and returns its simple
commands (each as written, so a pattern can be matched against it) and the files its
redirections write. Anything the allow-list cannot judge safely is a `refusal`, and then no
pattern approves the line (it asks):

- command and process substitution, arithmetic, functions, ``if``/``for``/``while``/``case``,
  ``[[ … ]]``, ``export``/``declare``, ``$"…"``: things that run code the list of simple
  commands does not show, or that are rare enough in an allow-listed command to ask;
- a here-document whose body would expand (an unquoted delimiter and a ``$``, a backtick or a
  backslash in the body): tree-sitter does not parse backticks there, bash runs them;
- any parse error, and characters on which the parser and bash disagree about where a word ends
  (a carriage return, a vertical tab, a form feed or another control character, non-ASCII
  spaces, invisible format characters): ``pytest\\r#; rm x`` is one command and a comment to
  tree-sitter, and two commands to bash.

The module is pure: it reads no file and runs nothing.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from itertools import pairwise

import tree_sitter
import tree_sitter_bash

OUTPUT_OPS = frozenset({">", ">>", ">|", "&>", "&>>"})
"""Redirection operators that write the file they name (``>&`` does too, unless it names a fd)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Write:
    """An output redirection: the file it writes, or None when that is not a plain path."""

    source: str
    path: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleCommand:
    """One simple command: its words as written (joined by one space) and its literal name.

    `name` is the program after quote removal, or None when the line only assigns variables or
    the name is not a plain word (an expansion, a glob); `assigns` is true when variable
    assignments come before the name (``FOO=1 pytest``).
    """

    text: str
    name: str | None
    assigns: bool
    argv: tuple[str, ...] = ()
    """The program and its arguments after quote removal (empty when a word is not plain)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandLine:
    """A parsed command line; when `refusal` is set, no pattern may approve it."""

    commands: tuple[SimpleCommand, ...] = ()
    writes: tuple[Write, ...] = ()
    refusal: str | None = None
    expands: str | None = None
    """The first word the shell would expand (``$HOME``, ``*.py``, ``~/x``), as written."""


class _Refused(Exception):
    pass


@cache
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def parse(command: str) -> CommandLine:
    """Take a command line apart into simple commands and written files, or say why not."""
    odd = _odd_character(command)
    if odd is not None:
        return CommandLine(refusal=f"it contains {odd}, which shells and parsers read differently")
    src = command.encode("utf-8", "surrogateescape")
    tree = _parser().parse(src)
    walk = _Walk(src)
    try:
        walk.node(tree.root_node)
    except _Refused as e:
        return CommandLine(refusal=str(e))
    except RecursionError:
        return CommandLine(refusal="it is nested too deeply")
    return CommandLine(
        commands=tuple(walk.commands),
        writes=tuple(walk.writes),
        expands=walk.expands[0] if walk.expands else None,
    )


def _odd_character(command: str) -> str | None:
    if "\\\t" in command:
        return "an escaped tab"
    for ch in command:
        if ch in "\n\t":
            continue
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cf", "Zl", "Zp") or (ch.isspace() and ch != " "):
            return f"the invisible character U+{ord(ch):04X}"
        if cat == "Cs":
            return "a lone surrogate"
    return None


# Node types that only group simple commands; their tokens are the list and pipe operators.
_GROUPS = frozenset({"program", "list", "pipeline", "subshell", "negated_command"})
_GROUP_TOKENS = frozenset({";", "&", "&&", "||", "|", "|&", "(", ")", "!", "{", "}", "\n"})
_WORDS = frozenset(
    {
        "word",
        "string",
        "string_content",
        "raw_string",
        "ansi_c_string",
        "concatenation",
        "number",
        "simple_expansion",
        "expansion",
        "variable_name",
        "special_variable_name",
        "brace_expression",
    }
)
_BLANK = (b" ", b"\t", b"\n")
_METACHARACTERS = (b";", b"&", b"|", b"(", b")", b"<", b">")
_BARE = frozenset(
    {"word", "number", "simple_expansion", "expansion", "variable_name", "brace_expression"}
)
"""Word kinds in which bash never sees a line break (outside quotes a newline ends a word)."""
_UNESCAPED_BLANK = re.compile(rb"(?<!\\)[ \t]")
_WORD_TOKENS = frozenset({'"', "$", "${", "}", "{", "..", "="})
_WHY = {
    "command_substitution": "it runs a command substitution",
    "process_substitution": "it runs a process substitution",
    "arithmetic_expansion": "it uses arithmetic expansion, which can run code",
    "function_definition": "it defines a shell function",
    "if_statement": "it uses `if`",
    "while_statement": "it uses a loop",
    "for_statement": "it uses a loop",
    "c_style_for_statement": "it uses a loop",
    "case_statement": "it uses `case`",
    "test_command": "it uses a `[[ … ]]` test, whose arithmetic can run code",
    "declaration_command": "it uses export/declare/local/readonly",
    "unset_command": "it uses unset",
    "translated_string": 'it uses $"…" quoting',
}


class _Walk:
    """A depth-first walk that collects simple commands and writes, refusing anything unknown."""

    def __init__(self, src: bytes) -> None:
        self.src = src
        self.commands: list[SimpleCommand] = []
        self.writes: list[Write] = []
        self.expands: list[str] = []

    def plain(self, n: tree_sitter.Node, *, assignment: bool = False) -> str | None:
        """The word's literal value; a word the shell would expand is noted in `expands`."""
        value = literal(self.src, n, assignment=assignment)
        if value is None:
            self.expands.append(self.text(n))
        return value

    def text(self, n: tree_sitter.Node) -> str:
        return self.src[n.start_byte : n.end_byte].decode("utf-8", "surrogateescape")

    def refuse(self, n: tree_sitter.Node, why: str) -> _Refused:
        shown = self.text(n)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return _Refused(f"{why} (`{shown}`)")

    def node(self, n: tree_sitter.Node) -> None:
        """Walk a statement-level node."""
        if n.is_error or n.is_missing or n.type == "ERROR":
            raise self.refuse(n, "the shell parser cannot read it")
        t = n.type
        if t == "redirected_statement":
            kids = n.children
            for a, b in pairwise(kids):
                self.blanks(a.end_byte, b.start_byte, n)
            self.children(n, _GROUP_TOKENS)
        elif t in _GROUPS:
            self.children(n, _GROUP_TOKENS)
        elif t == "compound_statement":
            if not n.children or n.children[0].type != "{":
                raise self.refuse(n, "it uses arithmetic `(( … ))`, which can run code")
            # `{}` or `{x` is a word to bash, not a group.
            if not n.named_children or self.src[n.start_byte + 1 : n.start_byte + 2] not in _BLANK:
                raise self.refuse(n, "the parser and bash may split it differently")
            self.children(n, _GROUP_TOKENS)
        elif t == "command":
            self.command(n)
        elif t in ("variable_assignment", "variable_assignments"):
            self.word(n)
            self.commands.append(SimpleCommand(text=self.text(n), name=None, assigns=True))
        elif t == "file_redirect":
            self.file_redirect(n)
        elif t == "heredoc_redirect":
            self.heredoc(n)
        elif t == "herestring_redirect":
            self.children(n, frozenset({"<<<"}), words=True)
            for c in n.named_children:
                self.plain(c)
        elif t == "comment":
            # bash starts a comment only where a word could start; `{#x` is a word to bash.
            before = self.src[n.start_byte - 1 : n.start_byte] if n.start_byte else b" "
            # …nor after an escaped blank (`a\\ #x` is one word).
            joined = self.src[max(n.start_byte - 2, 0) : n.start_byte] in (b"\\\n", b"\\ ", b"\\\t")
            if joined or (before not in _BLANK and before not in _METACHARACTERS):
                raise self.refuse(n, "the parser and bash may split it differently")
        elif t == "test_command" and n.children and n.children[0].type == "[":
            if b"\n" in self.src[n.start_byte : n.end_byte]:
                raise self.refuse(n, "the parser and bash may split it differently")
            self.scan(n)  # `[ … ]` is the command `[`; `[[ … ]]` is refused below
            words = [self.plain(w) for w in _test_words(n)]
            argv = ("[", *(w for w in words if w is not None), "]")
            self.commands.append(
                SimpleCommand(
                    text=self.text(n),
                    name="[",
                    assigns=False,
                    argv=argv if None not in words else (),
                )
            )
        elif t in _WORDS:
            self.word(n)  # e.g. the words of `<<<` or after `&>`
        else:
            raise self.refuse(
                n, _WHY.get(t, f"it uses a shell construct ({t}) the allow-list does not judge")
            )

    def scan(self, n: tree_sitter.Node) -> None:
        """Refuse if anything below `n` is a substitution, an expansion or a parse error."""
        for c in n.children:
            if c.is_error or c.is_missing or c.type == "ERROR":
                raise self.refuse(c, "the shell parser cannot read it")
            if c.type in _WHY or c.type == "expansion":
                self.word(c) if c.type == "expansion" else self.node(c)
            self.scan(c)

    def children(self, n: tree_sitter.Node, tokens: frozenset[str], *, words: bool = False) -> None:
        for c in n.children:
            if c.is_named:
                self.word(c) if words and c.type in _WORDS else self.node(c)
            elif c.type not in tokens:
                raise self.refuse(n, f"it uses `{c.type}`, which the allow-list does not judge")

    def blanks(self, start: int, end: int, n: tree_sitter.Node) -> None:
        """Between two words of one command bash allows only blanks and backslash-newlines;
        anything else means tree-sitter and bash may not agree where the command ends."""
        gap = self.src[start:end].replace(b"\\\n", b"")
        if gap.strip(b" \t"):
            raise self.refuse(n, "the parser and bash may split it differently")

    def command(self, n: tree_sitter.Node) -> None:
        kids = n.children
        for a, b in pairwise(kids):
            self.blanks(a.end_byte, b.start_byte, n)
            if a.end_byte == b.start_byte and b.type in _WORDS and a.type != "variable_assignment":
                # Two words with nothing between are one word to bash (`x}\*`), two to the parser.
                raise self.refuse(n, "the parser and bash may split it differently")
        parts: list[str] = []
        argv: list[str | None] = []
        name: str | None = None
        assigns = False
        for c in n.children:
            if not c.is_named:
                raise self.refuse(n, f"it uses `{c.type}` in an unusual place")
            if c.type == "variable_assignment":
                assigns = assigns or name is None
                self.word(c)
                value = c.child_by_field_name("value")
                if value is not None:
                    self.plain(value, assignment=True)
                parts.append(self.text(c))
            elif c.type == "command_name":
                if len(c.named_children) != 1:
                    raise self.refuse(c, "its command name is unusual")
                inner = c.named_children[0]
                self.word(inner)
                name = self.plain(inner)
                argv.append(name)
                parts.append(self.text(c))
            elif c.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                self.node(c)
            elif c.type in _WORDS:
                self.word(c)
                argv.append(self.plain(c))
                parts.append(self.text(c))
            else:
                self.node(c)  # refuses with the construct's reason
        plain = tuple(a for a in argv if a is not None)
        self.commands.append(
            SimpleCommand(
                text=" ".join(parts),
                name=name,
                assigns=assigns,
                argv=plain if len(plain) == len(argv) else (),
            )
        )

    def word(self, n: tree_sitter.Node) -> None:
        """Check a word (or an assignment) contains nothing that runs code."""
        if n.is_error or n.is_missing:
            raise self.refuse(n, "the shell parser cannot read it")
        t = n.type
        if t == "expansion":
            # Only ${NAME}: operators like ${x@P} expand prompts (command substitution included).
            kinds = [c.type for c in n.children]
            if kinds not in (["${", "variable_name", "}"], ["${", "special_variable_name", "}"]):
                raise self.refuse(n, "it uses a parameter expansion with an operator")
            return
        if t not in _WORDS and t != "variable_assignment":
            self.node(n)  # a substitution or another construct: refused with its reason
            return
        raw = self.src[n.start_byte : n.end_byte]
        if t in _BARE and (b"\n" in raw or _UNESCAPED_BLANK.search(raw)):
            # Outside quotes a blank ends a word for bash; the parser reads `{ {` as one word.
            raise self.refuse(n, "the parser and bash may split it differently")
        for c in n.children:
            if c.is_named:
                self.word(c)
            elif c.type not in _WORD_TOKENS:
                raise self.refuse(n, f"it uses `{c.type}` in an unusual place")

    def file_redirect(self, n: tree_sitter.Node) -> None:
        fd = next((c for c in n.children if c.type == "file_descriptor"), None)
        if fd is not None and not self.text(fd).isdigit():
            raise self.refuse(n, "the parser and bash may split it differently")
        op = next((c.type for c in n.children if not c.is_named), "")
        dests = [c for c in n.children if c.is_named and c.type != "file_descriptor"]
        for d in dests:
            self.word(d)
        if len(dests) > 1:
            raise self.refuse(n, "it has words after a redirection")
        if op in (">&", "<&") and (not dests or dests[0].type == "number"):
            return  # a duplicated descriptor, `2>&1`
        if op in (">&-", "<&-"):
            return
        if op in OUTPUT_OPS or op == ">&":
            path = literal(self.src, dests[0]) if dests else None
            self.writes.append(Write(source=self.text(n), path=path))
        elif op not in ("<", "<&"):
            raise self.refuse(n, f"it uses the redirection `{op}`")

    def heredoc(self, n: tree_sitter.Node) -> None:
        start = next((c for c in n.children if c.type == "heredoc_start"), None)
        end = next((c for c in n.children if c.type == "heredoc_end"), None)
        # Only plain delimiters (EOF, 'EOF', "EOF", \EOF): where a fancier one ends, tree-sitter
        # and bash can disagree, and what bash then reads after it runs as commands.
        word = "" if start is None else self.text(start)
        quoted = len(word) > 1 and (word[0] == word[-1] in "'\"" or word[0] == "\\")
        core = (word[1:-1] if word[0] != "\\" else word[1:]) if quoted else word
        if not core or not all(ch.isascii() and (ch.isalnum() or ch in "_.-") for ch in core):
            raise self.refuse(n, "its here-document has an unusual delimiter")
        if end is None or self.text(end) != core:
            raise self.refuse(n, "its here-document does not end with its delimiter")
        for c in n.children:
            if c.type == "heredoc_body":
                body = self.text(c)
                if not quoted and any(ch in body for ch in "$`\\"):
                    raise self.refuse(n, "its here-document expands `$`, backticks or backslashes")
            elif c.type in ("heredoc_start", "heredoc_end", "heredoc_content"):
                continue
            elif c.is_named:
                self.node(c)  # the rest of the line: `<<EOF > out && next`
            elif c.type not in ("<<", "<<-", *_GROUP_TOKENS):
                raise self.refuse(n, f"it uses `{c.type}` in a here-document")


def _test_words(n: tree_sitter.Node) -> list[tree_sitter.Node]:
    """The words of a ``[ … ]`` test, its operators (``-v``) included."""
    out: list[tree_sitter.Node] = []
    for c in n.named_children:
        if c.type in _WORDS or c.type == "test_operator":
            out.append(c)
        else:
            out += _test_words(c)
    return out


def literal(src: bytes, n: tree_sitter.Node, *, assignment: bool = False) -> str | None:
    """A word's value after quote removal, or None when the shell would expand any of it (a
    variable, a glob, a brace or tilde expansion); `assignment` for the value of ``NAME=…``,
    where a ``~`` after ``:`` expands too."""
    chars = _chars(src, n)
    if chars is None or _expands(chars, assignment=assignment):
        return None
    return "".join(ch for ch, _ in chars)


def _chars(src: bytes, n: tree_sitter.Node) -> list[tuple[str, bool]] | None:
    """A word's characters after quote removal, each with whether it was quoted."""
    text = src[n.start_byte : n.end_byte].decode("utf-8", "surrogateescape")
    match n.type:
        case "word" | "number" | "test_operator":
            return _unquoted(text)
        case "raw_string":
            return [(ch, True) for ch in text[1:-1]]
        case "string":
            if any(c.type != "string_content" for c in n.named_children):
                return None
            # The text between the quotes, not only the content nodes: the parser leaves blanks
            # and a lone `$` out of them.
            return [(ch, True) for ch in _unescape(text[1:-1], _DQ)]
        case "concatenation":
            out: list[tuple[str, bool]] = []
            for c in n.children:
                if not c.is_named:  # a token such as a lone `$`: as bash reads it, unquoted
                    tok = src[c.start_byte : c.end_byte].decode("utf-8", "surrogateescape")
                    out += _unquoted(tok)
                    continue
                part = _chars(src, c)
                if part is None:
                    return None
                out += part
            return out
        case _:
            return None


_DQ = '$`"\\\n'
_GLOB = frozenset("*?$`")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _expands(chars: list[tuple[str, bool]], *, assignment: bool) -> bool:
    """Whether bash would expand an unquoted character of a word: ``*``, ``?``, a ``[…]``
    bracket, a ``{a,b}`` or ``{1..3}`` brace, a leading ``~`` (also after ``=`` in a word that
    looks like an assignment, and after ``:`` in an assignment's value)."""
    plain = "".join(ch if not q else "\0" for ch, q in chars)
    if any(ch in _GLOB for ch, q in chars if not q):
        return True
    for i, (ch, q) in enumerate(chars):
        if q:
            continue
        rest = "".join(c for c, _ in chars[i + 1 :])
        if ch == "[" and "]" in rest:
            return True
        if ch == "{" and "}" in rest:
            # Bash looks past a `}` for the one that closes a list (`{u},/}` expands).
            inside = rest[: rest.rindex("}")]
            if "," in inside or ".." in inside:
                return True
        if ch == "~":
            before = plain[:i]
            if i == 0 or (assignment and before.endswith(":")):
                return True
            name = before.split("=", 1)[0] if "=" in before else None
            if name and name[0] not in "0123456789" and set(name) <= _NAME_CHARS:
                return True
    return False


def _unquoted(text: str) -> list[tuple[str, bool]]:
    """The characters of an unquoted word: a backslash quotes the next one (and a
    backslash-newline disappears)."""
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.append((text[i + 1], True))
            i += 2
            continue
        out.append((text[i], False))
        i += 1
    return out


def _unescape(text: str, escapable: str | None) -> str:
    """Remove backslashes the way bash does: before any character unquoted, or before
    `escapable` inside double quotes; a backslash-newline disappears."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "\n":
                i += 2
                continue
            if escapable is None or nxt in escapable:
                out.append(nxt)
                i += 2
                continue
        out.append(ch)
        i += 1
    return "".join(out)

"""ChatOps action aliases: st2's format parsing and command matching.

A format like `rollout {{profile}} on {{targets}} batch={{batch=10}}` becomes a regular
expression with one named group per parameter; `{{name=default}}` parameters are optional;
`key=value` pairs at the end of a command become extra parameters (stricter than st2: never one
the format already took from the command, so a pair cannot get around the format's regex; the
values stay literals, see params.render_live_params). A command that matches more than one
format (of all enabled aliases) is ambiguous, like in st2.
"""
from __future__ import annotations

import re
import sys
from typing import Any, Dict, List, Tuple

from fleet_runtime.packs import Alias
from fleet_runtime.runtime_errors import AliasError

if sys.version_info >= (3, 11):
    from re import _parser as sre_parse  # type: ignore[attr-defined]
else:  # pragma: no cover
    import sre_parse  # type: ignore[no-redef]

_KEY = r"\s*(\S+?)\s*"
_EXT_VALUE = r'""|\'\'|"(.+?)"|\'(.+?)\'|({.+?})|(.+?)'
_DEFAULT = rf"\s*=\s*(?:{_EXT_VALUE})\s*"
_OPTIONAL = "{{" + _KEY + _DEFAULT + "}}"
_REQUIRED = "{{" + _KEY + "}}"
_PARAM_MATCH = r'\1["\']?(?P<\2>(?:(?<=\').+?(?=\')|(?<=").+?(?=")|{.+?}|.+?))["\']?'


class ParseError(AliasError):
    """The command does not fit the format (an AliasError: the caller is told, HTTP 400)."""


def _has_anchor(tokens: Any, wanted: Tuple[Any, ...], backwards: bool = False) -> bool:
    items = list(tokens)
    if backwards:
        items = list(reversed(items))
    for op, arg in items:
        if op == sre_parse.SUBPATTERN:
            if _has_anchor(arg[3], wanted, backwards):
                return True
        elif op == sre_parse.BRANCH:
            for branch in arg[1]:
                if _has_anchor(branch, wanted, backwards):
                    return True
        elif (op, arg) in wanted:
            return True
    return False


def _next_index(text: str, char: str) -> List[int]:
    """For each position, where `char` next occurs at or after it (len(text): nowhere)."""
    out = [len(text)] * (len(text) + 1)
    for i in range(len(text) - 1, -1, -1):
        out[i] = i if text[i] == char else out[i + 1]
    return out


def trailing_pairs(text: str) -> Tuple[List[Tuple[str, str]], int]:
    """The `key=value` pairs that end a command, as (key, value), and where they start
    (len(text) for none), in one pass: a value is "..." or '...' (the quotes dropped), {...}
    (kept whole) or a run of non-blanks, and a pair stands after a blank or at the start.
    Linear in the command's length: a chat line is someone's input."""
    closing = {q: _next_index(text, q) for q in ('"', "'", "}")}
    n = len(text)
    run: List[Tuple[str, str]] = []
    run_start = n
    i = 0
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        word = i
        while i < n and not text[i].isspace() and text[i] != "=":
            i += 1
        key_end = i
        while i < n and text[i].isspace():
            i += 1
        pair = None
        if key_end > word and i < n and text[i] == "=":
            j = i + 1
            if j < n and text[j] in ('"', "'", "{"):
                close = closing["}" if text[j] == "{" else text[j]][j + 1] if j + 1 <= n else n
                if close < n:
                    value = text[j:close + 1] if text[j] == "{" else text[j + 1:close]
                    pair = (text[word:key_end], value, close + 1)
            elif j < n and not text[j].isspace():
                end = j
                while end < n and not text[end].isspace():
                    end += 1
                pair = (text[word:key_end], text[j:end], end)
        if pair is not None and (pair[2] == n or text[pair[2]].isspace()):
            if not run:
                run_start = word
            run.append((pair[0], pair[1]))
            i = pair[2]
            continue
        run, run_start = [], n
        i = key_end
        while i < n and not text[i].isspace():
            i += 1
    if not run:
        return [], n
    while run_start > 0 and text[run_start - 1].isspace():
        run_start -= 1
    return run, run_start


class FormatParser:
    """Extract parameters from a command according to one alias format."""

    def __init__(self, alias_format: str, command: str) -> None:
        self.format = alias_format or ""
        self.command = command or ""
        self.kv_pairs, self.stream = self._kv_pairs_at_end(self.command)
        self.optional = re.findall(_OPTIONAL, self.format, re.DOTALL)
        self.regex = self._format_regex()

    @staticmethod
    def _kv_pairs_at_end(stream: str) -> Tuple[List[Tuple[str, str]], str]:
        pairs, start = trailing_pairs(stream)
        return pairs, f" {stream[:start]} "

    def _format_regex(self) -> Any:
        reg = re.sub(r"(\s*)" + _OPTIONAL, r"(?:" + _PARAM_MATCH + r")?", self.format)
        reg = re.sub(r"(\s*)" + _REQUIRED, _PARAM_MATCH, reg)
        tokens = sre_parse.parse(reg, re.DOTALL)
        at = sre_parse.AT
        if not _has_anchor(tokens, ((at, sre_parse.AT_BEGINNING),
                                    (at, sre_parse.AT_BEGINNING_STRING))):
            reg = r"^\s*" + reg
        if not _has_anchor(tokens, ((at, sre_parse.AT_END), (at, sre_parse.AT_END_STRING)),
                           backwards=True):
            reg = reg + r"\s*$"
        return re.compile(reg, re.DOTALL)

    def _params(self, match: Any) -> Dict[str, Any]:
        if not match:
            raise ParseError(
                f'Command "{self.command}" doesn\'t match format string "{self.format}"'
            )
        result = match.groupdict()
        from_text = {name for name, value in result.items() if value is not None}
        for param in self.optional:
            value = result.get(param[0]) or "".join(param[1:])
            if value is not None:
                result[param[0]] = value
        for pair in self.kv_pairs:
            if pair[0] in from_text:
                # stricter than st2: a trailing pair cannot replace what the format's
                # representation (and its regex) took from the command
                raise ParseError(f'"{pair[0]}" is already given by the command; a trailing'
                                 f' "{pair[0]}=..." cannot replace it')
            result[pair[0]] = pair[1]
        if self.format and not (self.stream.strip() or any(result.values())):
            raise ParseError("No value supplied and no default value found.")
        return result

    def extract(self) -> Dict[str, Any]:
        return self._params(self.regex.search(self.stream))

    def extract_multiple(self) -> List[Dict[str, Any]]:
        return [self._params(m) for m in self.regex.finditer(self.stream)]


def extract_parameters(
    format_str: str, command: str, match_multiple: bool = False
) -> Any:
    parser = FormatParser(format_str, command)
    return parser.extract_multiple() if match_multiple else parser.extract()


def normalise_format(alias_format: Any) -> Tuple[str, List[str], bool]:
    if isinstance(alias_format, str):
        return alias_format, [alias_format], False
    if isinstance(alias_format, dict):
        reps = alias_format.get("representation") or []
        if isinstance(reps, str):
            reps = [reps]
        return alias_format.get("display") or "", list(reps), bool(
            alias_format.get("match_multiple", False)
        )
    raise TypeError(f"alias_format '{alias_format!r}' is neither a dictionary or string type.")


def list_patterns(aliases: List[Alias]) -> List[Dict[str, Any]]:
    patterns = []
    for alias in aliases:
        for fmt in alias.formats:
            display, reps, multiple = normalise_format(fmt)
            if display and not reps:
                patterns.append({"alias": alias, "format": fmt, "display": display,
                                 "representation": "", "match_multiple": multiple})
            for rep in reps:
                patterns.append({"alias": alias, "format": fmt, "display": display,
                                 "representation": rep, "match_multiple": multiple})
    return patterns


def match_command(command: str, aliases: List[Alias]) -> List[Dict[str, Any]]:
    matches = []
    for pattern in list_patterns(aliases):
        if not pattern["representation"]:
            continue
        try:
            extract_parameters(pattern["representation"], command)
        except ParseError:
            continue
        matches.append(pattern)
    return matches


def get_matching_alias(command: str, aliases: List[Alias]) -> Dict[str, Any]:
    """The one pattern the command matches; AliasError when none or several match."""
    enabled = [a for a in aliases if a.enabled]
    single = [p for p in match_command(command, enabled) if not p["match_multiple"]]
    if len(single) > 1:
        names = ", ".join(f'{p["alias"].ref} ("{p["representation"]}")' for p in single)
        raise AliasError(f"Command '{command}' matched more than 1 pattern: {names}")
    if single:
        return single[0]
    multi = [p for p in match_command(command, enabled) if p["match_multiple"]]
    if len(multi) > 1:
        names = ", ".join(f'{p["alias"].ref} ("{p["representation"]}")' for p in multi)
        raise AliasError(f"Command '{command}' matched more than 1 (multi) pattern: {names}")
    if not multi:
        raise AliasError(f"Command '{command}' matched no patterns")
    return multi[0]

"""What a display name or a profile URL may carry onto a page that lists other people.

A name is chosen by its user and shown to everyone, next to other names and inside the page's own
text, so it must not be able to change how the text around it is laid out:

- control characters (a NUL, an escape) have no place in a name; line breaks and tabs become
  spaces;
- a bidirectional embedding, override or isolate that is not closed within the name would reverse
  whatever follows it on the page, so unpaired ones are dropped (paired ones are kept: they are
  how some right-to-left names are written);
- combining marks beyond ``MAX_COMBINING_MARKS`` on one character are dropped: no script needs
  more, and hundreds of them draw a column across the page.

The templates also isolate each name (``dir="auto"``), so that a name stored before these rules
cannot leak its direction either. URLs are linked only when they cannot run script: ``http``,
``https``, or a path on the site itself.
"""

from __future__ import annotations

import unicodedata
from typing import Final
from urllib.parse import urlsplit

#: Combining marks kept on one base character. Vietnamese, Hebrew and Indic scripts stack up to
#: three or four; stacking beyond that is decoration at the expense of the page.
MAX_COMBINING_MARKS: Final = 4

#: Bidirectional formatting characters that open a run, and the character that closes it.
_OPENERS: Final = {
    "\u202a": "\u202c",  # LEFT-TO-RIGHT EMBEDDING … POP DIRECTIONAL FORMATTING
    "\u202b": "\u202c",  # RIGHT-TO-LEFT EMBEDDING
    "\u202d": "\u202c",  # LEFT-TO-RIGHT OVERRIDE
    "\u202e": "\u202c",  # RIGHT-TO-LEFT OVERRIDE
    "\u2066": "\u2069",  # LEFT-TO-RIGHT ISOLATE … POP DIRECTIONAL ISOLATE
    "\u2067": "\u2069",  # RIGHT-TO-LEFT ISOLATE
    "\u2068": "\u2069",  # FIRST STRONG ISOLATE
}
_CLOSERS: Final = frozenset(_OPENERS.values())
_WHITESPACE_CONTROLS: Final = frozenset("\t\n\v\f\r\x1c\x1d\x1e\x1f\x85")
LINKED_SCHEMES: Final = frozenset({"http", "https"})


def clean_name(name: str) -> str:
    """``name`` with control characters, unpaired bidirectional controls and excess combining
    marks removed (see the module's docstring)."""
    if name.isascii() and name.isprintable():
        return name  # the common case, at the cost of two C loops
    kept: list[str] = []
    open_runs: list[tuple[int, str]] = []  # (index in kept, the closer it waits for)
    marks = 0
    for char in name:
        category = unicodedata.category(char)
        if category == "Cc":
            if char in _WHITESPACE_CONTROLS:
                kept.append(" ")
            marks = 0
            continue
        if category in {"Mn", "Me"}:
            marks += 1
            if marks > MAX_COMBINING_MARKS:
                continue
        else:
            marks = 0
        if char in _OPENERS:
            open_runs.append((len(kept), _OPENERS[char]))
        elif char in _CLOSERS:
            if not open_runs or open_runs[-1][1] != char:
                continue  # closes nothing: dropped
            open_runs.pop()
        kept.append(char)
    for index, _closer in reversed(open_runs):
        del kept[index]  # never closed: dropped
    return "".join(kept)


def linkable_url(url: str) -> str:
    """``url`` if a link to it cannot run script (``http``, ``https``, or a path on this site),
    else ``""``. Browsers ignore tabs and line breaks inside a scheme (``java\\tscript:``), and
    read ``/\\host`` as ``//host``, so a URL holding either is not linked at all."""
    if not url or not url.isprintable() or "\\" in url or url != url.strip():
        return ""
    if url.startswith("/"):
        return "" if url.startswith("//") else url  # "//host" may be any host
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return url if parts.scheme.lower() in LINKED_SCHEMES and parts.netloc else ""

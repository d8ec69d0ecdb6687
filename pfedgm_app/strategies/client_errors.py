"""A failed ClientApp's own words, from the error reply Flower made of its exception.

Flower writes an error reply's reason as `<class 'T'>:<'str(exception)'>`. In a deployment,
T is the ClientApp's exception and the text its message. In the simulation, T is Ray's
wrapper and the text Ray's whole traceback, ending with Flower's "Exception
ClientAppException occurred. Message: <the ClientApp's message>" (colours included). A
server that reports the reason as written shows a traceback cut in the middle of a path;
`error_cause` gives the exception's name and message on one line instead.
"""

from __future__ import annotations

import re

MAX_CHARS = 600  # a cause longer than this (a message holding a dump) is shortened
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_WRAPPED = re.compile(r"<class '([\w.()]+)'>:<'(.*)'>", re.S)  # Flower's reason format
_MARK = "occurred. Message: "  # Flower's ClientAppException, around the ClientApp's message
_WRAPPERS = ("ClientAppException", "RayTaskError")


def error_cause(reason: object, limit: int = MAX_CHARS) -> str:
    """`Name: message` of the exception a ClientApp raised, on one line, at most `limit`
    characters, from an error reply's `reason`; a reason of another form, on one line."""
    text = _ANSI.sub("", str(reason)).strip()
    name, message = "", text
    if match := _WRAPPED.fullmatch(text):
        name, message = match.group(1), match.group(2)
    if (at := message.rfind(_MARK)) >= 0:
        message = message[at + len(_MARK) :]
        name = _raised(text, message) or name
    name = name.rsplit(".", 1)[-1]
    line = " ".join(message.split())
    if name and not any(wrapper in name for wrapper in _WRAPPERS):
        line = f"{name}: {line}"
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _raised(text: str, message: str) -> str:
    """The exception's name where a traceback in `text` shows it raised with `message`."""
    start = message.strip()[:40]
    if not start:
        return ""
    found = re.findall(r"^([\w.]+): " + re.escape(start), text, re.M)
    names = [n for n in found if not any(wrapper in n for wrapper in _WRAPPERS)]
    return names[0] if names else ""

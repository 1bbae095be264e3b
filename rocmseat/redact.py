"""Secrets never reach a log line, a JSON report or a state file (docs/architecture.md, "Hostile
input").

Three shapes of secret reach rocmseat from a seat file or the command line:

- the value of a secret-bearing flag in an argv (`--api-key sk-...`, `--hf-token=...`): vLLM's
  own `--api-key` is the usual one (vllm/entrypoints/openai/cli_args.py);
- the value of an environment variable whose name looks like a credential (`VLLM_API_KEY`,
  `HF_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `..._PASSWORD`);
- URL userinfo (`http://user:pass@host/`) and secret-looking query parameters (`?token=`).

Names are split into words at `-`, `_`, `.` and lower-to-upper case changes (`apiToken`), and
a word names a secret when it is one of the usual names, or holds one as a part
(`__param_apitoken`, `MYPASSWORD`, `x_oauth`, `sessionid`):

- anywhere in a word: the long, distinctive names (`password`, `passwd`, `passphrase`,
  `secret`, `credential`, `signature`, `bearer`, `jwt`, `apikey`, `apitoken`, `session`,
  `cookie`, `authorization`, `privatekey`, `accesskey`);
- at the end of a word: `token`, `pass`, `auth` (`accesstoken`, `dbpass`, `oauth`), never at
  its start: `--tokenizer`, `--max-num-batched-tokens`, `TOKENIZERS_PARALLELISM` and `author`
  are not secrets;
- as a whole word only: `key`, `sig`, `pwd` (`MONKEY` is not a secret).

A false positive hides a harmless value; a false negative prints a credential: the rule leans
to the first.
Everything here is pure; callers redact at the point where a value leaves the process.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping

REDACTED = "<redacted>"

# the word as a whole
SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "pwd", "pass", "credential",
     "credentials", "auth", "authorization", "bearer", "cookie", "signature", "sig", "jwt",
     "session", "apitoken"}
)
# anywhere in a word
_SECRET_PARTS = ("password", "passwd", "passphrase", "secret", "credential", "signature",
                 "bearer", "jwt", "apikey", "apitoken", "session", "cookie", "authorization",
                 "privatekey", "accesskey")
# at the end of a word
_SECRET_ENDINGS = ("token", "pass", "auth")

_WORD_SPLIT = re.compile(r"[-_.\s]+")
_CASE_CHANGE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


def is_secret_name(name: str) -> bool:
    """True when a flag, variable or parameter name names a credential (the rule above)."""
    words = [w.lower() for w in _WORD_SPLIT.split(_CASE_CHANGE.sub("_", name.strip("-")))
             if w]
    return any(_secret_word(w) for w in words)


def _secret_word(word: str) -> bool:
    return (word in SECRET_WORDS or any(part in word for part in _SECRET_PARTS)
            or word.endswith(_SECRET_ENDINGS))


def redact_argv(argv: Iterable[str]) -> list[str]:
    """The argv with the values of secret-bearing flags replaced.

    `--api-key VALUE` and `--api-key=VALUE` both; every value up to the next option, since
    vLLM's `--api-key` takes one or more keys (nargs="+", vllm/entrypoints/openai/cli_args.py);
    a URL argument loses its userinfo.
    """
    out: list[str] = []
    hide_next = False  # the first value after a secret flag (it may itself start with "-")
    hide_more = False  # the further values of that flag, up to the next option
    for arg in argv:
        if (hide_next and not arg.startswith("--")) or (hide_more and not arg.startswith("-")):
            out.append(REDACTED)  # a flag after a switch is no value
            hide_next, hide_more = False, True
            continue
        hide_next = hide_more = False
        if arg.startswith("-") and len(arg) > 1:
            name, sep, _value = arg.partition("=")
            if is_secret_name(name):
                if sep:
                    out.append(f"{name}={REDACTED}")
                else:
                    out.append(arg)
                    hide_next = True
                continue
        out.append(redact_text(arg))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with credential-looking values replaced (keys kept, order kept)."""
    return {
        name: (REDACTED if is_secret_name(name) and value else redact_text(value))
        for name, value in env.items()
    }


def redact_url(url: str) -> str:
    """The URL without userinfo and with secret-looking query values replaced. Never raises.

    Everything up to the LAST `@` after the scheme is taken as userinfo, even where a URL parser
    would end the authority earlier: a password may hold `/`, `?`, `#` or a space, which a
    parser reads as the start of the path, and then shows the password as host or path
    (`http://user:pa/ss@host/` parses to host `user`). Security first: a query that holds an
    `@` (`?mail=a@b`) loses its host in the shown text, never a secret.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return REDACTED + "@" + url.rsplit("@", 1)[1] if "@" in url else url
    if "@" in rest:
        rest = REDACTED + "@" + rest.rsplit("@", 1)[1]
    try:
        parts = urllib.parse.urlsplit(f"{scheme}://{rest}")
    except ValueError:
        return f"{scheme}://{rest}"
    query = parts.query
    if not query:
        return f"{scheme}://{rest}"
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    if not any(is_secret_name(k) for k, _ in pairs):
        return f"{scheme}://{rest}"
    query = "&".join(
        urllib.parse.quote(k) + "="
        + (REDACTED if is_secret_name(k) else urllib.parse.quote(v))
        for k, v in pairs
    )
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


_URL_WITH_AT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S*?@")


def redact_text(text: str) -> str:
    """Free text (an error message, a log line) with every URL in it redacted."""
    if "://" not in text:
        return text
    # A password with a space splits the URL into two words for the regex below; whatever lies
    # between a scheme and the next `@` on the line is userinfo all the same.
    text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    return _URL_WITH_AT.sub(lambda m: m.group(0).split("://", 1)[0] + "://" + REDACTED + "@",
                            _spaced_userinfo(text))


def _spaced_userinfo(text: str) -> str:
    """`scheme://user:pa ss@host` in free text: hide up to the `@` when the words between the
    scheme and the `@` hold no other URL and no quote (a password with spaces)."""
    return re.sub(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s'\"<>@/]*(?: [^\s'\"<>@/]+)+@",
                  lambda m: m.group(1) + REDACTED + "@", text)


# A credentials header to the end of its line or quote (RFC 9110 section 11.6.2:
# credentials = auth-scheme [ 1*SP ( token68 / #auth-param ) ], any scheme)
_HEADER = re.compile(r"(?i)\b((?:proxy-)?authorization|(?:set-)?cookie)(\s*[:=]\s*)"
                     r"([^\r\n\"']+)")
# `Bearer abc` outside a header (RFC 6750 section 2.1: b64token is these characters)
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)[A-Za-z0-9._~+/-]+=*")
# `--api-key VALUE`, `--api-key=VALUE` (a secret flag and its first value)
_FLAG_VALUE = re.compile(r"(?<![\w-])(--?[A-Za-z][A-Za-z0-9_.-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)")
# `token=abc`, `password: abc`, `X-Api-Key: abc`, `"secret": "abc"` (a secret name and a value)
_NAME_VALUE = re.compile(r"(?<![\w-])([A-Za-z][A-Za-z0-9_.-]*)(\"?\s*[:=]\s*)"
                         r"(\"[^\"]*\"|'[^']*'|[^\s,;&\"']+)")


def redact_output(text: str) -> str:
    """What a child printed (an error line, a command's stderr) with every secret shape in it
    replaced: URLs (userinfo, secret query values), bearer and basic credentials, the value of
    a secret flag (`--api-key sk-1`, `--api-key=sk-1`) and of a secret name (`token=...`,
    `Authorization: ...`, `"password": "..."`). Free text from a child has no rule for where a
    secret ends: a false positive hides a harmless word, never the other way round."""
    text = redact_text(text)
    text = _HEADER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)

    def flag(m: re.Match[str]) -> str:
        if not is_secret_name(m.group(1)) or m.group(3) == REDACTED:
            return m.group(0)
        return m.group(1) + m.group(2) + REDACTED

    def named(m: re.Match[str]) -> str:
        if not is_secret_name(m.group(1)) or m.group(3).strip("\"'") in (REDACTED, ""):
            return m.group(0)
        return m.group(1) + m.group(2) + REDACTED

    return _NAME_VALUE.sub(named, _FLAG_VALUE.sub(flag, text))

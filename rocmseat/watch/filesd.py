"""`--targets-file`: Prometheus file-based service discovery as watch targets.

The format is Prometheus's own (prometheus/discovery/file/file.go; docs "file_sd_config"): a
JSON (`*.json`) or YAML (`*.yml`, `*.yaml`) list of target groups

    [{"targets": ["host:port", ...], "labels": {"name": "value", ...}}, ...]

read by the rules Prometheus applies (discovery/targetgroup.Group's UnmarshalJSON/UnmarshalYAML
into common/model's LabelSet; checked against Debian's Prometheus 2.42 in
tests/watch/test_monitoring_stack.py):

- JSON: a label value is a string (null is an empty value); unknown keys are refused.
- YAML (yaml.v2, strict): any scalar is read as its text (`rack: 12` is "12", `1.50` stays
  "1.50", `yes` stays "yes"), `null`, `~` and an empty value are an empty value, `!!binary` is
  decoded; a sequence or a mapping as a value, a key given twice and an unknown key are refused.
- An empty label value is an absent label (Prometheus drops it).
- Label names match `[a-zA-Z_][a-zA-Z0-9_]*`.

The meta labels `__scheme__` (http, https), `__metrics_path__` (default /metrics) and
`__param_<name>` (URL query parameters) shape the URL and are not carried on; other `__` labels
are dropped as Prometheus drops them after relabelling. `rocmseat_spec: "false"` says the
replica does not speculate (its /ready is not held at 503 spec_blind; "true" says it does);
it is consumed, not carried. The replica's name is its `replica` label, else its `instance`
label, else the address; `instance` defaults to the address, as in Prometheus. The rest of the
labels ride on the replica's alerts and exporter series; a `seat` label names the seat those
replicas serve (the `seat` label of their alerts). rocmseat's own labels (alertname, severity,
source on alerts; alert, position on the exporter's series) are refused.

Stricter than Prometheus, on purpose (docs/watch.md, "Targets file"): a label value must be valid
UTF-8 (a JSON `\ud800` is a lone surrogate; Go replaces it with U+FFFD, the exporter could not
encode it), hold no control character (C0, DEL, C1 such as U+009B, U+2028/U+2029) and at most
1,024 characters; URL credentials in a value
are carried redacted; a target is `host:port`.

The file is read with rocmseat/safeio.py (a regular file, at most 1 MiB) and checked whole: a
bad file is one line naming the file and the entry (credentials in it redacted). `TargetsFile`
re-reads it when its size, mtime or inode changes, and applies a changed file only once two
reads one poll apart agree (a writer caught half-way never removes targets); a bad re-read, or
one that lists no targets (a file truncated for rewriting), keeps the last good set and says
why once.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from rocmseat.errors import ConfigError, ReadError
from rocmseat.redact import redact_text, redact_url
from rocmseat.safeio import read_regular_text
from rocmseat.text import CONTROL_CHARS
from rocmseat.watch.alerts import RESERVED_LABELS
from rocmseat.watch.scrape import Target, check_http_url

MAX_TARGETS = 100_000
MAX_LABEL_VALUE = 1024
# YAML nodes visited: a 1 MiB file has fewer; aliases are converted once (shared, as PyYAML's
# own constructor shares them), so this only stops a pathological document.
MAX_NODES = 2_000_000
# The work of one file, counted before it is done: each distinct label mapping's labels once,
# and for each target the labels it carries. The most a 1 MiB file without aliases can ask is
# MAX_TARGETS targets sharing a group's ~18 labels; YAML aliases repeat a group or a label
# mapping at 5 bytes a time (one 2,000-label group referenced 60,000 times in 320 KiB ran 90 s).
MAX_WORK = 2_000_000
SPEC_LABEL = "rocmseat_spec"
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# host:port (Prometheus refuses a scheme or a path in a target); [v6]:port allowed.
_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?$")
_NAME = re.compile(r"^[A-Za-z0-9\[][A-Za-z0-9._:\[\]-]*$")
# rocmseat's own labels: on alerts (alertname, severity, source, seat) and on the exporter's
# series (alert, position); `replica` names the target.
# `seat` is the user's to give: the seat those replicas serve, carried on their alerts.
OWN_LABELS = (RESERVED_LABELS | {"alert", "position"}) - {"replica", "seat"}
_YAML = "tag:yaml.org,2002:"
# The YAML 1.1 tags yaml.v2 knows; any other tag (`!!python/object`) is not a targets file.
_SCALAR_TAGS = frozenset(_YAML + t for t in ("str", "int", "float", "bool", "null",
                                             "timestamp", "binary", "merge", "value"))


class _Mapping(dict[str, Any]):
    """A YAML mapping with the keys it gave twice (yaml.v2's strict decoding refuses them)."""

    twice: tuple[str, ...] = ()


class _Yaml:
    """A composed YAML document as yaml.v2 decodes it into Prometheus's target groups: every
    scalar is its text, a null scalar is None, aliases are converted once and shared."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.nodes = 0
        self.done: dict[int, Any] = {}

    def convert(self, node: Any) -> Any:
        import yaml

        known = self.done.get(id(node))
        if known is not None:
            return known
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ConfigError(f"{self.path}: more than {MAX_NODES:,} YAML nodes")
        out: Any
        if isinstance(node, yaml.ScalarNode):
            out = self._scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            self._tag(node, _YAML + "seq")
            out = []
            self.done[id(node)] = out
            out.extend(self.convert(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            self._tag(node, _YAML + "map")
            out = _Mapping()
            self.done[id(node)] = out
            twice = []
            for key_node, value_node in node.value:
                key = self.convert(key_node)
                if not isinstance(key, str):
                    key = "" if key is None else str(key)
                if key in out:
                    twice.append(key)
                out[key] = self.convert(value_node)
            out.twice = tuple(twice)
        else:  # pragma: no cover - compose yields only these three
            raise ConfigError(f"{self.path}: not YAML (a {type(node).__name__})")
        self.done[id(node)] = out
        return out

    def _tag(self, node: Any, plain: str) -> None:
        if node.tag not in (plain, _YAML + "omap", _YAML + "set"):
            raise ConfigError(f"{self.path}: not YAML for a targets file (line "
                              f"{node.start_mark.line + 1}: tag {node.tag[:60]!r})")

    def _scalar(self, node: Any) -> str | None:
        if node.tag not in _SCALAR_TAGS:
            raise ConfigError(f"{self.path}: not YAML for a targets file (line "
                              f"{node.start_mark.line + 1}: tag {node.tag[:60]!r})")
        if node.tag == _YAML + "null":
            return None
        if node.tag == _YAML + "binary":
            try:
                raw = base64.b64decode("".join(node.value.split()), validate=True)
                return raw.decode("utf-8")
            except (binascii.Error, ValueError):
                raise ConfigError(f"{self.path}: line {node.start_mark.line + 1}: a !!binary "
                                  "value that is not base64 of UTF-8 text") from None
        return str(node.value)


def _load(text: str, path: Path) -> Any:
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            return json.loads(text)
        if suffix in (".yml", ".yaml"):
            import yaml

            # PyYAML's own parser, not libyaml's (CSafeLoader): that one recurses in C and
            # crashes the process on a deeply nested document
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            return None if node is None else _Yaml(path).convert(node)
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
    except ConfigError:
        raise
    except ValueError as exc:  # json.JSONDecodeError
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    except Exception as exc:  # yaml.YAMLError and its marks
        why = " ".join(str(exc).split())[:200]
        raise ConfigError(f"{path}: not YAML ({why})") from None
    raise ConfigError(f"{path}: a targets file ends in .json, .yml or .yaml (as Prometheus's "
                      "file_sd requires)")


def parse_targets_file(text: str, path: Path) -> list[Target]:
    """The targets of a file_sd document, or a ConfigError naming the file and the entry (an
    empty document is no targets: the caller decides what none means)."""
    try:
        return _parse(text, path)
    except ConfigError as exc:  # a value quoted in the message may hold a URL's credentials
        raise ConfigError(redact_text(exc.message), hint=exc.hint) from None


def _parse(text: str, path: Path) -> list[Target]:
    doc = _load(text, path)
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise ConfigError(f"{path}: expected a list of target groups, got {type(doc).__name__}")
    targets: list[Target] = []
    names: dict[str, int] = {}
    budget = _Budget(path)
    empty: set[int] = set()  # groups (YAML: one node, however many aliases) with no targets
    for index, group in enumerate(doc, start=1):
        where = f"{path}: entry {index}"
        if id(group) in empty:
            continue  # checked once, adds nothing
        made = _group(group, where, budget)
        if not made:
            empty.add(id(group))
        for target in made:
            if target.name in names:
                raise ConfigError(f"{where}: the replica name {target.name!r} is also used by "
                                  f"entry {names[target.name]}")
            names[target.name] = index
            targets.append(target)
            if len(targets) > MAX_TARGETS:
                raise ConfigError(f"{path}: more than {MAX_TARGETS:,} targets")
    return targets


class _Budget:
    """The work one file may cost (MAX_WORK), and each label mapping checked once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.left = MAX_WORK
        self.shared: dict[int, _Shared] = {}

    def spend(self, units: int, where: str) -> None:
        self.left -= units
        if self.left < 0:
            raise ConfigError(f"{where}: more than {MAX_WORK:,} labels in all, counting each "
                              "target's (YAML aliases repeat a group or its labels)")

    def prepared(self, raw: dict[Any, Any], where: str) -> _Shared:
        known = self.shared.get(id(raw))
        if known is None:
            self.spend(len(raw), where)
            known = self.shared[id(raw)] = _shared(_labels(raw, where), where)
        return known


def _group(group: Any, where: str, budget: _Budget) -> list[Target]:
    if not isinstance(group, dict):
        raise ConfigError(f"{where}: expected a mapping with 'targets' and 'labels'")
    twice: tuple[str, ...] = getattr(group, "twice", ())
    if twice:
        raise ConfigError(f"{where}: key {twice[0][:40]!r} is given twice")
    unknown = sorted(str(k) for k in group if k not in ("targets", "labels"))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0][:40]!r} (only 'targets', 'labels')")
    addresses = group.get("targets")
    if addresses is None:
        addresses = []
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
        raise ConfigError(f"{where}: key 'targets' must be a list of \"host:port\" strings")
    raw_labels = group.get("labels")
    if raw_labels is None:
        raw_labels = {}
    if not isinstance(raw_labels, dict):
        raise ConfigError(f"{where}: key 'labels' must be a mapping of strings")
    twice = getattr(raw_labels, "twice", ())
    if twice:
        raise ConfigError(f"{where}: key 'labels.{twice[0][:40]}' is given twice")
    budget.spend(len(addresses) * (len(raw_labels) + 1), where)
    shared = budget.prepared(raw_labels, where)
    out = []
    for address in addresses:
        shown = redact_url(address)[:80]
        if len(address) > 300 or not _ADDRESS.match(address):
            raise ConfigError(f"{where}: target {shown!r} is not host:port")
        url = f"{shared.scheme}://{address}{shared.path_and_query}"
        check_http_url(url, f"{where}: target {shown!r}")
        name = shared.replica or shared.instance or address
        if not _NAME.match(name) or len(name) > 200:
            raise ConfigError(f"{where}: replica name {name[:80]!r} must match "
                              "[A-Za-z0-9[][A-Za-z0-9._:[]-]*")
        out.append(Target(name, url, labels=shared.pairs_with(address),
                          expect_spec=shared.expect_spec))
    return out


@dataclass(frozen=True)
class _Shared:
    """What a label mapping gives every target that carries it, worked out once per mapping (a
    YAML alias shares one mapping among many groups: the per-target work stays one tuple)."""

    scheme: str
    path_and_query: str
    expect_spec: bool | None
    replica: str | None
    instance: str | None
    sorted_pairs: tuple[tuple[str, str], ...]  # the carried labels but `replica`, sorted

    def pairs_with(self, address: str) -> tuple[tuple[str, str], ...]:
        if self.instance is not None:  # the user's `instance` label wins over the address
            return self.sorted_pairs
        at = bisect.bisect_left(self.sorted_pairs, ("instance", address))
        return (*self.sorted_pairs[:at], ("instance", address), *self.sorted_pairs[at:])


def _shared(labels: dict[str, str], where: str) -> _Shared:
    labels = dict(labels)
    scheme = labels.pop("__scheme__", "http")
    if scheme not in ("http", "https"):
        raise ConfigError(f"{where}: key 'labels.__scheme__': {scheme[:40]!r} is not http or "
                          "https")
    metrics_path = labels.pop("__metrics_path__", "/metrics")
    if not metrics_path.startswith("/"):
        raise ConfigError(f"{where}: key 'labels.__metrics_path__' must start with '/'")
    expect_spec = _spec(labels.pop(SPEC_LABEL, None), where)
    params = {k[len("__param_"):]: v for k, v in labels.items() if k.startswith("__param_")}
    carried = {k: redact_text(v) for k, v in labels.items() if not k.startswith("__")}
    query = f"?{urlencode(params)}" if params else ""
    return _Shared(
        scheme=scheme,
        path_and_query=f"{quote(metrics_path, safe='/:@!$&()*+,;=-._~')}{query}",
        expect_spec=expect_spec, replica=carried.get("replica") or None,
        instance=carried.get("instance"),
        sorted_pairs=tuple(sorted((k, v) for k, v in carried.items() if k != "replica")))


def _labels(raw: dict[Any, Any], where: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_NAME.match(key):
            raise ConfigError(f"{where}: label name {str(key)[:40]!r} must match "
                              "[A-Za-z_][A-Za-z0-9_]*")
        if value is None:
            continue  # JSON null, YAML null/~/empty: an empty value, an absent label
        if not isinstance(value, str):
            raise ConfigError(f"{where}: key 'labels.{key}': the value must be a string, not "
                              f"{type(value).__name__}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"{where}: key 'labels.{key}': the value is not valid UTF-8 (a "
                              "lone surrogate such as \\ud800)") from None
        if CONTROL_CHARS.search(value) or len(value) > MAX_LABEL_VALUE:
            raise ConfigError(f"{where}: key 'labels.{key}': control characters or more than "
                              f"{MAX_LABEL_VALUE} characters")
        if key in OWN_LABELS:
            raise ConfigError(f"{where}: key 'labels.{key}': rocmseat sets this label itself")
        if value:  # an empty label is an absent one (Prometheus drops it)
            labels[key] = value
    return labels


def _spec(value: str | None, where: str) -> bool | None:
    if value is None:
        return None
    if value.lower() not in ("true", "false"):
        raise ConfigError(f"{where}: key 'labels.{SPEC_LABEL}': {value[:40]!r} is not true or "
                          "false")
    return value.lower() == "true"


def read_targets_file(path: Path) -> list[Target]:
    """Read (safeio: regular file, size cap) and parse; ConfigError/ReadError name the file."""
    return parse_targets_file(read_regular_text(path), path)


@dataclass(frozen=True, slots=True)
class Reload:
    targets: list[Target] | None  # None: unchanged, settling, or kept the last good set
    error: str | None = None


class TargetsFile:
    """A targets file watched for changes. `poll()` is cheap (one stat) when nothing changed.

    A changed file is applied when two reads, one poll apart, give the same text: a writer
    caught half-way (a shell `>` truncates first, then writes) never removes targets and
    resolves their alerts. A re-read that is bad, or lists no targets at all (an empty or
    truncated file looks exactly like that), keeps the last good set and is said once. Write
    the file atomically anyway (a temporary file, then rename), as any config a daemon re-reads.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int, int] | None = None
        self._last_text: str | None = None
        self._last_error: str | None = None
        self._settling: str | None = None  # a changed text read once, not yet applied

    def _stamp(self) -> tuple[int, int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_mtime_ns, info.st_size, info.st_ino, info.st_dev)

    def load(self) -> list[Target]:
        """The first read, at start: any problem is a ConfigError/ReadError (exit 2)."""
        self._seen = self._stamp()
        text = read_regular_text(self.path)
        targets = parse_targets_file(text, self.path)
        self._last_text = text
        return targets

    def poll(self) -> Reload:
        stamp = self._stamp()
        if stamp == self._seen and self._settling is None:
            return Reload(None)
        self._seen = stamp
        try:
            text = read_regular_text(self.path)
        except ReadError as exc:
            return self._bad(exc.message)
        if text == self._last_text:
            self._settling = None
            return Reload(None)
        if text != self._settling:
            self._settling = text  # wait for the next poll to read the same
            return Reload(None)
        self._settling = None
        try:
            targets = parse_targets_file(text, self.path) if text.strip() else []
        except ConfigError as exc:
            return self._bad(exc.message)
        if not targets:
            return self._bad(f"{self.path}: the file lists no targets (empty, or being "
                             "rewritten in place: write it atomically, a temporary file then "
                             "rename)")
        self._last_text, self._last_error = text, None
        return Reload(targets)

    def _bad(self, message: str) -> Reload:
        if message == self._last_error:
            return Reload(None)
        self._last_error = message
        return Reload(None, message)


class BackgroundPoll:
    """`TargetsFile.poll()` on a thread of its own, so that reading and checking a changed file
    (up to MAX_WORK) never holds an evaluation: `/healthz` and `/ready` stay fresh while a big
    file is re-read. The evaluation thread calls `take()` (a finished poll's Reload, or None)
    and `request()` (start a poll unless one runs) between steps; polls never overlap, so the
    file's two-reads-agree rule holds."""

    def __init__(self, source: TargetsFile) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done: Reload | None = None

    def request(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._poll, name="rocmseat-targets-file",
                                            daemon=True)
            self._thread.start()

    def take(self) -> Reload | None:
        with self._lock:
            done, self._done = self._done, None
        return done

    def join(self, timeout_s: float) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _poll(self) -> None:
        try:
            done = self.source.poll()
        except Exception as exc:  # a bug here must not end the watch: said like a bad file
            done = Reload(None, f"{self.source.path}: could not be re-read "
                                f"({type(exc).__name__}: {exc})"[:300])
        with self._lock:
            self._done = done

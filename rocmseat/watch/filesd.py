"""`--targets-file`: Prometheus file-based service discovery as watch targets.

The format is Prometheus's own (prometheus/discovery/file/file.go; docs "file_sd_config"): a
JSON (`*.json`) or YAML (`*.yml`, `*.yaml`) list of target groups

    [{"targets": ["host:port", ...], "labels": {"name": "value", ...}}, ...]

where the meta labels `__scheme__` (http, https), `__metrics_path__` (default /metrics) and
`__param_<name>` (URL query parameters) shape the URL and are not carried on; other `__`
labels are dropped as Prometheus drops them after relabelling. The replica's name is its
`replica` label, else its `instance` label, else the address; `instance` defaults to the
address, as in Prometheus. The rest of the labels ride on the replica's alerts and exporter
series. rocmseat's own labels (alertname, severity, source, seat on alerts; alert, position on
the exporter's series) are refused.

The file is read with rocmseat/safeio.py (a regular file, at most 1 MiB) and checked whole: a
bad file is one line naming the file and the entry. `TargetsFile.poll()` re-reads it when its
size, mtime or inode changes; a bad re-read keeps the last good set and says why once.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from rocmseat.errors import ConfigError, ReadError
from rocmseat.safeio import read_regular_text
from rocmseat.watch.alerts import RESERVED_LABELS
from rocmseat.watch.scrape import Target, check_http_url

MAX_TARGETS = 100_000
MAX_LABEL_VALUE = 1024
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# host:port (Prometheus refuses a scheme or a path in a target); [v6]:port allowed.
_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?$")
_NAME = re.compile(r"^[A-Za-z0-9\[][A-Za-z0-9._:\[\]-]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# rocmseat's own labels: on alerts (alertname, severity, source, seat) and on the exporter's
# series (alert, position); `replica` names the target.
OWN_LABELS = (RESERVED_LABELS | {"alert", "position"}) - {"replica"}


def _load(text: str, path: Path) -> Any:
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            return json.loads(text)
        if suffix in (".yml", ".yaml"):
            import yaml

            return yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    except Exception as exc:  # yaml.YAMLError and its marks
        why = " ".join(str(exc).split())[:200]
        raise ConfigError(f"{path}: not YAML ({why})") from None
    raise ConfigError(f"{path}: a targets file ends in .json, .yml or .yaml (as Prometheus's "
                      "file_sd requires)")


def parse_targets_file(text: str, path: Path) -> list[Target]:
    """The targets of a file_sd document, or a ConfigError naming the file and the entry."""
    doc = _load(text, path)
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise ConfigError(f"{path}: expected a list of target groups, got {type(doc).__name__}")
    targets: list[Target] = []
    names: dict[str, int] = {}
    for index, group in enumerate(doc, start=1):
        where = f"{path}: entry {index}"
        for target in _group(group, where):
            if target.name in names:
                raise ConfigError(f"{where}: the replica name {target.name!r} is also used by "
                                  f"entry {names[target.name]}")
            names[target.name] = index
            targets.append(target)
            if len(targets) > MAX_TARGETS:
                raise ConfigError(f"{path}: more than {MAX_TARGETS:,} targets")
    return targets


def _group(group: Any, where: str) -> list[Target]:
    if not isinstance(group, dict):
        raise ConfigError(f"{where}: expected a mapping with 'targets' and 'labels'")
    unknown = sorted(str(k) for k in group if k not in ("targets", "labels"))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0][:40]!r} (only 'targets', 'labels')")
    addresses = group.get("targets")
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
        raise ConfigError(f"{where}: key 'targets' must be a list of \"host:port\" strings")
    raw_labels = group.get("labels")
    if raw_labels is None:
        raw_labels = {}
    if not isinstance(raw_labels, dict):
        raise ConfigError(f"{where}: key 'labels' must be a mapping of strings")
    labels = _labels(raw_labels, where)
    scheme = labels.pop("__scheme__", "http")
    if scheme not in ("http", "https"):
        raise ConfigError(f"{where}: key 'labels.__scheme__': {scheme[:40]!r} is not http or "
                          "https")
    metrics_path = labels.pop("__metrics_path__", "/metrics")
    if not metrics_path.startswith("/"):
        raise ConfigError(f"{where}: key 'labels.__metrics_path__' must start with '/'")
    params = {k[len("__param_"):]: v for k, v in labels.items() if k.startswith("__param_")}
    carried = {k: v for k, v in labels.items() if not k.startswith("__")}
    query = f"?{urlencode(params)}" if params else ""
    out = []
    for address in addresses:
        if len(address) > 300 or not _ADDRESS.match(address):
            raise ConfigError(f"{where}: target {address[:80]!r} is not host:port")
        url = f"{scheme}://{address}{quote(metrics_path, safe='/:@!$&()*+,;=-._~')}{query}"
        check_http_url(url, f"{where}: target {address!r}")
        own = {"instance": address, **carried}
        name = own.get("replica") or own["instance"]
        if not _NAME.match(name) or len(name) > 200:
            raise ConfigError(f"{where}: replica name {name[:80]!r} must match "
                              "[A-Za-z0-9[][A-Za-z0-9._:[]-]*")
        pairs = tuple(sorted((k, v) for k, v in own.items() if k != "replica"))
        out.append(Target(name, url, labels=pairs))
    return out


def _labels(raw: dict[Any, Any], where: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_NAME.match(key):
            raise ConfigError(f"{where}: label name {str(key)[:40]!r} must match "
                              "[A-Za-z_][A-Za-z0-9_]*")
        if not isinstance(value, str):
            raise ConfigError(f"{where}: key 'labels.{key}': the value must be a string, not "
                              f"{type(value).__name__}")
        if _CONTROL.search(value) or len(value) > MAX_LABEL_VALUE:
            raise ConfigError(f"{where}: key 'labels.{key}': control characters or more than "
                              f"{MAX_LABEL_VALUE} characters")
        if key in OWN_LABELS:
            raise ConfigError(f"{where}: key 'labels.{key}': rocmseat sets this label itself")
        labels[key] = value
    return labels


def read_targets_file(path: Path) -> list[Target]:
    """Read (safeio: regular file, size cap) and parse; ConfigError/ReadError name the file."""
    return parse_targets_file(read_regular_text(path), path)


@dataclass(frozen=True, slots=True)
class Reload:
    targets: list[Target] | None  # None: unchanged, or a bad re-read (kept the last good set)
    error: str | None = None


class TargetsFile:
    """A targets file watched for changes. `poll()` is cheap (one stat) when nothing changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int, int] | None = None
        self._last_text: str | None = None
        self._last_error: str | None = None

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
        if stamp == self._seen:
            return Reload(None)
        self._seen = stamp
        try:
            text = read_regular_text(self.path)
            if text == self._last_text:
                return Reload(None)
            targets = parse_targets_file(text, self.path)
        except (ConfigError, ReadError) as exc:
            if exc.message == self._last_error:
                return Reload(None)
            self._last_error = exc.message
            return Reload(None, exc.message)
        self._last_text, self._last_error = text, None
        return Reload(targets)

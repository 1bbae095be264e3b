"""The cached verdict's quick check (rocmseat.preflight.verdict_doc._vouched, issue 32 "Speed:
preflight's start"): a document it accepts is one the strict schema (pydantic_core) accepts, as
the same values; everything else goes to the schema, whose reason is the answer. So the NPD
answer on a verdict a run wrote imports no pydantic_core, and any other file is judged exactly
as before."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from rocmseat.preflight import verdict_doc
from rocmseat.preflight.verdict_doc import (
    UnusableVerdict,
    _document_validator,
    _vouched,
    _why,
    parse_verdict,
    verdict_path,
)
from tests.conftest import REPO
from tests.fleet import verdict_battery
from tests.preflight import test_verdict_doc
from tests.sysfs.conftest import SYSFS_FIXTURES

HOSTILE_TABLE = [
    text for text, _why in
    test_verdict_doc.test_hostile_verdict_files_are_unusable_never_ok.pytestmark[0].args[1]
]
SAMPLE = json.dumps({
    "schema": "rocmseat.verdict/v1", "written_at_unix_s": 1_800_000_000.25,
    "sysfs_root": "/sys", "families": ["aer", "numa", "pcie"], "gpus": 2,
    "profile": "x99-r9700", "profile_sha256": "a" * 64,
    "boot_id": "2b3c0b52-9a8e-4c1e-9f57-6d2f3a1b0c4d", "host": "gpu07", "exit_code": 1,
    "findings": [
        {"check_id": "pcie.link.ok", "severity": "ok", "subject": "0000:05:00.0",
         "message": "16 GT/s x16 \u00e9"},
        {"check_id": "aer.correctable", "severity": "fail", "subject": "0000:09:00.0",
         "message": "BadTLP 6,655"},
    ],
})
# where json.loads and the schema's parser (jiter) or regex engine (Rust's) part ways
EDGES = [
    SAMPLE.replace("1800000000.25", "NaN"),
    SAMPLE.replace("1800000000.25", "-Infinity"),
    SAMPLE.replace('"gpus": 2', '"gpus": 2, "gpus": 3'),
    SAMPLE.replace('"gpus": 2', '"gpus": ' + "9" * 5000),
    SAMPLE.replace("BadTLP 6,655", "\\ud800"),
    SAMPLE.replace("BadTLP 6,655", "\\udc00\\ud800"),
    SAMPLE.replace('"host": "gpu07"', '"host": "gpu07\\n"'),
    SAMPLE.replace("a" * 64, "a" * 64 + "\\n"),
    SAMPLE.replace('"aer.correctable"', '"aer.correctable\\n"'),
    SAMPLE.replace('"aer", ', '"aer\\n", '),
    SAMPLE.replace("1800000000.25", "-0.0"),
    SAMPLE.replace("1800000000.25", "1e-400"),
    SAMPLE.replace("1800000000.25", "1800000000"),
    SAMPLE.replace("1800000000.25", "true"),
    SAMPLE.replace('"gpus": 2', '"gpus": 2.0'),
    SAMPLE.replace('"gpus": 2', '"gpus": [[[[[[[[[[[[[[[[[[[[[[2]]]]]]]]]]]]]]]]]]]]]]'),
    SAMPLE.replace('"gpus": 2', '"gpus": ' + "[" * 300 + "]" * 300),
    SAMPLE.replace('"profile": "x99-r9700"', '"profile": null'),
    SAMPLE.replace('"profile": "x99-r9700", ', ""),
    SAMPLE.replace("BadTLP 6,655", "\u2028"),
    SAMPLE.replace("BadTLP 6,655", "\x85"),
    SAMPLE.replace("BadTLP 6,655", "x" * 1000),
    SAMPLE.replace("BadTLP 6,655", "x" * 1001),
    SAMPLE.replace('"families": ["aer", "numa", "pcie"]', '"families": ' + json.dumps(["a"] * 33)),
    "\ufeff" + SAMPLE,
    SAMPLE + " \n",
    SAMPLE + " x",
]


def _schema(text: str) -> tuple[bool, object]:
    """(accepted, the document or the reason) as the strict schema alone says."""
    from pydantic_core import ValidationError

    try:
        return True, _document_validator().validate_json(text)
    except ValidationError as exc:
        return False, _why(exc)
    except (ValueError, RecursionError) as exc:
        return False, type(exc).__name__


def _agree(text: str) -> bool:
    """True when the quick check vouched for `text` (and the schema then agrees, same values)."""
    doc = _vouched(text)
    if doc is None:
        return False
    accepted, schema_doc = _schema(text)
    assert accepted, (text[:200], schema_doc)
    # the same values of the same types (1 == 1.0 in a dict comparison; not in JSON)
    assert json.dumps(schema_doc, sort_keys=True) == json.dumps(doc, sort_keys=True), text[:200]
    return True


def _mutations(text: str, rounds: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        how = rng.choice(verdict_battery.CONTENT)
        out.append(verdict_battery.mutate_content(text, how, rng))
        # and a character of the text changed, dropped or doubled anywhere
        at = rng.randrange(len(text))
        char = rng.choice('0123456789"\\{}[],:.-eE \nabcxz\u00e9\x7f\x1b')
        out.append(rng.choice((text[:at] + char + text[at + 1:], text[:at] + text[at + 1:],
                               text[:at] + text[at] + text[at:])))
    return out


def test_every_document_the_quick_check_accepts_the_schema_accepts_as_the_same_values():
    texts = [SAMPLE, *EDGES, *HOSTILE_TABLE, *_mutations(SAMPLE, 1500, 32)]
    vouched = [text for text in texts if _agree(text)]
    # not vacuous: the sample and some changed documents were accepted, and most were not
    assert SAMPLE in vouched
    assert 20 < len(vouched) < len(texts) // 2, len(vouched)
    # every edge the two parsers read differently was left to the schema
    assert [edge for edge in EDGES[:10] if edge in vouched] == []


def test_a_bad_file_gets_the_schemas_reason_as_before():
    for text in [*EDGES, *HOSTILE_TABLE]:
        if _vouched(text) is not None:
            continue
        accepted, said = _schema(text)
        with pytest.raises(UnusableVerdict) if not accepted else _nothing():
            parse_verdict(text)
        if not accepted and said not in ("ValueError", "RecursionError"):
            with pytest.raises(UnusableVerdict, match=f"^{said}$"):
                parse_verdict(text)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_the_verdict_a_run_writes_is_vouched_for_without_pydantic_core(rocmseat_cli, tmp_path):
    for tree in ("x99-r9700", "x99-r9700-degraded", "mi300x-hive", "no-amdgpu"):
        state = tmp_path / tree
        rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / tree), "--state-dir",
                     str(state), "--json")
        assert _agree(verdict_path(state).read_text()), tree
    code = ("import sys; from pathlib import Path; from rocmseat.preflight import verdict_doc; "
            "verdict_doc.parse_verdict(Path(sys.argv[1]).read_text()); "
            "print('pydantic_core' in sys.modules)")
    good = verdict_path(tmp_path / "x99-r9700")
    said = subprocess.run([sys.executable, "-c", code, str(good)], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert said.stdout == "False\n", said.stderr
    # the check can fail: a file it does not vouch for is the schema's
    good.write_text(good.read_text().replace('"gpus": 4', '"gpus": 4.0'))
    said = subprocess.run([sys.executable, "-c", code, str(good)], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert "UnusableVerdict: cached verdict has an invalid gpus" in said.stderr
    assert verdict_doc._vouched(good.read_text()) is None

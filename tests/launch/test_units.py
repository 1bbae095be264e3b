from __future__ import annotations

import pytest

from rocmseat.launch.units import exec_line, quote_arg, substitute


@pytest.mark.parametrize(
    ("arg", "quoted"),
    [
        ("/usr/bin/rocmseat", "/usr/bin/rocmseat"),
        ("50%", "50%%"),  # a specifier otherwise
        ("$HOME", "$$HOME"),  # a variable otherwise
        ("a b", '"a b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("", '""'),
        ("semi;colon", '"semi;colon"'),
    ],
)
def test_quote_arg(arg, quoted):
    assert quote_arg(arg) == quoted


def test_exec_line():
    assert exec_line(["/bin/x", "--pair", "0000:05:00.0,0000:09:00.0", "a b"]) == (
        '/bin/x --pair 0000:05:00.0,0000:09:00.0 "a b"')


def test_substitute_drops_empty_placeholder_lines():
    text = "A=@A@\n@EMPTY@\nB=@B@ @EMPTY@\n"
    assert substitute(text, {"A": "1", "B": "2", "EMPTY": ""}) == "A=1\nB=2 \n"


def test_substitute_refuses_missing_values():
    with pytest.raises(KeyError, match="MISSING"):
        substitute("x=@MISSING@\n", {})


def test_missing_templates_name_the_path(tmp_path):
    from rocmseat.errors import ReadError
    from rocmseat.launch.units import load_templates

    with pytest.raises(ReadError, match=r"replica\.service\.in"):
        load_templates(tmp_path)

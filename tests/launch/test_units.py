from __future__ import annotations

import pytest

from rocmseat.launch.units import exec_line, path_word, quote_arg, substitute


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


@pytest.mark.parametrize(
    ("program", "quoted"),
    [
        ("/opt/b$in/rocmseat", "/opt/b$in/rocmseat"),  # the path is not variable-expanded
        ("/opt/50%/rocmseat", "/opt/50%%/rocmseat"),  # but specifier-expanded
        ("/opt/a b/rocmseat", '"/opt/a b/rocmseat"'),
    ],
)
def test_the_program_keeps_its_dollar(program, quoted):
    """systemd takes an Exec program path literally apart from specifiers: `$$` there would
    name another file (`systemd-analyze verify`: "Command /opt/b$$in/rocmseat is not
    executable"); the tools test below checks this against systemd itself."""
    assert quote_arg(program, first=True) == quoted


@pytest.mark.parametrize("program", ["-/bin/x", "+/bin/x", "@/bin/x", "!/bin/x", ":x", ""])
def test_a_program_systemd_would_read_a_prefix_from_is_refused(program):
    with pytest.raises(ValueError, match="cannot be an Exec program"):
        quote_arg(program, first=True)


@pytest.mark.parametrize(
    ("path", "word"),
    [
        ("/srv/cache", "/srv/cache"),
        ("/srv/c$che", "/srv/c$che"),  # ReadWritePaths= does not expand variables
        ("/srv/50%", "/srv/50%%"),
        ("/srv/a b", '"/srv/a b"'),
        ('/srv/q"uote', '"/srv/q\\"uote"'),
    ],
)
def test_path_word(path, word):
    assert path_word(path) == word


@pytest.mark.parametrize("value", ["/srv/x\x00ExecStartPre=+/srv/evil.sh\x00#", "/srv/a\nb",
                                   "/srv/a\rb", "/srv/\x1b[31m", "/srv/\x7f", "/srv/\x85"])
def test_control_characters_never_reach_a_unit_word(value):
    with pytest.raises(ValueError, match="control character"):
        path_word(value)
    with pytest.raises(ValueError, match="control character"):
        quote_arg(value)


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

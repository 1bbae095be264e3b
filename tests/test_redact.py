"""rocmseat/redact.py: secrets never leave the process (issue 11)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmseat.redact import (
    REDACTED,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_text,
    redact_url,
)


@pytest.mark.parametrize(
    ("name", "secret"),
    [("--api-key", True), ("--hf-token", True), ("VLLM_API_KEY", True), ("HF_TOKEN", True),
     ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD", True), ("--ssl-keyfile-password", True),
     ("access_token", True), ("--tokenizer", False), ("--max-num-batched-tokens", False),
     ("TOKENIZERS_PARALLELISM", False), ("NCCL_PROTO", False), ("--kv-cache-dtype", False),
     ("--speculative-config", False), ("HIP_VISIBLE_DEVICES", False), ("MONKEY", False),
     # issue 18, item 5: the usual names, as parts of a name
     ("pass", True), ("apitoken", True), ("jwt", True), ("x-jwt-assertion", True),
     ("apiToken", True), ("accessToken", True), ("api_key", True), ("MYPASSWORD", True),
     ("db_passwd", True), ("dbpass", True), ("client_secret", True), ("sessionid", True),
     ("SESSION", True), ("oauth", True), ("x-auth", True), ("authorization", True),
     ("bearer", True), ("credential", True), ("GOOGLE_APPLICATION_CREDENTIALS", True),
     ("signature", True), ("X-Amz-Signature", True), ("passphrase", True),
     ("--num-speculative-tokens", False), ("author", False), ("--served-model-name", False),
     ("AITER_JIT_DIR", False), ("OMP_NUM_THREADS", False), ("--trust-remote-code", False)],
)
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_argv_both_spellings_and_urls():
    argv = ["vllm", "serve", "/m", "--api-key", "sk-1", "--hf-token=hf_2", "--tokenizer", "/t",
            "--port", "8000", "--webhook", "http://user:pw@am:9093/api?token=abc&x=1"]
    out = redact_argv(argv)
    assert out == ["vllm", "serve", "/m", "--api-key", REDACTED, f"--hf-token={REDACTED}",
                   "--tokenizer", "/t", "--port", "8000", "--webhook",
                   f"http://{REDACTED}@am:9093/api?token={REDACTED}&x=1"]


def test_argv_flag_at_the_end_has_no_value_to_hide():
    assert redact_argv(["x", "--api-key"]) == ["x", "--api-key"]


def test_env():
    env = {"VLLM_API_KEY": "sk-9", "HF_TOKEN": "", "NCCL_PROTO": "Simple",
           "PROXY": "http://a:b@proxy:3128"}
    assert redact_env(env) == {"VLLM_API_KEY": REDACTED, "HF_TOKEN": "", "NCCL_PROTO": "Simple",
                               "PROXY": f"http://{REDACTED}@proxy:3128"}


@pytest.mark.parametrize(
    ("url", "shown"),
    [("http://127.0.0.1:8000/metrics", "http://127.0.0.1:8000/metrics"),
     ("http://u:p@[::1]:8000/metrics", f"http://{REDACTED}@[::1]:8000/metrics"),
     ("https://user@host/x", f"https://{REDACTED}@host/x"),
     ("http://u:p@[::1", f"http://{REDACTED}@[::1"),  # does not parse: still no userinfo
     ("not a url", "not a url")],
)
def test_url(url, shown):
    assert redact_url(url) == shown


def test_text_with_urls_in_an_error_message():
    msg = "scrape http://admin:hunter2@10.0.0.1:8000/metrics failed: refused"
    assert "hunter2" not in redact_text(msg) and "10.0.0.1:8000" in redact_text(msg)


# Characters RFC 3986 allows in userinfo unescaped (no / ? # @ [ ]), plus percent escapes.
_USERINFO = st.text(alphabet=st.characters(blacklist_characters="/?#@[]\\",
                                           blacklist_categories=("Cs",)), max_size=30)


@given(_USERINFO, _USERINFO.filter(bool))
def test_userinfo_never_survives(user, password):
    shown = redact_url(f"http://{user}:{password}@host:1/metrics")
    assert f":{password}@" not in shown
    assert shown.endswith("@host:1/metrics")


@pytest.mark.parametrize(
    "url",
    ["http://user:s3cret pw@127.0.0.1:9/metrics", "http://user:pa/ss@127.0.0.1:1/metrics",
     "http://user:pa#ss@127.0.0.1:1/metrics", "http://user:pa?ss@127.0.0.1:1/metrics",
     "http://amuser:am/secret@127.0.0.1:9093/api/v2/alerts"],
)
def test_passwords_a_parser_would_read_as_path_or_host_are_hidden(url):
    """A parser ends the authority at / ? # or a space and would show the password as host or
    path (issue 11 review): everything up to the last @ is userinfo."""
    secret = url.split("://", 1)[1].rsplit("@", 1)[0].split(":", 1)[1]
    assert secret not in redact_url(url)
    assert redact_url(url).endswith("@" + url.rsplit("@", 1)[1])
    message = f"--target 'r={url}': the port is not a number"
    assert secret not in redact_text(message)


def test_targets_file_params_of_the_usual_names_are_hidden():
    """Issue 18, item 5: `__param_pass`, `__param_apitoken` and `__param_jwt` of a targets
    file were printed in clear (`...?pass=...&apitoken=...&jwt=...&token=<redacted>`)."""
    url = "http://10.0.0.7:8000/metrics?pass=p1&apitoken=a2&jwt=j3&token=t4&shard=2"
    assert redact_url(url) == (f"http://10.0.0.7:8000/metrics?pass={REDACTED}&apitoken="
                               f"{REDACTED}&jwt={REDACTED}&token={REDACTED}&shard=2")


def test_a_flag_after_a_secret_switch_is_not_taken_for_its_value():
    # `--disable-signature-check` takes no value: the next flag and its value stay readable
    assert redact_argv(["--disable-signature-check", "--port", "8000", "--api-key", "k"]) == [
        "--disable-signature-check", "--port", "8000", "--api-key", REDACTED]


def test_every_key_of_a_multi_key_api_key_flag_is_redacted():
    """vLLM's --api-key takes one or more keys (nargs="+"): the second one was printed in clear."""
    from rocmseat.redact import redact_argv

    assert redact_argv(["vllm", "serve", "m", "--api-key", "k1", "k2", "--port", "1"]) == [
        "vllm", "serve", "m", "--api-key", "<redacted>", "<redacted>", "--port", "1"]
    assert redact_argv(["--api-key", "-dash-key", "--port", "1"]) == [
        "--api-key", "<redacted>", "--port", "1"]


@pytest.mark.parametrize(("text", "secret"), [
    ("401 for http://admin:hunter2@127.0.0.1:9/restart?token=tok-SECRET", "hunter2"),
    ("401 for http://admin:hunter2@127.0.0.1:9/restart?token=tok-SECRET", "tok-SECRET"),
    ("curl -H 'Authorization: Bearer brr-SECRET' refused", "brr-SECRET"),
    ('curl -H "Authorization: Basic dXNlcjpwYXNz" refused', "dXNlcjpwYXNz"),
    ("got bearer brr-SECRET back", "brr-SECRET"),
    ("exec vllm serve m --api-key sk-SECRET --port 8000", "sk-SECRET"),
    ("exec vllm serve m --api-key=sk-SECRET", "sk-SECRET"),
    ("password=hunter2 token: tok-SECRET", "hunter2"),
    ("password=hunter2 token: tok-SECRET", "tok-SECRET"),
    ('{"password": "hunter2"}', "hunter2"),
    ("HF_TOKEN=hf_SECRET VLLM_API_KEY=sk-SECRET", "hf_SECRET"),
    ("HF_TOKEN=hf_SECRET VLLM_API_KEY=sk-SECRET", "sk-SECRET"),
    ("Cookie: session=s3cr3t; theme=dark", "s3cr3t"),
])
def test_redact_output_hides_every_secret_shape_a_child_prints(text, secret):
    """What a restart command or systemctl printed (issue 28): redacted where the failure text
    is made, so it is gone before spaces become `_` in a log line."""
    from rocmseat.redact import redact_output

    out = redact_output(text)
    assert secret not in out and REDACTED in out
    assert secret not in "_".join(out.split())


@pytest.mark.parametrize("text", [
    "r0 runs without its drafter since 2026-12-01T08:00:00Z: the drafter's first token was "
    "rejected after a fresh compile; fix the drafter and run `rocmseat remediate reset r0`",
    "a basic check failed: max-num-batched-tokens=512 tokenizer=foo",
    "systemctl restart rocmseat-heal-r0.service failed (1): See journalctl -xe",
])
def test_redact_output_leaves_plain_words(text):
    from rocmseat.redact import redact_output

    assert redact_output(text) == text

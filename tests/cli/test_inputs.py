"""Command-line input validation (harness/cli/inputs.py): a bad value gets one clear argparse error, never a
traceback."""

import argparse
import os

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.cli import inputs
from harness.cli.inputs import port, positive_int, results_dir, url

Bad = argparse.ArgumentTypeError


@pytest.mark.parametrize("s, n", [("1", 1), ("8000", 8000), ("65535", 65535), ("00080", 80)])
def test_port_accepts_the_tcp_range(s, n):
    assert port(s) == n


@pytest.mark.parametrize("s, msg", [("0", "between 1 and 65535"), ("65536", "between 1 and 65535"),
                                    ("-1", "whole number"), ("http", "whole number"), ("80.0", "whole number"),
                                    ("", "whole number"), (" 80", "whole number"), ("1_000", "whole number"),
                                    ("٣", "whole number"), ("9" * 5000, "whole number")])
def test_port_refuses(s, msg):
    with pytest.raises(Bad, match=msg):
        port(s)


def test_positive_int():
    assert positive_int("1") == 1 and positive_int("512") == 512
    for s in ("0", "-3", "two", "1.5", ""):
        with pytest.raises(Bad):
            positive_int(s)


@pytest.mark.parametrize("u", ["http://localhost:8000", "https://example.com", "http://127.0.0.1:1/v1?x=1#f",
                               "HTTP://Host.Example:65535/", "http://[::1]:8000/", "http://[fe80::1]",
                               "http://vllm-svc.ns.svc.cluster.local/v1", "http://my_host:80"])
def test_url_accepts(u):
    assert url(u) == u


@pytest.mark.parametrize("u, msg", [
    ("localhost:8000", "http:// or https://"), ("ftp://h", "http:// or https://"), ("http:/h", "http:// or https://"),
    ("", "http:// or https://"), ("http://", "no host"), ("http:///path", "no host"), ("http://:80", "no host"),
    ("http://h:0", "between 1 and 65535"), ("http://h:65536", "between 1 and 65535"),
    ("http://h:", "whole number"), ("http://h:+80", "whole number"), ("http://h:80:90", "whole number"),
    ("http://[::1", "IPv6"), ("http://[zz]:80", "IPv6"), ("http://[::1]x", "after the IPv6"),
    ("http://h\t:80", "whitespace"), (" http://h", "whitespace"), ("http://h\n", "whitespace"),
    ("http://exa mple", "whitespace"), ("http://ex%41mple", "invalid host"), ("http://bücher.de", "xn--"),
    ("http://-h", "invalid host"),
])
def test_url_refuses(u, msg):
    with pytest.raises(Bad, match=msg):
        url(u)


@pytest.mark.parametrize("u", ["http://user:hunter2@host:8000", "https://token@host", "http://u:p@[::1]:80",
                               "ftp://user:hunter2@host", "http://user:hunter2@host:notaport"])
def test_url_with_credentials_is_refused_without_echoing_them(u):
    with pytest.raises(Bad) as e:
        url(u)
    assert "hunter2" not in str(e.value) and "token" not in str(e.value)
    if u.startswith("http"):
        assert "secrets must not be in URLs" in str(e.value) and "written to results" in str(e.value)


def test_results_dir_accepts_existing_or_creatable(tmp_path):
    assert results_dir(str(tmp_path)) == str(tmp_path)
    assert results_dir(str(tmp_path / "new" / "deeper")) == str(tmp_path / "new" / "deeper")
    assert results_dir("results") == "results"  # relative to the working directory


def test_results_dir_refuses_a_file_on_the_way(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(Bad, match="exists and is not a directory"):
        results_dir(str(f))
    with pytest.raises(Bad, match=f"cannot be created: {f} is a file"):
        results_dir(str(f / "x" / "y"))
    with pytest.raises(Bad, match="cannot be created: /etc/passwd is a file"):
        results_dir("/etc/passwd/x")
    with pytest.raises(Bad, match=f"{f} is a file"):
        results_dir(str(f / ".." / "x"))  # the OS would not go through a file either


def test_results_dir_refuses_unwritable(tmp_path, monkeypatch):
    # tests may run as root, for whom chmod does not deny anything: stand in for the permission check
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(inputs.os, "access", lambda p, mode: False if str(p) == str(ro) else real(p, mode))
    with pytest.raises(Bad, match="is not writable"):
        results_dir(str(ro))
    with pytest.raises(Bad, match=f"cannot be created: {ro} is not writable"):
        results_dir(str(ro / "run"))


def test_results_dir_refuses_odd_paths(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(Bad, match="broken symbolic link"):
        results_dir(str(tmp_path / "dangling" / "x"))
    for s, msg in (("", "must not be empty"), ("a\x00b", "not a valid path"), ("x" * 5000, "cannot be used")):
        with pytest.raises(Bad, match=msg) as e:
            results_dir(s)
        assert len(str(e.value)) < 200  # a pasted blob is not echoed whole


# prefixes get random text past the first checks, into the host, port and path handling
prefixes = st.sampled_from(["", "http://", "https://", "http://[", "http://h:", "http://u@", "/tmp/", "/etc/passwd/"])


@settings(max_examples=200, deadline=None)
@given(st.tuples(prefixes, st.text()).map("".join))
@example("\udcff")
@example("http://[")
@example("http://h:99999999999999999999999")
def test_arbitrary_strings_only_ever_give_argument_type_errors(s):
    for f in (port, positive_int, url, results_dir):
        try:
            f(s)
        except Bad as e:
            assert str(e)

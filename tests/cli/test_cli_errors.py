"""Bad input: one clear message, non-zero exit, and a results folder marked failed (never a success)."""

import json
import socket

from harness.cli.main import main


def run_json(results):
    runs = list(results.iterdir())
    assert len(runs) == 1
    return json.loads((runs[0] / "run.json").read_text())


def test_unknown_stack(tmp_path, capsys):
    assert main(["run", "--stack", "nope", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown stack 'nope'" in err and "vllm" in err
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_unknown_profile(tmp_path, capsys):
    assert main(["run", "--stack", "vllm", "--profile", "nope", "--results-dir", str(tmp_path)]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err


def test_malformed_profile_names_field(tmp_path, capsys, write_profile):
    p = write_profile(output_tokens=0)
    assert main(["run", "--stack", "vllm", "--profile", str(p), "--results-dir", str(tmp_path / "r")]) == 2
    assert "field 'output_tokens'" in capsys.readouterr().err


def test_unreachable_url_marks_run_failed(tmp_path, capsys):
    rc = main(["run", "--stack", "endpoint", "--url", "http://127.0.0.1:9", "--results-dir", str(tmp_path)])
    assert rc == 2
    assert "cannot reach http://127.0.0.1:9/v1/models" in capsys.readouterr().err
    meta = run_json(tmp_path)
    assert meta["status"] == "failed" and "cannot reach" in meta["reason"]


def test_endpoint_without_url(tmp_path, capsys):
    assert main(["run", "--stack", "endpoint", "--results-dir", str(tmp_path)]) == 2
    assert "URL=" in capsys.readouterr().err


def test_port_in_use_marks_run_failed(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc = main(["run", "--stack", "vllm", "--port", str(port), "--results-dir", str(tmp_path)])
    assert rc == 2
    assert f"port {port} on 127.0.0.1 is already in use" in capsys.readouterr().err
    assert run_json(tmp_path)["status"] == "failed"

from tests.conftest import run_doctor


def test_version_and_help():
    r = run_doctor("--version")
    assert r.returncode == 0 and "doctor" in r.stdout
    r = run_doctor("--help")
    assert r.returncode == 0
    for cmd in ("check", "explain", "train", "plan", "report"):
        assert cmd in r.stdout


def test_unknown_command_is_usage_error_exit_2():
    r = run_doctor("no-such-command")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr


def test_check_bad_launch_is_one_line_exit_2(tmp_path):
    r = run_doctor("check", "--", "bash", str(tmp_path / "missing.sh"))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

"""Shell-level failures of a launch script (knowledge/rules/misc.toml shell-script-crlf-line-endings, and
crossnode.toml remote-workdir-missing, which reads the same shells' `cd` errors): real scripts run by the
real bash and dash, the two shells a launch script meets (dash is Debian's and Ubuntu's /bin/sh)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from matching.explain import explain_paths


def run_script(shell: str, script, log) -> str:
    """The shell's output as a log keeps it: bytes, a carriage return left as it was printed."""
    out = subprocess.run([shutil.which(shell) or shell, str(script)], capture_output=True, timeout=30)
    log.write_bytes(out.stderr + out.stdout)
    return log.read_bytes().decode()


@pytest.mark.parametrize("shell,said", [("bash", "$'\\r': command not found"), ("dash", ": not found")])
def test_a_crlf_launch_script_is_its_line_endings_not_a_missing_directory(tmp_path, shell, said):
    # a launch script saved with Windows line endings: its `cd DIR` fails because the word is "DIR\r"
    # (bash prints it $'DIR\r', dash raw)
    (tmp_path / "work").mkdir()
    script = tmp_path / "run.sh"
    script.write_bytes(b"#!/bin/sh\r\nexport NNODES=2\r\n\r\ncd " + str(tmp_path / "work").encode() + b"\r\necho go\r\n")
    log = tmp_path / "crlf.log"
    assert said in run_script(shell, script, log), log.read_text()
    assert explain_paths([str(log)])[0].rule == "shell-script-crlf-line-endings"
    # the same script with Unix line endings and a directory that is not there: the missing directory
    script.write_bytes(script.read_bytes().replace(b"\r\n", b"\n").replace(b"/work", b"/gone"))
    assert "cd" in run_script(shell, script, log), log.read_text()
    assert explain_paths([str(log)])[0].rule == "remote-workdir-missing"


def test_a_missing_directory_whose_name_bash_quotes_is_still_missing(tmp_path):
    # bash quotes a name with a non-printable character ($'...'); without a carriage return it is a missing directory
    script = tmp_path / "run.sh"
    script.write_bytes(b"cd " + str(tmp_path).encode() + b"/$'data\\tset'\n")
    log = tmp_path / "tab.log"
    assert "$'" in run_script("bash", script, log), log.read_text()
    assert explain_paths([str(log)])[0].rule == "remote-workdir-missing"


def test_a_launchers_unresolvable_host_is_the_network(tmp_path):
    # a real ssh to a name that does not resolve (what pdsh, mpirun and DeepSpeed's runner print for a
    # hostfile entry no node's /etc/hosts or DNS knows), and MPICH's TCP netmod line for the same
    out = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "doctor-no-such-host.invalid",
                          "true"], capture_output=True, text=True, timeout=30)
    assert "Could not resolve hostname doctor-no-such-host.invalid" in out.stderr, out.stderr
    log = tmp_path / "ssh.log"
    log.write_text(out.stderr)
    top = explain_paths([str(log)])[0]
    assert (top.rule, top.category) == ("generic-connection", "network")
    log.write_text("MPID_nem_tcp_init(379)..................: gethostbyname failed, node-7 (errno 2)\n")
    assert explain_paths([str(log)])[0].category == "network"

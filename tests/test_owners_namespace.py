"""This kernel found by NVML's host PIDs from inside a real new PID namespace (``unshare``).

The child runs under ``unshare --pid --fork`` (the host's /proc still mounted: ``NSpid``
tells) and ``--mount-proc`` (a container's own /proc: only memory can tell). NVML's lists
are made up here (no GPU); what is real is the namespace and the /proc nbgpu reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
CHILD = """
import json, os, sys
from nbgpu.diagnostics.owners import MISMATCH, attribute, match_hidden, tree_pids
from nbgpu.sources.base import ProcessInfo
outside = int(sys.argv[1])  # the test's own PID: a process of another PID namespace
here = os.readlink("/proc/self")  # this process as the mounted /proc numbers it
host = int(here) if int(here) != os.getpid() else 4_000_001  # a made-up host PID under --mount-proc
reserved = 3 << 30
procs = {0: [ProcessInfo(host, reserved + (1 << 29)), ProcessInfo(outside, 1 << 30)]}
torch = [{"framework": "torch", "device": "cuda:0", "index": 0, "uuid": "",
          "allocated_bytes": reserved, "reserved_bytes": reserved}]
mine = tree_pids()
status, _ = attribute(procs, mine, float(reserved))
found = match_hidden(procs, {os.getpid()}, devices=[], frameworks=torch)  # this PID, numbered here
print(json.dumps({"pid": os.getpid(), "host": host, "status": status, "mine_has_host": host in mine,
                  "mine_has_outside": outside in mine,
                  "found": {str(k): [m.who, m.how, m.detail] for k, m in found.items()}}))
"""


def in_namespace(*flags: str) -> dict:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = ["unshare", "--pid", "--fork", *flags, sys.executable, "-c", CHILD, str(os.getpid())]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    if proc.returncode != 0 and "unshare" in proc.stderr and os.environ.get("CI") != "true":
        pytest.skip(f"a new PID namespace is not permitted here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_with_the_hosts_proc_visible_this_kernels_tree_is_walked_in_its_numbering():
    got = in_namespace()
    assert got["pid"] != got["host"]
    # the process tree is the one /proc numbers: this process's host PID, not the host's PID 1's
    assert got["mine_has_host"] and not got["mine_has_outside"] and got["status"] == "ok"
    # NSpid ties a host PID to a PID of this namespace, with certainty
    detail = f"matched by NSpid: pid {got['pid']} here"
    assert got["found"][str(got["host"])] == ["this kernel", "NSpid", detail]
    assert got["found"].get(str(os.getpid()), ["", ""])[0] != "this kernel"


def test_with_a_containers_own_proc_memory_is_the_evidence():
    got = in_namespace("--mount-proc")
    assert got["status"] == "pid_namespace_mismatch" and not got["mine_has_host"]
    assert got["found"] == {str(got["host"]): ["this kernel", "memory", "matched by memory, 3.5 GiB"]}

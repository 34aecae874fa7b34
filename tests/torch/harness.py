"""Starts N ranks of a worker script as real processes (torchrun-style environment: RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and collects what each rank wrote to its JSON file."""
import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    def __init__(self, script, world, args=(), env=None, timeout=240):
        self.dir = tempfile.mkdtemp(prefix="braid_torch_")
        # the ranks' files are read while the test runs; the folder goes when pytest exits
        # (failures print the logs they need into the assertion)
        atexit.register(shutil.rmtree, self.dir, True)
        port = free_port()
        self.procs = []
        self.world = world
        self.timeout = timeout
        for r in range(world):
            e = dict(os.environ)
            e.update({"RANK": str(r), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port), "BRAID_TEST_OUT": os.path.join(self.dir, f"r{r}.json"),
                      "OMP_NUM_THREADS": "1"})
            e.update(env or {})
            with open(os.path.join(self.dir, f"r{r}.log"), "w") as log:
                self.procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, script),
                                                    *args], env=e, stdout=log,
                                                   stderr=subprocess.STDOUT))

    def wait(self, ranks=None):
        """Waits for ranks (default all) up to the timeout, then kills every rank still alive.
        Returns {rank: returncode} (None: killed after the timeout)."""
        end = time.monotonic() + self.timeout
        codes = {}
        for r in ranks if ranks is not None else range(self.world):
            try:
                codes[r] = self.procs[r].wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[r] = None
        return codes

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def log(self, r):
        with open(os.path.join(self.dir, f"r{r}.log")) as f:
            return f.read()

    def result(self, r):
        path = os.path.join(self.dir, f"r{r}.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)

    def logs(self):
        return "\n".join(f"--- rank {r} ---\n{self.log(r)[-3000:]}" for r in range(self.world))


def run(script, world, args=(), env=None, timeout=240):
    """Runs a job to completion; returns (job, [result of each rank]) and raises with the logs
    if a rank failed."""
    job = Job(script, world, args, env, timeout)
    codes = job.wait()
    job.kill_all()
    bad = {r: c for r, c in codes.items() if c != 0}
    if bad:
        raise AssertionError(f"ranks failed (exit codes {bad}):\n{job.logs()}")
    return job, [job.result(r) for r in range(world)]

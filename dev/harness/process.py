"""A child process that cannot outlive its test or tool."""

import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env(tree=ROOT):
    """The environment for a CPython child: tree's packages first."""
    e = dict(os.environ)
    e["PYTHONPATH"] = tree + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def python(module, *args):
    """argv running a module of this checkout on this CPython."""
    return [sys.executable, "-m", module] + [str(a) for a in args]


def run_module(module, *args, timeout, cwd=ROOT, env=None):
    """A module of this checkout run on this CPython to its end, within
    timeout seconds, its output captured as text: the CompletedProcess."""
    return subprocess.run(
        python(module, *args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


class Process(subprocess.Popen):
    """A Popen (same arguments) in a session of its own: what it starts (a
    fleet's devices, Spark's JVM) is in its process group, so close() ends
    them all, whatever way the test ended. As a context manager it closes."""

    def __init__(self, args, **kw):
        super().__init__(args, start_new_session=True, **kw)

    def stop(self, timeout=30):
        """SIGTERM, the clean stop, and its exit status within timeout
        seconds; else the group is killed and TimeoutExpired raised."""
        if self.poll() is None:
            self.send_signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise

    def close(self):
        """SIGKILL to the whole group (no goodbye), then reaped."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group ended with a clean stop
        self.wait()

    def __exit__(self, *exc):
        self.close()
        return super().__exit__(*exc)


def processes():
    """A generator for process fixtures: yields start(cmd, cwd) -> Process
    (output captured as text); every one is closed at teardown."""
    procs = []

    def start(cmd, cwd):
        p = Process(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(p)
        return p

    try:
        yield start
    finally:
        for p in procs:
            p.close()
            for f in (p.stdin, p.stdout, p.stderr):
                if f:
                    f.close()  # the test is over: nobody reads what is left

"""Child processes that speak lines: the bridge benchmark's receivers and senders."""

import json
import queue
import subprocess
import threading

from dev.harness.process import ROOT, Process, env


class Child:
    """A process whose stdout lines are read by a thread, so reads can time out."""

    def __init__(self, args, cwd=ROOT, log=None):
        self.args = args
        self.err = open(log, "a") if log else subprocess.DEVNULL
        self.p = Process(
            args,
            cwd=cwd,
            env=env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def line(self, timeout):
        try:
            s = self.lines.get(timeout=timeout)
        except queue.Empty:
            s = None
        if s is None:
            raise RuntimeError(
                "%s: no answer within %.0f s (exit code %s)"
                % (" ".join(map(str, self.args[:4])), timeout, self.p.poll())
            )
        return s

    def expect(self, word, timeout=30):
        s = self.line(timeout)
        if s.split()[0] != word:
            raise RuntimeError("%s: expected %r, got %r" % (self.args[:4], word, s[:200]))
        return s

    def ask(self, cmd, timeout):
        """Send a command; the next JSON line is its result ("ok" lines skipped)."""
        self.send(cmd)
        while True:
            s = self.line(timeout)
            if s.startswith("{"):
                return json.loads(s)

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def wait(self, timeout=30):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        self.p.close()

    def close(self):
        if self.p.poll() is None:
            try:
                self.send("quit")
            except OSError:
                pass
            self.wait(10)
        if self.err is not subprocess.DEVNULL:
            self.err.close()
        # The pipes too (a ResourceWarning each otherwise); stdout once its
        # reader has met the end, which a process gone gives at once.
        self.p.stdin.close()
        self.reader.join(5)
        if not self.reader.is_alive():
            self.p.stdout.close()

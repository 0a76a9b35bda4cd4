"""Tell reamer's enforcer how far a training job has come, so that it measures the job's pace.

    import reamer_progress

    for step, batch in enumerate(loader, start=1):
        train_step(batch)
        reamer_progress.report(step)

The enforcer sees a training job's threads in the scheduler, but not what a slower memory
system, shared caches or a lower turbo cost it: only the job's own count of steps (or samples)
shows that. `report(count)` sends the count done since the job started; the daemon turns the
counts into steps a second over its last 5 s (`enforcer status`, `enforcer observe`, the
metrics `reamer_training_pace_steps_per_second` and `reamer_training_progress_steps`).

- The standard library only; Python 3.8 or later.
- Cheap on every step: at most one report a second is sent, the others return at once. Each
  report also carries the count's mean over the time since the one before, which every call
  keeps up: a job whose steps come in bursts (a DataLoader's workers finishing their batches
  together) has a count that climbs in stairs, and the daemon reads its pace from the means,
  not from where in a burst each report fell.
- The daemon takes the job from the sending process: the process must belong to a training
  job (started with `enforcer launch --training NAME -- python train.py`, which also sets
  REAMER_SOCKET, or named in the config's [[training]]). A process of no job is refused.
- Training never fails because of reamer. Without a daemon (REAMER_SOCKET unset, the socket
  missing, the daemon refusing) `report` does nothing, says why once on stderr, and tries
  again 30 s later (REAMER_PROGRESS_RETRY_S, in seconds, where set: for a job that outlives
  its daemon, so that reports resume soon after a new one starts). A report waits at most
  0.2 s for the daemon.
"""

import json
import os
import socket
import sys
import time

__all__ = ["report", "Reporter", "SOCKET_ENV", "RETRY_ENV"]

#: Set by `enforcer launch` for the command it starts: the daemon's control socket.
SOCKET_ENV = "REAMER_SOCKET"
#: At most one report this often.
PERIOD_S = 1.0
#: After a failure, the next try this much later.
RETRY_S = 30.0
#: Where set (seconds, above 0), the next try after a failure comes this much later instead:
#: for a job that outlives its daemons, as a benchmark's job does while a daemon is started
#: for each of its windows.
RETRY_ENV = "REAMER_PROGRESS_RETRY_S"
#: How long a report waits for the daemon's answer.
TIMEOUT_S = 0.2
#: A mean over a longer time is not sent (the daemon refuses it): after a long silence, the
#: count alone.
MEAN_MAX_S = 60.0


class Reporter:
    """One connection to the daemon and the state of its reports. `report` below uses one of
    its own; make one where the socket is not REAMER_SOCKET's."""

    def __init__(self, path=None, period_s=PERIOD_S, retry_s=None, timeout_s=TIMEOUT_S):
        self.path = path if path is not None else os.environ.get(SOCKET_ENV)
        self.period_s = period_s
        self.timeout_s = timeout_s
        #: The daemon's last answer: {"job": ..., "steps_per_s": ...}, or None.
        self.last_answer = None
        self._socket = None
        self._reader = None
        self._sent_at = None
        self._retry_at = 0.0
        self._said = set()
        # The count's mean since the last report sent (at _sent_at): its integral over that
        # time, the count being constant between two calls.
        self._last_count = None
        self._count_seconds = 0.0
        self.retry_s = retry_s if retry_s is not None else self._retry_from_env()

    def _retry_from_env(self):
        """RETRY_ENV's seconds where it holds a number above 0; RETRY_S otherwise, said once."""
        value = os.environ.get(RETRY_ENV)
        if value is None:
            return RETRY_S
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if not seconds > 0.0 or seconds == float("inf"):
            self._say_once("retry", f"{RETRY_ENV}={value!r} is not a number of seconds above "
                           f"0; trying again {RETRY_S:.0f} s after a failure")
            return RETRY_S
        return seconds

    def report(self, count, force=False):
        """Reports `count` (steps or samples done since the job started, never going back
        within a run). Returns whether a report was sent and counted."""
        count = int(count)
        if count < 0:
            raise ValueError(f"reamer_progress.report: a count is never negative ({count})")
        now = time.monotonic()
        self._keep_mean(now, count)
        if not force and self._sent_at is not None and now - self._sent_at < self.period_s:
            return False
        if self.path is None:
            self._say_once("unset", f"{SOCKET_ENV} is not set, so progress is not reported "
                           "(start the job with `enforcer launch --training NAME -- ...`)")
            return False
        if now < self._retry_at:
            return False
        mean = self._take_mean(now, count)
        self._sent_at = now
        message = {"op": "progress", "steps": count}
        if mean is not None:
            message["mean"] = mean
        line = json.dumps(message) + "\n"
        # A connection the daemon closed (idle, restarted) is opened again at once; a daemon
        # that cannot be reached, or refuses, is tried again after retry_s.
        for attempt in range(2):
            try:
                answer = self._exchange(line)
            except (OSError, ValueError) as error:
                self._close()
                if attempt == 0 and not isinstance(error, (FileNotFoundError,
                                                           ConnectionRefusedError)):
                    continue
                self._give_up(now, "unreachable", f"cannot report progress to {self.path}: "
                              f"{error}")
                return False
            if answer.get("status") == "error":
                self._give_up(now, "refused", "the enforcer refused a progress report: "
                              f"{answer.get('message')}")
                return False
            self.last_answer = {"job": answer.get("job"),
                                "steps_per_s": answer.get("steps_per_s")}
            return True
        return False

    def close(self):
        self._close()

    def _keep_mean(self, now, count):
        if self._last_count is not None:
            at, last = self._last_count
            self._count_seconds += last * (now - at)
        self._last_count = (now, count)

    def _take_mean(self, now, count):
        """The count's mean since the last report, as the daemon takes it ({"steps", "seconds"}),
        or None where there is none to send (the first report, a count that went back, a long
        silence); a new one starts."""
        total, self._count_seconds = self._count_seconds, 0.0
        seconds = now - self._sent_at if self._sent_at is not None else 0.0
        if not 0.0 < seconds <= MEAN_MAX_S:
            return None
        mean = total / seconds
        if not 0.0 <= mean <= count:
            return None
        return {"steps": mean, "seconds": seconds}

    def _exchange(self, line):
        if self._socket is None:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.settimeout(self.timeout_s)
            try:
                connection.connect(self.path)
            except OSError:
                connection.close()
                raise
            self._socket = connection
            self._reader = connection.makefile("r", encoding="utf-8")
        self._socket.sendall(line.encode())
        answer = self._reader.readline()
        if not answer:
            raise ConnectionResetError("the daemon closed the connection")
        return json.loads(answer)

    def _close(self):
        for closable in (self._reader, self._socket):
            if closable is not None:
                try:
                    closable.close()
                except OSError:
                    pass
        self._socket = None
        self._reader = None

    def _give_up(self, now, kind, message):
        self._retry_at = now + self.retry_s
        self._close()
        self._say_once(kind, f"{message}; trying again in {self.retry_s:g} s")

    def _say_once(self, kind, message):
        if kind not in self._said:
            self._said.add(kind)
            print(f"reamer_progress: {message}", file=sys.stderr, flush=True)


_reporter = None


def report(count, force=False):
    """Reports `count` steps (or samples) done since the job started: see the module's text.
    Returns whether this call sent a report the daemon counted."""
    global _reporter
    if _reporter is None:
        _reporter = Reporter()
    return _reporter.report(count, force=force)

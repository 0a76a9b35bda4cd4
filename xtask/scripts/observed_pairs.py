"""How far a training job's GPU busy share moves on its own, in a server benchmark's traces.

    python3 xtask/scripts/observed_pairs.py DIR

DIR holds what `xtask record-server --part 3 --out DIR` saved: the `enforcer observe` traces of
each window (`server-pace-observed-SCENARIO-round-N.jsonl`, a line every 200 ms). For reamer's
static windows (`reamer`), where nothing changes, it prints the ratio of the job's `gpu_busy`
between adjacent 2 s stretches: its mean, standard deviation and 95% interval (Student's t).

`gpu_busy` there is the share over the daemon's last 5 s (`pace::WINDOW_NS`), so this is how
far even that average moves from one 2 s stretch to the next: a floor on how far a 2 s
reading moves. For the same reason these traces cannot give a level's half against the held
half after it, 3 s each: the average spans both. The controller's own ratios are in the
bench's saved run (the `harvest` steps) from 306a4fe on.

The standard library only: the server has Python, and nothing is installed there.
"""

import glob
import json
import os
import statistics
import sys

# Student's t at 95% (two-sided) by degrees of freedom, 1 to 30; 2.0 beyond.
T95 = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14,
       2.13, 2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05,
       2.05, 2.04]
STRETCH_S = 2.0


def samples(path):
    """(seconds since the trace began, the job's GPU busy share over the last 5 s)."""
    at, out = 0.0, []
    with open(path) as trace:
        for number, line in enumerate(trace, start=1):
            try:
                record = json.loads(line)
            except ValueError as error:
                sys.exit(f"{path}:{number}: not a JSON line: {error}")
            at += record["seconds"]
            jobs = record.get("jobs") or [{}]
            out.append((at, jobs[0].get("gpu_busy") or 0.0))
    return out


def summary(ratios):
    n = len(ratios)
    mean = statistics.mean(ratios)
    sd = statistics.stdev(ratios)
    t = T95[n - 2] if n - 2 < len(T95) else 2.0
    half = t * sd / n ** 0.5
    return f"{n} ratios, mean {mean:.3f} [{mean - half:.3f}, {mean + half:.3f}], sd {sd:.3f}"


def adjacent_stretches(path):
    trace = samples(path)
    period = statistics.mean(b[0] - a[0] for a, b in zip(trace, trace[1:]))
    k = max(1, round(STRETCH_S / period))
    busy = [b for _, b in trace]
    stretches = [statistics.mean(busy[i:i + k]) for i in range(0, len(busy) - k + 1, k)]
    return [b / a for a, b in zip(stretches[::2], stretches[1::2]) if a > 0]


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit(__doc__.split("\n\n")[1])
    folder = sys.argv[1]
    static = sorted(glob.glob(os.path.join(folder, "*-observed-reamer-round-*.jsonl")))
    if not static:
        sys.exit(f"{folder}: no server-pace-observed-reamer-round-*.jsonl traces")
    for path in static:
        pairs = adjacent_stretches(path)
        if len(pairs) >= 2:
            print(f"{os.path.basename(path)}, gpu_busy (5 s average), adjacent "
                  f"{STRETCH_S:.0f} s stretches: {summary(pairs)}")


if __name__ == "__main__":
    main()

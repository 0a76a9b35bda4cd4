"""Paired ratios of a training job's GPU busy share in a server benchmark's saved traces.

    python3 xtask/scripts/observed_pairs.py DIR

DIR holds what `xtask record-server --part 3 --out DIR` saved: the `enforcer observe` traces of
each window (`server-pace-observed-SCENARIO-round-N.jsonl`, a line every 200 ms with the job's
`gpu_busy` and the pace controller's level). It prints:

- for the pace controller's windows (`reamer_by_pace`), each cycle's ratio as the controller
  forms it: the busy share over a level's half, over the share over the held half after it,
  each half less its first second (the controller's settling time); their mean, standard
  deviation and 95% interval (Student's t);
- for reamer's static windows (`reamer`), the same ratio between adjacent 2 s stretches,
  where nothing changes: how far the signal moves on its own.

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
SETTLE_S = 1.0
STRETCH_S = 2.0


def samples(path):
    """(seconds since the trace began, the controller's level, the job's GPU busy share)."""
    at, out = 0.0, []
    with open(path) as trace:
        for number, line in enumerate(trace, start=1):
            try:
                record = json.loads(line)
            except ValueError as error:
                sys.exit(f"{path}:{number}: not a JSON line: {error}")
            at += record["seconds"]
            jobs = record.get("jobs") or [{}]
            level = (record.get("harvest") or {}).get("level")
            out.append((at, level, jobs[0].get("gpu_busy") or 0.0))
    return out


def summary(ratios):
    n = len(ratios)
    mean = statistics.mean(ratios)
    sd = statistics.stdev(ratios)
    t = T95[n - 2] if n - 2 < len(T95) else 2.0
    half = t * sd / n ** 0.5
    return f"{n} ratios, mean {mean:.3f} [{mean - half:.3f}, {mean + half:.3f}], sd {sd:.3f}"


def controller_cycles(path):
    halves = []
    for at, level, busy in samples(path):
        if not halves or halves[-1]["level"] != level:
            halves.append({"level": level, "from": at, "busy": []})
        halves[-1]["busy"].append((at, busy))
    settled = lambda h: [b for at, b in h["busy"] if at - h["from"] >= SETTLE_S]
    ratios = []
    # The first half began before the trace and the last ends after it: neither is whole.
    for level_half, held_half in zip(halves[1:-2], halves[2:-1]):
        if level_half["level"] != "held" and held_half["level"] == "held":
            level_busy, held_busy = settled(level_half), settled(held_half)
            if level_busy and held_busy and statistics.mean(held_busy) > 0:
                ratios.append(statistics.mean(level_busy) / statistics.mean(held_busy))
    return ratios


def adjacent_stretches(path):
    trace = samples(path)
    period = statistics.mean(b[0] - a[0] for a, b in zip(trace, trace[1:]))
    k = max(1, round(STRETCH_S / period))
    busy = [b for _, _, b in trace]
    stretches = [statistics.mean(busy[i:i + k]) for i in range(0, len(busy) - k + 1, k)]
    return [b / a for a, b in zip(stretches[::2], stretches[1::2]) if a > 0]


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit(__doc__.split("\n\n")[1])
    folder = sys.argv[1]
    traces = lambda scenario: sorted(glob.glob(os.path.join(
        folder, f"*-observed-{scenario}-round-*.jsonl")))
    controller, static = traces("reamer_by_pace"), traces("reamer")
    if not controller and not static:
        sys.exit(f"{folder}: no server-pace-observed-*.jsonl traces of reamer or reamer_by_pace")
    ratios = [r for path in controller for r in controller_cycles(path)]
    if len(ratios) >= 2:
        print(f"pace controller, level over held, busy share: {summary(ratios)}")
    for path in static:
        pairs = adjacent_stretches(path)
        if len(pairs) >= 2:
            print(f"{os.path.basename(path)}, adjacent {STRETCH_S:.0f} s stretches: "
                  f"{summary(pairs)}")


if __name__ == "__main__":
    main()

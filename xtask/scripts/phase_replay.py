"""How fast the pace controller follows a job whose phases alternate, and what that is worth.

    python3 xtask/scripts/phase_replay.py STEPS.json ENFORCER [ENFORCER ...] [--cost C]
        [--slow-pace F] [--seconds S] [--rotations N]

STEPS.json is a job's recorded step times (ms), as `enforcer replay-pace` reads them: for
example the training simulator alone, target/bench/server/server-pace-steps-alone.json after
`cargo xtask bench --only server --training-cmd target/release/training-sim ...`. From it this
builds a job with two phases, each ENFORCER's `replay-pace` then replays:

- the recording as it is (the job's pace), then the same steps each 1 / F times as long (a
  slow phase at F of the pace, default a half: evaluation, say), over and over: a phase of the
  recording's length, then one 1 / F times as long. With F = 1 the job's own pace never
  changes: only offline's cost comes and goes (a neighbour's memory traffic, say);
- offline beside the job costs it nothing in the first phase and C (default 5%) in the slow
  one: the slow phase's steps each 1 / (1 - C) longer, cut to the same length, so that both
  recordings change phase at the same instants.

So a controller that follows the phases keeps offline running in the first phase and held
back in the slow one. For each ENFORCER (builds to compare), over N rotations of the
recording (each starting 10,000 steps further in; default 5) of S seconds (default 7200): how
long after each change of phase it first saw one (`pace_moved` or `phase_change`); how long
after each slow phase began with offline running it first left a level as `too_costly`; what
training lost (C times the share of the time offline ran in the slow phase), and how long
offline ran. Medians over the rotations.

The standard library only.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROTATION_STEPS = 10_000
TICK_S = 0.1


def read_steps(path):
    try:
        with open(path) as file:
            steps = json.load(file)
    except (OSError, ValueError) as error:
        sys.exit(f"{path}: cannot read the step times: {error}")
    if not isinstance(steps, list) or len(steps) <= ROTATION_STEPS or not all(
        isinstance(ms, (int, float)) and ms > 0 for ms in steps
    ):
        sys.exit(f"{path}: expected a JSON array of more than {ROTATION_STEPS} step times (ms > 0)")
    return steps


def phase_recordings(steps, cost, slow_pace):
    """The held recording, the one beside it, and the first phase's length (s)."""
    first_s = sum(steps) / 1000
    slow = [ms / slow_pace for ms in steps]
    slowed, at_ms = [], 0.0
    for ms in (ms / (1 - cost) for ms in slow):
        if at_ms + ms > first_s / slow_pace * 1000:
            break
        slowed.append(ms)
        at_ms += ms
    if at_ms < first_s / slow_pace * 1000:
        slowed.append(first_s / slow_pace * 1000 - at_ms)
    return steps + slow, steps + slowed, first_s


def replay(enforcer, held, beside, seconds):
    with tempfile.TemporaryDirectory() as scratch:
        paths = []
        for name, steps in (("held", held), ("beside", beside)):
            path = os.path.join(scratch, f"{name}.json")
            with open(path, "w") as file:
                json.dump(steps, file)
            paths.append(path)
        command = [enforcer, "replay-pace", *paths, "--seconds", str(seconds), "--json"]
        run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {run.stderr.strip()}")
    return json.loads(run.stdout)["changes"]


def figures(changes, first_s, slow_pace, seconds, cost):
    """(seconds from each change of phase to the first one seen; from each start of the
    costly phase with offline running to the first level left as `too_costly` in it, None
    where none was; training's loss; offline's share of the time)."""
    period = first_s * (1 + 1 / slow_pace)
    costly_starts = [first_s + k * period for k in range(int(seconds / period) + 1)]
    switches = sorted(costly_starts + [s + first_s / slow_pace for s in costly_starts])
    seen = []
    for switch in (s for s in switches if s < seconds - 60):
        after = [c["at_s"] for c in changes if c["at_s"] > switch and c["reason"] in
                 ("pace_moved", "phase_change")]
        if after:
            seen.append(after[0] - switch)
    found = []
    for start in (s for s in costly_starts if s < seconds - 60):
        before = [c["level"] for c in changes if c["at_s"] <= start]
        if before and before[-1] == "held":
            continue
        end = start + first_s / slow_pace
        costly = [c["at_s"] for c in changes if start < c["at_s"] < end and c["reason"] ==
                  "too_costly"]
        found.append(costly[0] - start if costly else None)
    levels = [(0.0, "policy")] + [(c["at_s"], c["level"]) for c in changes]
    index, offline, offline_slow = 0, 0.0, 0.0
    for tick in range(int(seconds / TICK_S)):
        at = tick * TICK_S
        while index + 1 < len(levels) and levels[index + 1][0] <= at:
            index += 1
        if levels[index][1] != "held":
            offline += TICK_S
            if at % period >= first_s:
                offline_slow += TICK_S
    return seen, found, cost * offline_slow / seconds, offline / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("steps")
    parser.add_argument("enforcers", nargs="+", metavar="enforcer")
    parser.add_argument("--cost", type=float, default=0.05)
    parser.add_argument("--slow-pace", type=float, default=0.5)
    parser.add_argument("--seconds", type=int, default=7200)
    parser.add_argument("--rotations", type=int, default=5)
    args = parser.parse_args()
    if not 0 <= args.cost < 1:
        sys.exit(f"--cost {args.cost}: expected a share of the pace, 0 to below 1")
    if not 0 < args.slow_pace <= 1:
        sys.exit(f"--slow-pace {args.slow_pace}: expected a share of the pace, above 0 to 1")
    steps = read_steps(args.steps)
    for enforcer in args.enforcers:
        seen, found, losses, offline = [], [], [], []
        for rotation in range(args.rotations):
            at = rotation * ROTATION_STEPS % len(steps)
            held, beside, first_s = phase_recordings(
                steps[at:] + steps[:at], args.cost, args.slow_pace
            )
            changes = replay(enforcer, held, beside, args.seconds)
            run_seen, run_found, loss, share = figures(
                changes, first_s, args.slow_pace, args.seconds, args.cost
            )
            seen += run_seen
            found += run_found
            losses.append(loss)
            offline.append(share)
        costly = sorted(f for f in found if f is not None)
        print(
            f"{enforcer}: a change of phase seen after "
            + (f"{statistics.median(seen):.0f} s (median of {len(seen)}; {min(seen):.0f} to "
               f"{max(seen):.0f} s)" if seen else "never")
            + "; the cost found in "
            + (f"{len(costly)} of {len(found)} costly phases that began with offline running, "
               f"after {statistics.median(costly):.0f} s (median; {costly[0]:.0f} to "
               f"{costly[-1]:.0f} s)" if costly
               else f"none of {len(found)} costly phases that began with offline running")
            + "; training lost "
            f"{statistics.median(losses) * 100:.2f}% "
            f"({', '.join(f'{x * 100:.2f}' for x in losses)}); offline ran "
            f"{statistics.median(offline) * 100:.1f}% of the time "
            f"({', '.join(f'{x * 100:.1f}' for x in offline)})"
        )


if __name__ == "__main__":
    main()

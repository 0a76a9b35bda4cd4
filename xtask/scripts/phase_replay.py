"""How fast the pace controller follows a job whose phases alternate, and what that is worth.

    python3 xtask/scripts/phase_replay.py STEPS.json ENFORCER [ENFORCER ...] [--cost C]
        [--seconds S] [--rotations N]

STEPS.json is a job's recorded step times (ms), as `enforcer replay-pace` reads them: for
example the training simulator alone, target/bench/server/server-pace-steps-alone.json after
`cargo xtask bench --only server --training-cmd target/release/training-sim ...`. From it this
builds a job with two phases, each ENFORCER's `replay-pace` then replays:

- the recording as it is (the job's pace), then the same steps each twice as long (a slow
  phase at half the pace: evaluation, say), over and over: a phase of the recording's length,
  then one twice as long;
- offline beside the job costs it nothing in the first phase and C (default 5%) in the slow
  one: the slow phase's steps each 1 / (1 - C) longer, cut to the same length, so that both
  recordings change phase at the same instants.

So a controller that follows the phases keeps offline running in the first phase and held
back in the slow one. For each ENFORCER (builds to compare), over N rotations of the
recording (each starting 10,000 steps further in; default 5) of S seconds (default 7200): how
long after each change of phase it first saw one (`pace_moved` or `phase_change`), what
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


def phase_recordings(steps, cost):
    """The held recording, the one beside it, and the first phase's length (s)."""
    first_s = sum(steps) / 1000
    slow = [ms * 2 for ms in steps]
    slowed, at_ms = [], 0.0
    for ms in (ms / (1 - cost) for ms in slow):
        if at_ms + ms > 2 * first_s * 1000:
            break
        slowed.append(ms)
        at_ms += ms
    slowed.append(2 * first_s * 1000 - at_ms)
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


def figures(changes, first_s, seconds, cost):
    """(seconds from each change of phase to the first one seen, training's loss, offline's
    share of the time)."""
    period = 3 * first_s
    switches = []
    start = 0.0
    while start < seconds:
        switches += [start + first_s, start + period]
        start += period
    seen = []
    for switch in (s for s in switches if s < seconds - 60):
        after = [c["at_s"] for c in changes if c["at_s"] > switch and c["reason"] in
                 ("pace_moved", "phase_change")]
        if after:
            seen.append(after[0] - switch)
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
    return seen, cost * offline_slow / seconds, offline / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("steps")
    parser.add_argument("enforcers", nargs="+", metavar="enforcer")
    parser.add_argument("--cost", type=float, default=0.05)
    parser.add_argument("--seconds", type=int, default=7200)
    parser.add_argument("--rotations", type=int, default=5)
    args = parser.parse_args()
    if not 0 <= args.cost < 1:
        sys.exit(f"--cost {args.cost}: expected a share of the pace, 0 to below 1")
    steps = read_steps(args.steps)
    for enforcer in args.enforcers:
        seen, losses, offline = [], [], []
        for rotation in range(args.rotations):
            at = rotation * ROTATION_STEPS % len(steps)
            held, beside, first_s = phase_recordings(steps[at:] + steps[:at], args.cost)
            changes = replay(enforcer, held, beside, args.seconds)
            run_seen, loss, share = figures(changes, first_s, args.seconds, args.cost)
            seen += run_seen
            losses.append(loss)
            offline.append(share)
        print(
            f"{enforcer}: a change of phase seen after {statistics.median(seen):.0f} s "
            f"(median of {len(seen)}; {min(seen):.0f} to {max(seen):.0f} s); training lost "
            f"{statistics.median(losses) * 100:.2f}% "
            f"({', '.join(f'{x * 100:.2f}' for x in losses)}); offline ran "
            f"{statistics.median(offline) * 100:.1f}% of the time "
            f"({', '.join(f'{x * 100:.1f}' for x in offline)})"
        )


if __name__ == "__main__":
    main()

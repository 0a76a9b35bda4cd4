"""What a pace controller build does over a job's recorded steps, at the VM's ladder of costs.

    python3 xtask/scripts/ladder_replay.py STEPS.json ENFORCER [ENFORCER ...]
        [--rotations N] [--seconds S] [--stop-ms MS] [--level-stop-ms MS]
    python3 xtask/scripts/ladder_replay.py STEPS.json ENFORCER [ENFORCER ...] --grow G
        [--rotations N]

STEPS.json is a job's recorded step times (ms; more than 10,000), as `enforcer replay-pace`
reads them: for example the training simulator alone,
target/bench/server/server-pace-steps-alone.json after `cargo xtask bench --only server
--no-docs --training-cmd target/release/training-sim --server-section server-pace
--server-scenarios alone ...`.

Without --grow: for each ladder of level costs below (`replay-pace --level-cost`), each
ENFORCER (builds to compare) replays N rotations of the recording (each starting 1/N further
in; default 5) for S seconds (default 7200). Per ladder and build, medians over the
rotations: offline's work against the core policy's alone (the time at each level times
offline's inferences/s there over reamer's defaults', from docs/benchmarks.md's co-location
run: 1518 at `policy`, 2838 `unpaused`, 4348 on training's cores; the shares below `policy`
keep at least one CPU, all the VM's policy gives offline, so they count as `policy`), the
time offline was held back, at `policy` or above, above it, and what training lost (the time
at each level times its cost); and over all the rotations, how many times a level was left for
the stops it made training take (`stops` in the decision log).

With --stop-ms MS: the job stops for MS (a checkpoint, a garbage collection) once every 30
to 90 s of the recording, at random (seeded, the same for every build), before it is rotated:
whether the job's own stops hide a cost from the controller.

With --level-stop-ms MS: every level above `held` also makes the job stop for MS once every 30
to 90 s (other draws than --stop-ms's), a cost that comes as rare stops; training lost counts
it with the ladder's costs.

With --grow G: the VM's frontier for 30 minutes, then every level above `held` slower by a
further G (the recording beside offline slowed from then on), over N rotations (default 40).
Of the rotations settled at `policy` when the cost came: how long until the controller
settled below it, the median, and how many did not within 15 minutes.

The standard library only.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

# The same checks of the recording as the phase script's (this folder is on the path when
# either runs as a script).
from phase_replay import read_steps

LEVELS = ["held", "quarter", "half", "three_quarters", "policy", "unpaused", "training_cores"]
FRONTIER = (
    "quarter=0.002,half=0.004,three_quarters=0.006,policy=0.008,unpaused=0.012,"
    "training_cores=0.03"
)


def every(cost):
    return ",".join(f"{level}={cost}" for level in LEVELS[1:])


LADDERS = {
    "the VM's frontier": FRONTIER,
    "nothing": "",
    "every level 0.5%": every(0.005),
    "every level 1%": every(0.01),
    "every level 2%": every(0.02),
    "above `policy` 0.5%": "unpaused=0.005,training_cores=0.005",
    "above `policy` 1.5%": "unpaused=0.015,training_cores=0.015",
}
OFFLINE_RATE = {"held": 0.0, "unpaused": 2838 / 1518, "training_cores": 4348 / 1518}
ONSET_S, AFTER_S = 1800, 900


def replay(enforcer, held, beside, seconds, ladder):
    command = [enforcer, "replay-pace", held, beside, "--seconds", str(seconds), "--json"]
    if ladder:
        command += ["--level-cost", ladder]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        sys.exit(f"{enforcer} replay-pace failed: {error}")
    return json.loads(done.stdout)


def with_stops(steps, stop_ms, seed=1):
    """The recording with a stop of `stop_ms` added to a step once every 30 to 90 s."""
    draw = random.Random(seed)
    stopped, at_ms, next_ms = [], 0.0, draw.uniform(30e3, 90e3)
    for ms in steps:
        at_ms += ms
        if at_ms >= next_ms:
            ms += stop_ms
            next_ms = at_ms + draw.uniform(30e3, 90e3)
        stopped.append(ms)
    return stopped


def rotate(steps, index, count):
    start = index * len(steps) // count
    return steps[start:] + steps[:start]


def write(directory, name, steps):
    path = os.path.join(directory, name)
    with open(path, "w") as file:
        json.dump(steps, file)
    return path


def ladders(steps, enforcers, rotations, seconds, directory, level_stop_ms=None):
    paths, stop_shares = [], []
    for i in range(rotations):
        rotated = rotate(steps, i, rotations)
        held = write(directory, f"r{i}.json", rotated)
        beside, share = held, 0.0
        if level_stop_ms is not None:
            stopping = with_stops(rotated, level_stop_ms, seed=2)
            beside = write(directory, f"r{i}-stopping.json", stopping)
            share = 1 - sum(rotated) / sum(stopping)
        paths.append((held, beside))
        stop_shares.append(share)
    print("| levels' costs | build | offline, of the defaults' | offline held back "
          "| at `policy` or above | above `policy` | training lost | left for stops |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ladder in LADDERS.items():
        costs = {level: float(cost) for level, cost in
                 (pair.split("=") for pair in ladder.split(",") if pair)}
        for enforcer in enforcers:
            rows, left = [], 0
            for (held, beside), stop_share in zip(paths, stop_shares):
                replayed = replay(enforcer, held, beside, seconds, ladder)
                time = replayed["time_at_level"]
                left += sum(change.get("reason") == "stops" for change in replayed["changes"])
                at = [time.get(level, 0.0) for level in LEVELS]
                rows.append((
                    sum(a * OFFLINE_RATE.get(level, 1.0) for a, level in zip(at, LEVELS)),
                    at[0],
                    sum(at[4:]),
                    sum(at[5:]),
                    sum(a * costs.get(level, 0.0) for a, level in zip(at, LEVELS))
                    + stop_share * sum(at[1:]),
                ))
            medians = [statistics.median(column) for column in zip(*rows)]
            cells = [f"{m * 100:.1f}%" for m in medians[:4]]
            cells += [f"{medians[4] * 100:.2f}%", str(left)]
            print(f"| {name} | {enforcer} | " + " | ".join(cells) + " |")


def grown(steps, enforcers, rotations, grow, directory):
    end_ms = (ONSET_S + AFTER_S + 60) * 1000
    pairs = []
    for i in range(rotations):
        base = rotate(steps, i, rotations)
        held, beside, at_ms = [], [], 0.0
        while at_ms < end_ms:
            for ms in base:
                held.append(ms)
                beside.append(ms if at_ms < ONSET_S * 1000 else ms / (1 - grow))
                at_ms += ms
                if at_ms >= end_ms:
                    break
        pairs.append((write(directory, f"g{i}-held.json", held),
                      write(directory, f"g{i}-beside.json", beside)))
    for enforcer in enforcers:
        left = []
        for held, beside in pairs:
            changes = replay(enforcer, held, beside, ONSET_S + AFTER_S, FRONTIER)["changes"]
            before = [c for c in changes if c["at_s"] < ONSET_S]
            if not before or before[-1]["level"] != "policy":
                continue
            below = [c["at_s"] - ONSET_S for c in changes if c["at_s"] >= ONSET_S
                     and c["settles"] and LEVELS.index(c["level"]) < LEVELS.index("policy")]
            left.append(below[0] if below else None)
        found = sorted(s for s in left if s is not None)
        median = found[len(left) // 2] if len(found) > len(left) // 2 else None
        shown = "none" if median is None else f"{median:.0f} s"
        print(f"{enforcer}: of {len(left)} rotations at `policy`, left after a median {shown}; "
              f"{len(left) - len(found)} not within {AFTER_S} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("steps", help="the job's recorded step times (ms), a JSON array")
    parser.add_argument("enforcers", nargs="+", help="enforcer binaries to compare")
    parser.add_argument("--rotations", type=int, help="rotations of the recording")
    parser.add_argument("--seconds", type=int, default=7200, help="seconds replayed per rotation")
    parser.add_argument("--grow", type=float, help="a cost (0.022: 2.2%%) that comes after 30 min")
    parser.add_argument("--stop-ms", type=float, help="a stop of the job's own this long, once "
                        "every 30 to 90 s")
    parser.add_argument("--level-stop-ms", type=float, help="a stop this long once every 30 to "
                        "90 s at every level above `held`")
    args = parser.parse_args()
    if args.grow is not None and not 0 < args.grow < 1:
        sys.exit("--grow: a share of the job's pace, between 0 and 1 (0.022 is 2.2%)")
    rotations = args.rotations or (40 if args.grow is not None else 5)
    if rotations < 1 or args.seconds < 60:
        sys.exit("--rotations must be at least 1, --seconds at least 60")
    for name, ms in [("--stop-ms", args.stop_ms), ("--level-stop-ms", args.level_stop_ms)]:
        if ms is not None and not ms > 0:
            sys.exit(f"{name}: a stop's length in ms, more than 0")
    if args.level_stop_ms is not None and args.grow is not None:
        sys.exit("--level-stop-ms is for the ladders, not --grow")
    steps = read_steps(args.steps)
    if args.stop_ms is not None:
        steps = with_stops(steps, args.stop_ms)
    with tempfile.TemporaryDirectory() as directory:
        if args.grow is None:
            ladders(steps, args.enforcers, rotations, args.seconds, directory,
                    args.level_stop_ms)
        else:
            grown(steps, args.enforcers, rotations, args.grow, directory)


if __name__ == "__main__":
    main()

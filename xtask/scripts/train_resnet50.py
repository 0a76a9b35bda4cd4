"""The training job of the server benchmark (cargo xtask bench --only server): torchvision
ResNet-50 on the GPU, bf16 autocast, channels_last, SGD with momentum, fed by a
torch.utils.data.DataLoader whose worker processes augment images on the CPU, the way a real
job's input pipeline needs CPUs.

The images are generated (random uint8, 3x320x320, from a seed per index), so nothing is
downloaded; each one goes through RandomResizedCrop(224), a horizontal flip, ColorJitter,
ToDtype and Normalize in a loader worker, as an ImageNet pipeline does after decoding.

Protocol with the benchmark (the same as training-sim's, so that either can be the training
command):
  - `--seconds S --json`: train for a warm-up (--warmup-s), then S seconds timed;
  - at the start of the timed part, print one line {"timed_start": true};
  - at the end, print one JSON line with the figures: images_per_s, steps_per_s, step_ms_p50,
    step_ms_p99, cpu_s (the main process and its loader workers, over the timed part),
    seconds, and how it ran.
  - `--serve --json`: after the warm-up, train until stdin closes; each line {"seconds": S}
    read on stdin starts a timed part of S seconds at the next step, announced and reported as
    above. One process then serves every window of a run: Python's imports, CUDA's start,
    the loader workers' start and the warm-up (about 25 s on the server) are paid once.

Launched by the enforcer (REAMER_SOCKET set), it reports its steps to the daemon through
python/reamer_progress.py, once a second: the job's pace, as any job may report it.
"""

import argparse
import json
import os
import queue
import sys
import threading
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="timed part, after warm-up")
    parser.add_argument("--serve", action="store_true",
                        help="train until stdin closes, timing S seconds for each line "
                             '{"seconds": S} read there (instead of --seconds)')
    parser.add_argument("--warmup-s", type=float, default=8.0,
                        help="untimed steps first (cuDNN autotuning, loader start-up)")
    parser.add_argument("--workers", type=int, default=6,
                        help="DataLoader worker processes: 6 leaves most of a 16-CPU "
                             "server's cores idle")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2,
                        help="torch.set_num_threads of the main process")
    parser.add_argument("--image", type=int, default=320, help="side of the generated images")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: only to check the script on a machine without a GPU")
    parser.add_argument("--json", action="store_true", help="the report as JSON (always)")
    return parser.parse_args()


def jiffies_of(pid):
    """utime + stime of one process, in clock ticks; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def children_of(pid):
    """Direct children of `pid`: the DataLoader's worker processes."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                children.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return children


def job_jiffies():
    me = os.getpid()
    return sum(jiffies_of(pid) for pid in [me] + children_of(me))


def quantile(sorted_values, q):
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def resnet50_job(device_name, batch, workers, image, threads):
    """The job: a DataLoader of generated images augmented in `workers` processes, and a
    training step of ResNet-50 on `device_name`. Returns (batches, step), where step(images,
    labels) queues one step's kernels. Also the loader-bound job of the GPU benchmark
    (gpu_load.py --job resnet50-loader)."""
    import torch
    import torchvision
    from torchvision.transforms import v2

    cuda = device_name == "cuda"
    torch.set_num_threads(threads)
    torch.backends.cudnn.benchmark = True
    device = torch.device(device_name)

    augment = v2.Compose([
        v2.RandomResizedCrop(224, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ColorJitter(0.4, 0.4, 0.4),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])

    class Generated(torch.utils.data.Dataset):
        def __len__(self):
            return 1 << 30

        def __getitem__(self, index):
            generator = torch.Generator().manual_seed(index)
            picture = torch.randint(0, 256, (3, image, image), dtype=torch.uint8,
                                    generator=generator)
            return augment(picture), index % 1000

    loader = torch.utils.data.DataLoader(
        Generated(), batch_size=batch, num_workers=workers, pin_memory=cuda,
        prefetch_factor=4 if workers > 0 else None)

    model = torchvision.models.resnet50(num_classes=1000).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(images, labels):
        images = images.to(device, non_blocking=True, memory_format=torch.channels_last)
        labels = labels.to(device, non_blocking=True)
        with torch.autocast(device_name, dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return iter(loader), step


def main():
    args = parse_args()
    import torch
    import torchvision

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("train_resnet50.py: PyTorch sees no CUDA device")

    def synchronize():
        if cuda:
            torch.cuda.synchronize()

    batches, step = resnet50_job(args.device, args.batch, args.workers, args.image,
                                 args.threads)
    # The repository's helper, beside this script's folder: steps reported to the daemon
    # that launched the job, once a second; nothing without one.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    import reamer_progress
    report = reamer_progress.report if os.environ.get(reamer_progress.SOCKET_ENV) else None
    steps_done = 0

    def train_step(timed):
        """One step; timed, the instant its kernels finished (before the progress report)."""
        nonlocal steps_done
        step(*next(batches))
        finished = None
        if timed:
            # A step ends when its kernels finished, not when they were queued.
            synchronize()
            finished = time.monotonic()
        steps_done += 1
        if report:
            # At most one report a second, the others return at once; its time falls
            # between steps (in the pace, not in a step's time).
            report(steps_done)
        return finished

    def timed_part(seconds):
        synchronize()
        print(json.dumps({"timed_start": True}), flush=True)
        jiffies_before = job_jiffies()
        started = time.monotonic()
        step_ms = []
        last = started
        while last - started < seconds:
            finished = train_step(timed=True)
            step_ms.append((finished - last) * 1e3)
            last = time.monotonic()
        elapsed = last - started
        cpu_s = (job_jiffies() - jiffies_before) / os.sysconf("SC_CLK_TCK")
        in_order = [round(ms, 2) for ms in step_ms]
        step_ms.sort()
        steps = len(step_ms)
        print(json.dumps({
            "images_per_s": steps * args.batch / elapsed,
            "steps_per_s": steps / elapsed,
            "step_ms_p50": quantile(step_ms, 0.5),
            "step_ms_p99": quantile(step_ms, 0.99),
            # Each step's time in order: how far the pace moves on its own, stretch to stretch.
            "step_ms": in_order,
            "cpu_s": cpu_s,
            "seconds": elapsed,
            "steps": steps,
            "batch": args.batch,
            "loader_workers": args.workers,
            "threads": args.threads,
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "gpu": torch.cuda.get_device_name(0) if cuda else None,
        }), flush=True)

    warm_until = time.monotonic() + args.warmup_s
    while time.monotonic() < warm_until:
        train_step(timed=False)

    if args.serve:
        requests = queue.Queue()

        def read_requests():
            for line in sys.stdin:
                try:
                    seconds = float(json.loads(line)["seconds"])
                except (ValueError, KeyError, TypeError):
                    print(f"train_resnet50.py: ignoring the request {line.strip()!r}: "
                          'expected {"seconds": S}', file=sys.stderr, flush=True)
                    continue
                requests.put(seconds)
            requests.put(None)

        threading.Thread(target=read_requests, daemon=True).start()
        while True:
            try:
                seconds = requests.get_nowait()
            except queue.Empty:
                train_step(timed=False)
                continue
            if seconds is None:
                break
            timed_part(seconds)
    else:
        timed_part(args.seconds)
    # The loader's workers are shut down with its iterator (the only reference): without
    # this they outlived the job by seconds, into the benchmark's next window.
    del batches
    sys.stdout.flush()
    os._exit(0)

if __name__ == "__main__":
    main()

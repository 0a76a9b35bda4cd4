"""One side of the GPU benchmark (cargo xtask bench --only gpu): a PyTorch training loop or a
PyTorch inference loop on the GPU, timed step by step.

Protocol with the benchmark, over stdin and stdout so that the clocks of both processes line up:
  1. Build the model, warm it up (cuBLAS handles, the caching allocator), then print one JSON
     line {"ready": true, ...} and wait for a line on stdin.
  2. On that line, read CLOCK_MONOTONIC as the window's start (t0).
     - inference: run back-to-back batches from t0 until t0 + --total-s;
     - training: stay idle (its CUDA context and weights held, no kernels) until t0 + --lead-s,
       then train until t0 + --lead-s + --train-s.
  3. Write the report to --report as JSON: the role, t0, when training started, and every
     step's end (time.monotonic_ns, the clock the enforcer's decision log uses). A file, not
     stdout: the report is large, and the benchmark reads it once the process has exited.

Every step ends with torch.cuda.synchronize(), so a step's end is when its kernels finished,
not when they were queued.

Training is one of two jobs (--job): `mlp`, a bf16 MLP whose steps are all GPU work (the GPU
is its bottleneck), or `resnet50-loader`, torchvision ResNet-50 fed by a DataLoader whose
--loader-workers processes augment generated images on the CPU (train_resnet50.py's job):
with few workers its input pipeline, not the GPU, sets its pace.
"""

import argparse
import json
import os
import sys
import time

import torch


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["training", "inference"], required=True)
    parser.add_argument("--report", required=True, help="where the timings go (JSON)")
    parser.add_argument("--lead-s", type=float, default=5.0,
                        help="training idles this long after the start (inference runs alone)")
    parser.add_argument("--train-s", type=float, default=8.0, help="training runs this long")
    parser.add_argument("--total-s", type=float, default=13.0,
                        help="inference runs this long after the start")
    parser.add_argument("--width", type=int, default=8192, help="hidden size of the MLP")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=None,
                        help="rows per step (default: 2048 training, 1024 inference; "
                             "resnet50-loader: 128 images)")
    parser.add_argument("--job", choices=["mlp", "resnet50-loader"], default="mlp",
                        help="training's job (inference is always the MLP)")
    parser.add_argument("--loader-workers", type=int, default=6,
                        help="resnet50-loader: DataLoader worker processes")
    return parser.parse_args()


def mlp(width, layers, device):
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*blocks).to(device=device, dtype=torch.bfloat16)


def mlp_and_input(args, device):
    """The MLP of --width and --layers, its batch size, and a batch of random rows."""
    model = mlp(args.width, args.layers, device)
    batch = args.batch or (2048 if args.role == "training" else 1024)
    return model, batch, torch.randn(batch, args.width, device=device, dtype=torch.bfloat16)


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_load.py: PyTorch sees no CUDA device")
    device = torch.device("cuda")
    torch.manual_seed(0)
    resnet = args.role == "training" and args.job == "resnet50-loader"
    if resnet:
        # The server benchmark's job, beside this script.
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from train_resnet50 import resnet50_job

        batch = args.batch or 128
        batches, resnet_step = resnet50_job("cuda", batch, args.loader_workers, 320, 2)

        def step():
            resnet_step(*next(batches))
            torch.cuda.synchronize()
    elif args.role == "training":
        model, batch, x = mlp_and_input(args, device)
        target = torch.randn_like(x)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), target)
            loss.backward()
            optimizer.step()
            torch.cuda.synchronize()
    else:
        model, batch, x = mlp_and_input(args, device)
        model.eval()

        def step():
            with torch.no_grad():
                model(x)
            torch.cuda.synchronize()

    for _ in range(10):
        step()
    print(json.dumps({"ready": True, "role": args.role, "batch": batch,
                      "job": args.job if args.role == "training" else "mlp",
                      "width": 0 if resnet else args.width,
                      "layers": 0 if resnet else args.layers,
                      "loader_workers": args.loader_workers if resnet else None,
                      "device": torch.cuda.get_device_name(0)}), flush=True)
    if not sys.stdin.readline():
        sys.exit("gpu_load.py: stdin closed before the start")
    t0 = time.monotonic_ns()
    if args.role == "training":
        start = t0 + int(args.lead_s * 1e9)
        end = start + int(args.train_s * 1e9)
        time.sleep(max(0.0, (start - time.monotonic_ns()) / 1e9))
    else:
        start = t0
        end = t0 + int(args.total_s * 1e9)
    started_ns = time.monotonic_ns()
    done_ns = []
    while True:
        step()
        now = time.monotonic_ns()
        done_ns.append(now)
        if now >= end:
            break
    with open(args.report, "w") as report:
        json.dump({"role": args.role, "t0_ns": t0, "started_ns": started_ns,
                   "done_ns": done_ns}, report)
    if resnet:
        # The loader's workers go with the process now, not seconds later in the next window.
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()

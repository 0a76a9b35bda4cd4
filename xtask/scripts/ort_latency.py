"""ONNX Runtime's latency per batch size on one pinned thread: the baseline that
`cargo xtask bench` sets beside `inference-worker bench` (tract), with the same inputs.

Prints one JSON object shaped like inference-worker's: {"engine", "model", "results": [...]}.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np
import onnxruntime as ort


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--input-shape", required=True, help="item shape without the batch, e.g. 3,48,192")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=0)
    parser.add_argument("--ops", action="store_true",
                        help="also report the time per operator type, from ONNX Runtime's profiler")
    args = parser.parse_args()

    os.sched_setaffinity(0, {args.cpu})
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    item = [int(d) for d in args.input_shape.split(",")]
    results = []
    for batch in [int(b) for b in args.batches.split(",")]:
        # The same values inference-worker's bench feeds: (i % 251) / 251.
        count = batch * int(np.prod(item))
        data = (np.arange(count) % 251).astype(np.float32) / 251.0
        data = data.reshape([batch] + item)
        for _ in range(args.warmup):
            session.run(None, {input_name: data})
        times = []
        for _ in range(max(args.runs, 1)):
            started = time.perf_counter()
            session.run(None, {input_name: data})
            times.append((time.perf_counter() - started) * 1e3)
        times.sort()
        results.append({
            "batch": batch,
            "runs": len(times),
            "p50_ms": times[len(times) // 2],
            "min_ms": times[0],
            "max_ms": times[-1],
        })
    report = {"engine": "onnxruntime " + ort.__version__,
              "model": os.path.basename(args.model), "results": results}
    if args.ops:
        report["op_profiles"] = [
            {"batch": int(b), "ops": op_profile(args, options, int(b), item)}
            for b in args.batches.split(",")
        ]
    print(json.dumps(report))


def op_profile(args, options, batch, item):
    """Time per operator type over args.runs runs, from ONNX Runtime's own profiler."""
    import tempfile

    profiled = ort.SessionOptions()
    profiled.intra_op_num_threads = options.intra_op_num_threads
    profiled.inter_op_num_threads = options.inter_op_num_threads
    profiled.execution_mode = options.execution_mode
    profiled.graph_optimization_level = options.graph_optimization_level
    profiled.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        profiled.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(args.model, profiled, providers=["CPUExecutionProvider"])
        input_name = session.get_inputs()[0].name
        count = batch * int(np.prod(item))
        data = ((np.arange(count) % 251).astype(np.float32) / 251.0).reshape([batch] + item)
        session.run(None, {input_name: data})
        runs = max(args.runs, 1)
        for _ in range(runs):
            session.run(None, {input_name: data})
        with open(session.end_profiling()) as f:
            events = json.load(f)
    per_op = {}
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        op = event.get("args", {}).get("op_name", "?")
        nodes, us = per_op.get(op, (set(), 0.0))
        nodes.add(event["name"])
        per_op[op] = (nodes, us + event["dur"])
    total = sum(us for _, us in per_op.values()) or 1.0
    # The warm-up run is in the profile too: spread over runs + 1.
    ops = [{"op": op, "nodes": len(nodes), "ms_per_run": us / 1e3 / (runs + 1),
            "share_pct": 100.0 * us / total} for op, (nodes, us) in per_op.items()]
    return sorted(ops, key=lambda o: -o["ms_per_run"])


if __name__ == "__main__":
    main()

//! The GPU server's recording, prepared: the server is lent now and then for a few minutes of
//! machine time, at most 10 minutes a command, without the Rust toolchain. So the recording
//! is in parts, each one command that fits, each ending by its own deadline and leaving what
//! it measured in `--out`, saved window by window so that a part cut short still reports.
//!
//! - `cargo xtask record-server --prepare`, here: builds the release binaries, strips those
//!   the server runs, compresses ONNX Runtime's library, and lists what to copy there beside
//!   the repository.
//! - `target/release/xtask record-server --part 1 --out DIR`, there: the server section's
//!   static frontier and reamer on it (the bench's `--only server`), 3 rounds.
//! - `target/release/xtask record-server --part 2 --out DIR`: the GPU clamp on need with both
//!   training jobs (`--only gpu`), 1 round.
//! - `target/release/xtask record-server --part 3 --out DIR`: the pace controller
//!   (`harvest_by_pace`) settled, beside plain CFS, reamer's defaults and training alone, into
//!   its own section (`--server-section server-pace`): 1 round of 60 s windows, the
//!   controller's timed 120 s after its daemon starts, once its search is over, so that its
//!   window shows what it holds, its rechecks and its own paired halves.
//! - `target/release/xtask record-server --part 4 --out DIR`: the GPU side's integration tests
//!   (`tests/tests/gpu.rs`, built by `--prepare` as `target/release/gpu-tests`), the only run
//!   of NVML's readings, the memory guard and the clamp on a real driver, in at most 400 s.
//!
//! A lease of 15 minutes, its start included, has room for part 3 or part 1 alone, or for
//! parts 2 and 4.
//!
//! What a part leaves in `--out` is the only copy of it: the server goes back with everything
//! on it. Its saved runs belong in the repository (docs/testing.md says where), or a later
//! session can neither write their sections again nor replay the job's step times.
//!
//! The parts' deadlines come from the server's own timings (2026-11-26, H200, 16 vCPUs): a
//! server-bench window of 15 s took 37.6 s in all while each window started its own PyTorch
//! job (10 windows in 376 s), and the GPU section's one round of both jobs 218 s. Since one
//! training process serves every window, a window costs its timed part and about 4 s (15.6 s
//! a 12 s window in the stand-in's rehearsal on the 2-vCPU VM), and the job's start and
//! warm-up (about 25 s) are paid once.
//!
//! Part 3 at 55 s a window (2026-11-28, H200) did not fit: a window of reamer's defaults took
//! 60 s, the controller's 106 s (its daemon's 48 s lead), and round 2's last window, training
//! alone, was cut at 530 s, which left every ratio one round's. The start on a fresh server,
//! before the first timed part, took the rest: more than 83 s. Each of its windows timed in
//! the controller's search held offline back 26 to 49% of the window: part 3 now times one
//! window of the controller settled instead.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, bail};

use crate::cargo::{self, workspace_root};

#[derive(clap::Args)]
pub struct Options {
    /// Here, before the server is lent: build the release binaries, strip the ones the
    /// recording runs, and list the files to copy to the server with the repository.
    #[arg(long, conflicts_with = "part")]
    prepare: bool,
    /// On the server: which part to record. 1: the server section (training alone, plain CFS,
    /// offline in a `cpu.idle` group, the same on a quarter, half and three quarters of the
    /// cores, and reamer; 3 rounds of 12 s; at most 530 s). 2: the GPU clamp on need with
    /// the GPU-bound and the loader-bound job (1 round; about 4 minutes). 3: the pace
    /// controller (`harvest_by_pace`, following the steps the job reports) settled, beside
    /// plain CFS, reamer's defaults and training alone, 1 round of 60 s (the controller's
    /// timed 120 s after its daemon starts, past its search), its own section (at most 530 s).
    /// 4: the GPU side's integration tests, one at a time (at most 400 s), their output in
    /// `--out`.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=4))]
    part: Option<u8>,
    /// Where a part copies what it recorded: the saved runs, the traces, the log, and
    /// docs/benchmarks.md and the plots as the bench rewrote them.
    #[arg(long, value_name = "DIR", requires = "part")]
    out: Option<PathBuf>,
    /// A stand-in for the PyTorch job (parts 1 and 3), to rehearse on a machine without a
    /// GPU; its figures are not the server's and leave docs/benchmarks.md alone.
    #[arg(long, value_name = "COMMAND", requires = "part")]
    training_cmd: Option<String>,
}

/// The binaries a recording runs, and the one model it serves.
const BINARIES: [&str; 4] = ["xtask", "enforcer", "inference-worker", "load-gen"];
/// Part 4's test binary, copied from cargo's deps folder to the binaries' own, where it finds
/// the enforcer as the harness expects (`reamer_tests::harness::target_dir`), and the CPU hog
/// its tests start.
const GPU_TESTS: &str = "gpu-tests";
const GPU_TESTS_BINARIES: [&str; 2] = [GPU_TESTS, "cpu-hog"];
/// Part 4 is stopped here. Its GPU tests have not yet run on a server: the bounds on their
/// waits add to about 5 minutes (the pause test's alone to 80 s), and each process they start
/// imports PyTorch first; tests that pass at their first chance take a fraction of that.
const GPU_TESTS_DEADLINE: Duration = Duration::from_secs(400);
const MODEL: &str = "target/models/pp-ocr/ch_ppocr_mobile_v2.0_cls_infer.onnx";
/// ONNX Runtime's library, xz-compressed: 29 MB as it is, which with the binaries would pass
/// what a lent server takes along (64 MiB); about 8 MB compressed. A part unpacks it
/// beside itself, where the worker finds it, so that the server's workers run the engine the
/// benches run here.
const LIBRARY_XZ: &str = "target/onnxruntime/libonnxruntime.so.xz";

/// Python's lzma (the server has Python, not necessarily xz): compresses or unpacks argv[1]
/// into argv[2], through a temporary name so that a cut-short write is never taken for it.
const LZMA: &str = "import lzma, os, shutil, sys\n\
                    opener = lzma.open if sys.argv[3] == 'unpack' else open\n\
                    writer = open if sys.argv[3] == 'unpack' else (lambda p, m: lzma.open(p, m, preset=6))\n\
                    with opener(sys.argv[1], 'rb') as src, writer(sys.argv[2] + '.part', 'wb') as dst:\n\
                    \x20   shutil.copyfileobj(src, dst, 1 << 20)\n\
                    os.replace(sys.argv[2] + '.part', sys.argv[2])\n";

fn lzma(from: &Path, to: &Path, direction: &str) -> anyhow::Result<()> {
    crate::bootstrap::run(
        "python3",
        &[
            "-c",
            LZMA,
            from.to_str().context("utf-8 path")?,
            to.to_str().context("utf-8 path")?,
            direction,
        ],
        &[],
    )
    .with_context(|| format!("{direction} {} with python3's lzma", from.display()))
}

/// On the server: ONNX Runtime's library from its carried, compressed copy, unless it is
/// there already. Without the copy the workers run tract, and the benches say so.
fn unpack_onnxruntime() -> anyhow::Result<()> {
    let library = crate::models::onnxruntime_library();
    let packed = workspace_root().join(LIBRARY_XZ);
    if library.is_file() || !packed.is_file() {
        return Ok(());
    }
    eprintln!("[record-server] unpacking {}", packed.display());
    lzma(&packed, &library, "unpack")
}

/// Part 1's scenarios (training alone is always among them): the static frontier and reamer.
const FRONTIER: &str = "plain_cfs,offline_cpu_idle,offline_cpu_idle_quarter,\
                        offline_cpu_idle_half,offline_cpu_idle_three_quarters,reamer";

/// Part 3's scenarios after training alone, in the order a part cut short loses them last to
/// first: the pace controller, the one the part is for; plain CFS, which its target of 70% of
/// plain CFS's offline needs; reamer's defaults.
const PACE: &str = "reamer_by_pace,plain_cfs,reamer";

/// Part 3's windows: 60 s timed, the controller's 120 s after its daemon starts (and the
/// 3.5 s lead), where on the H200 its search had ended about 75 and 90 s in (2026-11-28). By
/// that run's timings (below), each other window takes about 65 s and the controller's about
/// 186 s: 381 s, which leaves the start, more than 83 s on a fresh server, up to 149 s of the
/// 530.
const PACE_SECONDS: &str = "60";
const PACE_SETTLE: &str = "120";

/// One part: the bench command it runs, its deadline, and how a run cut short is reported.
struct Part {
    bench_args: Vec<String>,
    /// The bench's own section (`--only`), and the name the part's results are copied under:
    /// the docs section it writes.
    bench_section: &'static str,
    /// The bench is stopped here, leaving the rest of the command's limit to report and copy.
    deadline: Duration,
    /// The saved run, and the flag that reports it (`--server-from`, `--gpu-from`).
    saved: &'static str,
    report_flag: &'static str,
    section: &'static str,
    /// What the part copies to `--out`, relative to the repository (a trailing `*`: every
    /// file that begins so).
    results: &'static [&'static str],
}

fn part(number: u8, training_cmd: Option<&str>) -> Part {
    match number {
        // 21 windows of 12 s at about 17 s each: 360 s; the bench's start (the online worker's
        // profile) and the job's start and warm-up, about 60 s. A window that does not fit is
        // cut and the rest reported.
        1 => server_part(
            "server",
            ["3", "12", FRONTIER],
            &[],
            training_cmd,
            &[
                "target/bench/server/run.json",
                "target/bench/server/observed-*",
                "docs/benchmarks.md",
                "docs/server-tradeoff.svg",
            ],
        ),
        // One round: the job's pace moves by about 10% from one minute to the next on the
        // server, so a second round's pairing would say little, where one long settled window
        // gives the controller's own halves, paired seconds apart, through its rechecks.
        3 => server_part(
            "server-pace",
            ["1", PACE_SECONDS, PACE],
            &["--server-pace-settle", PACE_SETTLE],
            training_cmd,
            &[
                "target/bench/server/run.json",
                "target/bench/server/observed-*",
                "docs/benchmarks.md",
                "docs/server-pace-tradeoff.svg",
            ],
        ),
        _ => {
            let args = ["bench", "--prebuilt", "--only", "gpu", "--gpu-rounds", "1"];
            Part {
                bench_args: args.map(str::to_owned).to_vec(),
                bench_section: "gpu",
                deadline: Duration::from_secs(330),
                saved: "target/bench/gpu/run.json",
                report_flag: "--gpu-from",
                section: "gpu",
                results: &["target/bench/gpu/run.json", "docs/benchmarks.md"],
            }
        }
    }
}

/// A part of the server bench into docs section `section` (its own `--server-section` where
/// it is not the frontier's): `[rounds, seconds, scenarios]` and `more` of its options,
/// stopped at 530 s.
fn server_part(
    section: &'static str,
    [rounds, seconds, scenarios]: [&str; 3],
    more: &[&str],
    training_cmd: Option<&str>,
    results: &'static [&'static str],
) -> Part {
    let mut args: Vec<String> = ["bench", "--prebuilt", "--only", "server"]
        .map(str::to_owned)
        .to_vec();
    if section != "server" {
        args.extend(["--server-section".to_owned(), section.to_owned()]);
    }
    args.extend(
        [
            "--server-rounds",
            rounds,
            "--server-seconds",
            seconds,
            "--server-scenarios",
            scenarios,
        ]
        .map(str::to_owned),
    );
    args.extend(more.iter().map(|arg| (*arg).to_owned()));
    if let Some(command) = training_cmd {
        args.extend(["--training-cmd".to_owned(), command.to_owned()]);
    }
    Part {
        bench_args: args,
        bench_section: "server",
        deadline: Duration::from_secs(530),
        saved: "target/bench/server/run.json",
        report_flag: "--server-from",
        section,
        results,
    }
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    if options.prepare {
        return prepare();
    }
    let Some(number) = options.part else {
        bail!(
            "say what to do: --prepare here, then --part 1 (or 3), or --part 2 and 4, on the \
             server (`cargo xtask record-server --help`)"
        );
    };
    let out = options
        .out
        .clone()
        .context("--part needs --out DIR: where the part leaves what it recorded")?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let log = out.join(format!("part-{number}.log"));
    if number == 4 {
        return run_gpu_tests(&log);
    }
    let part = part(number, options.training_cmd.as_deref());
    unpack_onnxruntime()?;
    let xtask = std::env::current_exe().context("finding this program")?;
    eprintln!(
        "[record-server] part {number}: {} (stopped after {} s); log in {}",
        part.bench_args.join(" "),
        part.deadline.as_secs(),
        log.display()
    );
    // The part's start on the file system's clock, which is coarser than the system's (a
    // file's times move by the kernel's tick): the log's creation.
    std::fs::write(&log, "").with_context(|| format!("creating {}", log.display()))?;
    let started = std::fs::metadata(&log)?.modified()?;
    let finished = run_until(&xtask, &part.bench_args, part.deadline, &log)?;
    if !finished {
        // The bench saved every window it finished: its section from those.
        let saved = workspace_root().join(part.saved);
        eprintln!(
            "[record-server] part {number} stopped at its deadline; reporting the {} section \
             from {}",
            part.section,
            saved.display()
        );
        let mut report: Vec<String> = [
            "bench",
            "--prebuilt",
            "--only",
            part.bench_section,
            part.report_flag,
            part.saved,
        ]
        .map(str::to_owned)
        .to_vec();
        if part.section != part.bench_section {
            report.extend(["--server-section".to_owned(), part.section.to_owned()]);
        }
        run_until(&xtask, &report, Duration::from_secs(60), &log)?;
    }
    let copied = copy_results(part.results, started, &out, part.section)?;
    if copied == 0 {
        bail!(
            "part {number} recorded nothing (the bench skips a section it cannot run here, \
             saying why): {}",
            log.display()
        );
    }
    eprintln!(
        "[record-server] part {number} {}: {} file(s) in {}",
        if finished {
            "done"
        } else {
            "cut short, reported"
        },
        copied,
        out.display()
    );
    Ok(())
}

/// Part 4: the GPU tests, one at a time (they measure a shared GPU), their output in `log`.
/// libtest runs them in the order of their names; those cut at the deadline are the log's
/// last, with no result line.
fn run_gpu_tests(log: &Path) -> anyhow::Result<()> {
    let tests = cargo::release_bin(GPU_TESTS);
    if !tests.is_file() {
        bail!(
            "{} is missing: `cargo xtask record-server --prepare` builds it, to be copied here",
            tests.display()
        );
    }
    eprintln!(
        "[record-server] part 4: the GPU tests (stopped after {} s); log in {}",
        GPU_TESTS_DEADLINE.as_secs(),
        log.display()
    );
    let args = ["--test-threads=1", "--nocapture"].map(str::to_owned);
    let ran = run_until(&tests, &args, GPU_TESTS_DEADLINE, log);
    // What the log says in short: each skip and failure, and libtest's count.
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let worth_saying = |line: &&str| {
        line.contains("SKIPPED") || line.contains("panicked at") || line.starts_with("test result:")
    };
    for line in text.lines().filter(worth_saying) {
        eprintln!("[record-server] {line}");
    }
    if !ran? {
        bail!("part 4 stopped at its deadline: the tests not counted above did not run");
    }
    Ok(())
}

/// Runs `program ARGS` in the repository's root (this program, or part 4's tests), its output
/// appended to `log`, and stops it (its whole process group: the training job, the workers,
/// the daemon) at `deadline`. Whether it ended by itself; failing if it failed.
fn run_until(
    program: &Path,
    args: &[String],
    deadline: Duration,
    log: &Path,
) -> anyhow::Result<bool> {
    use std::os::unix::process::CommandExt as _;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut child = Command::new(program)
        .args(args)
        .current_dir(workspace_root())
        .stdout(file.try_clone()?)
        .stderr(file)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!(
                    "`{} {}` failed ({status}): {}",
                    program.display(),
                    args.join(" "),
                    log.display()
                );
            }
            return Ok(true);
        }
        if started.elapsed() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // SIGTERM first: the enforcer gives every pool its CPUs back and thaws on it.
    let group = format!("-{}", child.id());
    let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
    let grace = Instant::now();
    while child.try_wait()?.is_none() && grace.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
    let _ = child.wait();
    Ok(false)
}

/// Copies each of `results` written since `since` (a trailing `*`: every file beginning so)
/// to `out`, named `SECTION-NAME` (both parts' saved runs are `run.json`): what this part
/// wrote, not an earlier run's traces, nor a section the bench left alone.
fn copy_results(
    results: &[&str],
    since: SystemTime,
    out: &Path,
    section: &str,
) -> anyhow::Result<usize> {
    let root = workspace_root();
    let mut copied = 0;
    for pattern in results {
        let paths: Vec<PathBuf> = match pattern.strip_suffix('*') {
            Some(prefix) => {
                let prefix = root.join(prefix);
                let dir = prefix.parent().context("a result's folder")?;
                let stem = prefix
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                match std::fs::read_dir(dir) {
                    Ok(entries) => entries
                        .filter_map(Result::ok)
                        .filter(|e| e.file_name().to_string_lossy().starts_with(&stem))
                        .map(|e| e.path())
                        .collect(),
                    Err(_) => Vec::new(),
                }
            }
            None => vec![root.join(pattern)],
        };
        let written_since = |path: &PathBuf| {
            std::fs::metadata(path)
                .and_then(|m| m.modified())
                .is_ok_and(|modified| modified >= since)
        };
        for path in paths
            .into_iter()
            .filter(|p| p.is_file())
            .filter(written_since)
        {
            let name = path.file_name().context("a result's name")?;
            let name = format!("{section}-{}", name.to_string_lossy());
            std::fs::copy(&path, out.join(name))
                .with_context(|| format!("copying {}", path.display()))?;
            copied += 1;
        }
    }
    Ok(copied)
}

/// Builds, strips and lists what the server needs beside the repository's tracked files.
fn prepare() -> anyhow::Result<()> {
    crate::bootstrap::ensure()?;
    crate::models::ensure_models()?;
    let library = crate::models::ensure_onnxruntime_library()?;
    cargo::build_release_with_xtask()?;
    build_gpu_tests()?;
    let root = workspace_root();
    let mut total = 0u64;
    let mut files = Vec::new();
    for name in BINARIES.into_iter().chain(GPU_TESTS_BINARIES) {
        let path = cargo::release_bin(name);
        // Symbols are most of a release binary here (the enforcer: 23 MB, 18 MB stripped).
        let status = Command::new("strip")
            .arg(&path)
            .status()
            .context("running strip (binutils)")?;
        if !status.success() {
            bail!("strip {} failed ({status})", path.display());
        }
        files.push(path);
    }
    files.push(root.join(MODEL));
    let packed = root.join(LIBRARY_XZ);
    let stale = |packed: &Path| -> anyhow::Result<bool> {
        Ok(!packed.is_file()
            || std::fs::metadata(packed)?.modified()? < std::fs::metadata(&library)?.modified()?)
    };
    if stale(&packed)? {
        eprintln!("[record-server] compressing {}", library.display());
        lzma(&library, &packed, "compress")?;
    }
    files.push(packed);
    println!("Copy these to the server, at the same paths in the repository's copy:");
    for path in &files {
        let size = std::fs::metadata(path)
            .with_context(|| format!("{} is missing", path.display()))?
            .len();
        total += size;
        let relative = path.strip_prefix(&root).unwrap_or(path);
        println!(
            "  {} ({:.1} MiB)",
            relative.display(),
            size as f64 / 1048576.0
        );
    }
    println!(
        "{:.1} MiB in all. Then, there, as root: `target/release/xtask record-server --part 1 \
         --out DIR` (or `--part 3`, the pace controller), or `--part 2` and `--part 4` (the GPU \
         tests). A part cut short \
         still reports what it saved. Back here, each section from its saved run: `cargo xtask \
         bench --only server --server-from DIR/server-run.json`, `cargo xtask bench --only \
         server --server-section server-pace --server-from DIR/server-pace-run.json`, `cargo \
         xtask bench --only gpu --gpu-from DIR/gpu-run.json`.",
        total as f64 / 1048576.0
    );
    Ok(())
}

/// Builds `tests/tests/gpu.rs` in release mode and copies it to `target/release/gpu-tests`.
fn build_gpu_tests() -> anyhow::Result<()> {
    let executable = cargo::release_test_executable("reamer-tests", "gpu")?;
    let copy = cargo::release_bin(GPU_TESTS);
    std::fs::copy(&executable, &copy)
        .with_context(|| format!("copying {} to {}", executable.display(), copy.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_fit_a_ten_minute_command_with_time_to_report() {
        for number in [1, 2, 3] {
            let part = part(number, None);
            // The report from the saved run and the copy take under a minute.
            assert!(part.deadline + Duration::from_secs(60) <= Duration::from_secs(600));
            assert_eq!(&part.bench_args[..2], ["bench", "--prebuilt"]);
        }
        assert!(GPU_TESTS_DEADLINE + Duration::from_secs(60) <= Duration::from_secs(600));
        // Part 1's scenarios are the bench's own names.
        let names: Vec<String> = FRONTIER.split(',').map(str::to_owned).collect();
        assert_eq!(names.len(), 6);
        for name in &names {
            assert!(
                crate::bench::server::Scenario::ALL
                    .iter()
                    .any(|s| s.name() == name),
                "{name}"
            );
        }
        // Part 3's too, and it writes a section of its own.
        for name in PACE.split(',') {
            assert!(
                crate::bench::server::Scenario::ALL
                    .iter()
                    .any(|s| s.name() == name),
                "{name}"
            );
        }
        let pace = part(3, None);
        assert!(
            pace.bench_args
                .windows(2)
                .any(|w| w == ["--server-section", "server-pace"])
        );
        assert_eq!(
            (pace.bench_section, pace.section),
            ("server", "server-pace")
        );
        // Timed settled: past the 90 s the H200's search took, and the controller's window
        // second, so that a part cut short loses another.
        assert!(
            pace.bench_args
                .windows(2)
                .any(|w| w == ["--server-pace-settle", PACE_SETTLE])
        );
        assert!(PACE_SETTLE.parse::<f64>().unwrap() >= 90.0);
        assert!(PACE.starts_with("reamer_by_pace,"));
        // The target of 70% of plain CFS's offline needs plain CFS in the same run.
        assert!(PACE.split(',').any(|name| name == "plain_cfs"));
        let stand_in = part(1, Some("target/release/training-sim"));
        assert!(stand_in.bench_args.ends_with(&[
            "--training-cmd".to_owned(),
            "target/release/training-sim".to_owned()
        ]));
    }

    #[test]
    fn part_3_fits_its_deadline_by_the_servers_timings() {
        // 2026-11-28 on the H200: a window took its timed part and about 5 s, the controller's
        // its lead as well, and the start before the first window more than 83 s. The part
        // leaves a start of 60 s more than that before its deadline.
        let windows = 1 + PACE.split(',').count();
        let seconds: f64 = PACE_SECONDS.parse().unwrap();
        let settle: f64 = PACE_SETTLE.parse().unwrap();
        let run_s = windows as f64 * (seconds + 5.0) + settle + 3.5;
        let deadline_s = part(3, None).deadline.as_secs_f64();
        assert!(83.0 + 60.0 + run_s <= deadline_s, "{run_s} s of windows");
    }

    #[test]
    fn a_part_past_its_deadline_is_stopped_with_its_children() {
        let dir = std::env::temp_dir().join(format!("reamer-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("part.log");
        // An earlier run's trace, before this part began.
        std::fs::write(dir.join("observed-old.jsonl"), "old").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&log, "").unwrap();
        let since = std::fs::metadata(&log).unwrap().modified().unwrap();
        // A shell that starts a child and outlives the deadline: both are stopped.
        let started = Instant::now();
        let finished = run_until(
            Path::new("/bin/sh"),
            &["-c".to_owned(), "sleep 30 & echo started; wait".to_owned()],
            Duration::from_millis(500),
            &log,
        )
        .unwrap();
        assert!(!finished);
        assert!(started.elapsed() < Duration::from_secs(15));
        assert!(std::fs::read_to_string(&log).unwrap().contains("started"));
        // A command that ends by itself in time, and one that fails.
        assert!(run_until(Path::new("/bin/true"), &[], Duration::from_secs(10), &log).unwrap());
        let failed = run_until(Path::new("/bin/false"), &[], Duration::from_secs(10), &log);
        assert!(failed.unwrap_err().to_string().contains("failed"));

        // Results: a named file and the files a prefix names, written since the part began;
        // missing ones, and an earlier run's, are left out.
        std::fs::write(dir.join("observed-a.jsonl"), "a").unwrap();
        std::fs::write(dir.join("observed-b.jsonl"), "b").unwrap();
        let out = dir.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let prefix = format!("{}/observed-*", dir.display());
        let named = format!("{}/part.log", dir.display());
        let missing = format!("{}/nothing.json", dir.display());
        let copied = copy_results(&[&prefix, &named, &missing], since, &out, "server").unwrap();
        assert_eq!(copied, 3);
        assert!(!out.join("server-observed-old.jsonl").exists());
        assert_eq!(
            std::fs::read_to_string(out.join("server-observed-b.jsonl")).unwrap(),
            "b"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

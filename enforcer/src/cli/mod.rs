//! The command line: every subcommand of `enforcer`, and what each runs. This is the binary's
//! edge, where errors become one printed line (`anyhow`); the library below it speaks typed
//! errors.

pub(crate) mod calibrate;
pub(crate) mod check;
pub(crate) mod client;
pub(crate) mod health;
pub(crate) mod launch;
pub(crate) mod observe;
pub(crate) mod pods;
pub(crate) mod relaunch;
pub(crate) mod replay;
pub(crate) mod replay_pace;
pub(crate) mod status;

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use enforcer_common::protocol::GroupKind;

use crate::{
    config::{self, Settings},
    daemon,
    host::paths::{self, DEFAULT_CONFIG, DEFAULT_INSTANCE},
};

/// reamer's enforcer: runs inference in the CPU capacity training leaves idle, and gives it
/// back the instant training needs it.
///
/// Start the daemon with `enforcer run` (as root). It attaches eBPF programs to the scheduler
/// tracepoints, measures how long each training job's threads wait for a CPU, and tells
/// userspace when a training thread lands behind inference.
#[derive(Parser)]
#[command(name = "enforcer", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log level when RUST_LOG is not set: error, warn, info, debug or trace.
    #[arg(long, global = true, default_value = "info")]
    pub log_level: String,
}

#[derive(Args, Clone)]
struct InstanceArg {
    /// Which daemon: each instance has its own pins (/sys/fs/bpf/reamer/v8/INSTANCE) and
    /// control socket (/run/reamer/INSTANCE.sock).
    #[arg(long, default_value = DEFAULT_INSTANCE, value_parser = parse_instance)]
    instance: String,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (root): load the sensor, classify threads, serve the control socket.
    ///
    /// Stops cleanly on SIGINT or SIGTERM, detaching the programs and removing the pins.
    Run {
        /// TOML config with [sensor], [[training]] and [[pool]] sections. Default: /etc/reamer/enforcer.toml
        /// if it exists, else built-in defaults with no groups.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Append every decision (trigger, new allocation, event-to-write latency) to this file
        /// as JSON lines. Default: /run/reamer/INSTANCE.decisions.jsonl
        #[arg(long)]
        decision_log: Option<PathBuf>,
        #[command(flatten)]
        instance: InstanceArg,
    },
    /// Run a command as part of a training job or an inference pool (needs a running daemon).
    ///
    /// The command keeps the launcher's pid and starts with REAMER_SOCKET set; in a pool also
    /// with REAMER_POOL and the pool's REAMER_SLO_MS, which an inference worker follows, and in
    /// a GPU pool with its MPS limits. Training gets CUDA_MPS_PIPE_DIRECTORY where the MPS
    /// control daemon is not on NVIDIA's default (`[gpu] mps_pipe_dir`, or /run/reamer/mps
    /// for one the enforcer started), unless its environment sets one.
    ///
    /// Examples:
    ///
    ///   enforcer launch --training resnet -- python train.py
    ///
    ///   enforcer launch --pool serve --relaunch --listen 127.0.0.1:8000 -- inference-worker online --model m.onnx
    #[command(group = clap::ArgGroup::new("membership").required(true).args(["training", "pool"]))]
    Launch {
        /// Training job to join; created if new.
        #[arg(long)]
        training: Option<String>,
        /// Inference pool to join; must be declared in the daemon's config.
        #[arg(long)]
        pool: Option<String>,
        /// Stay as the command's parent and relaunch it when new workers of the pool would
        /// start differently (a GPU pool's MPS percentage changed: NVIDIA applies one only to
        /// new clients) or when `enforcer relaunch --pool NAME` asks. Pools only.
        #[arg(long, conflicts_with = "training")]
        relaunch: bool,
        /// With --relaunch: own a TCP listening socket on ADDR and give it to the command as
        /// fd 3 (systemd socket activation: LISTEN_FDS=1, LISTEN_PID). A relaunch then starts
        /// the new command first and stops the old one once the new one reports READY=1 on
        /// NOTIFY_SOCKET, so no request is dropped. Without it the old command stops first.
        #[arg(long, requires = "relaunch", value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// With --listen: seconds a new command may take to report READY=1 before it is
        /// stopped and the old one kept.
        #[arg(long, requires = "relaunch", default_value_t = 120.0, value_parser = parse_interval)]
        ready_timeout_s: f64,
        /// With --relaunch: seconds a command may take to exit on SIGTERM (to drain) before
        /// SIGKILL.
        #[arg(long, requires = "relaunch", default_value_t = 30.0, value_parser = parse_interval)]
        stop_timeout_s: f64,
        /// Run the command as USER (a name or a uid), not as root: the launcher registers as
        /// root, the command gets USER's groups and none of root's power. For every worker
        /// that answers the network.
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// With --user: the command's group (a name or a gid) instead of USER's own.
        #[arg(long, value_name = "GROUP", requires = "user")]
        group: Option<String>,
        #[command(flatten)]
        instance: InstanceArg,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Relaunch a pool's workers started with `launch --relaunch` (root).
    ///
    /// Each such launcher starts its command anew (to pick up a new model file, say) and stops
    /// the old one, without dropping requests when it owns the listening socket (`--listen`).
    Relaunch {
        /// The pool whose workers to relaunch.
        #[arg(long)]
        pool: String,
        #[command(flatten)]
        instance: InstanceArg,
    },
    /// Internal: exec the command with LISTEN_PID set to its own pid (used by --listen).
    #[command(name = "exec-listening", hide = true)]
    ExecListening {
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Print live figures per training job from a running daemon: run-queue wait p50/p99/max,
    /// CPU demand, events per second.
    ///
    /// Waits are measured on the run queue's clock unless the daemon's config says
    /// `[sensor] clock = "monotonic"`: a wakeup that preempts at once then counts as a 0 µs
    /// wait, as in the kernel's schedstat, so a p50 of 0 means most waits were of that kind.
    Observe {
        /// Seconds between lines (fractions allowed).
        #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
        interval: f64,
        /// Stop after this many intervals (0: run until interrupted).
        #[arg(long, default_value_t = 0)]
        count: u64,
        /// One JSON object per interval instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        instance: InstanceArg,
    },
    /// Run the CPU policy over a trace recorded with `observe --json`, offline: no daemon, no
    /// root, any machine.
    ///
    /// Each interval's contention reports go to the fast path and its demand to the slow path,
    /// as in the daemon. Prints, per interval, training's running and demand CPUs, the cores
    /// reserved for it and whether offline was paused, then a summary (with --json, one JSON
    /// object per interval and the summary as the last line). The replay shows how the policy
    /// answers a job's demand; it cannot show how the job would have answered the policy.
    ///
    /// Examples:
    ///
    ///   enforcer observe --interval 0.1 --json > trace.jsonl    (while training runs)
    ///
    ///   enforcer replay trace.jsonl
    ///
    ///   enforcer replay old-trace.jsonl --cpus 16 --config enforcer.toml --json
    Replay {
        /// The trace: one line of `enforcer observe --json` per interval.
        trace: PathBuf,
        /// Replay with this config's [policy] and [[pool]] sections. Default: the default
        /// policy, one online pool with min_cores = 2 (half the CPUs on a machine of fewer
        /// than 4) and one offline pool.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The traced machine's CPU count, for traces that do not record it (those recorded
        /// before `observe --json` did).
        #[arg(long)]
        cpus: Option<usize>,
        /// One JSON object per interval, then the summary as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run the pace controller (`[policy] harvest_by_pace`) over a job's recorded step times,
    /// without a daemon, root or the job: where it would settle, how long its search takes,
    /// and how much its probes hold offline back, given how this job's pace really moves.
    ///
    /// Each recording is a JSON array of the job's step times in ms, in order: one made with
    /// offline inference held back (or absent), one with offline beside the job. The replay
    /// plays the first while the controller holds offline back and the second at every other
    /// level, each repeated as needed, and reports the job's steps as `reamer_progress` does:
    /// after the first step a second past the last report, with the count's mean over the
    /// time between (`--counts-only`: the count alone; `--gpu-busy MS`: no reports, the pace
    /// read from its GPUs' busy share as for a job that sends none). So every level above
    /// `held` costs what the second recording shows: the replay tells whether the controller
    /// finds that cost through the job's noise (or, given the first recording alone, whether
    /// the noise alone moves it). `--cost` slows the second recording further: from one recording of a job
    /// alone, whether the controller would find a cost of that size through the job's own
    /// noise, and how soon. `--level-cost` gives levels costs of their own: which level a
    /// ladder of costs (a frontier a benchmark measured) would have it keep, and how soon.
    ///
    /// Examples:
    ///
    ///   enforcer replay-pace alone-steps.json beside-steps.json
    ///
    ///   enforcer replay-pace alone-steps.json --seconds 3600 --json
    ///
    ///   enforcer replay-pace alone-steps.json --cost 0.03
    ///
    ///   enforcer replay-pace alone-steps.json --level-cost training_cores=0.004
    ///
    ///   enforcer replay-pace alone-steps.json --spread
    ///
    ///   enforcer replay-pace alone-steps.json --gpu-busy 36 --cost 0.1
    ReplayPace {
        /// The job's step times (ms) with offline held back.
        held: PathBuf,
        /// The job's step times (ms) with offline inference beside it. Default: HELD again,
        /// the job's own noise with nothing costing it.
        beside: Option<PathBuf>,
        /// Every level above `held` slows the job by this much more (0.03: 3% of its pace):
        /// BESIDE's steps, each longer by 1 / (1 − COST).
        #[arg(long, default_value_t = 0.0)]
        cost: f64,
        /// LEVEL=COST: at this level BESIDE is slowed by COST instead of --cost (repeat, or
        /// separate by commas). Levels, least offline first: quarter, half, three_quarters,
        /// policy, unpaused, training_cores.
        #[arg(long, value_delimiter = ',', value_name = "LEVEL=COST")]
        level_cost: Vec<String>,
        /// Seconds of the job to replay.
        #[arg(long, default_value_t = 1800)]
        seconds: u64,
        /// The controller's ε, as `[policy] pace_epsilon` (0.01: training may lose 1%).
        #[arg(long, default_value_t = crate::config::policy::DEFAULT_PACE_EPSILON)]
        epsilon: f64,
        /// Reports carry the count alone, not its mean since the report before: a job whose
        /// reporter keeps no mean (one other than `reamer_progress`, or an older one), which
        /// the controller reads from counts.
        #[arg(long)]
        counts_only: bool,
        /// No reports: the job's pace read from its GPUs' busy share, as the daemon reads it
        /// for a training job that reports no progress (`[gpu]`, sampled every 200 ms in whole
        /// percent), each step ending with MS of GPU work and the GPU idle the rest (all of a
        /// step shorter than MS on it). A step of 30 s reads as 30 s of idle GPUs: a pause.
        #[arg(long, value_name = "MS", conflicts_with = "counts_only")]
        gpu_busy: Option<f64>,
        /// Instead of replaying the controller: how far its cycles would spread over HELD
        /// with nothing changing, by the length of their halves (2 to 10 s measured), read
        /// from the count's means and from the counts alone, and how many cycles (and
        /// minutes) a comparison would need before its 95% interval narrows to ±ε. Whether
        /// the job's signal can judge ε at all, and with halves how long.
        #[arg(
            long,
            conflicts_with_all = ["beside", "cost", "level_cost", "seconds", "counts_only", "gpu_busy"]
        )]
        spread: bool,
        /// The replay as one JSON object: each change, the time at each level, when it first
        /// settled and where it last did.
        #[arg(long)]
        json: bool,
    },
    /// This node's Kubernetes pods as reamer reads them: which are training (and of which
    /// job), which join which pool, and whether each container's cgroup is where the kubelet
    /// puts it. Read-only; needs the API server, not the daemon. Exits 1 where a pod marked
    /// for reamer cannot be classified (an unknown pool, say).
    ///
    /// Pods are marked with the label (or annotation) reamer.io/role: training | online |
    /// offline, and reamer.io/pool or reamer.io/job; [[kubernetes.selector]] entries of the
    /// config map other agents' labels (docs/kubernetes.md).
    ///
    /// Examples:
    ///
    ///   enforcer pods --node gpu-node-3
    ///
    ///   KUBECONFIG=~/.kube/config enforcer pods --config /etc/reamer/enforcer.toml --json
    Pods {
        /// The config whose pools and [kubernetes] section apply. Default:
        /// /etc/reamer/enforcer.toml where it exists.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The node. Default: [kubernetes] node_name, else $NODE_NAME, else the host name.
        #[arg(long)]
        node: Option<String>,
        /// One JSON object per pod (with --watch, per change, each with its "event").
        #[arg(long)]
        json: bool,
        /// Follow the pods and their containers' cgroups until interrupted: a line per pod
        /// that comes or changes, per pod that goes, and per container group that appears or
        /// goes under a managed pod (seen by inotify the moment the runtime makes it).
        #[arg(long)]
        watch: bool,
    },
    /// Preflight report: kernel, BTF, privileges, real time, program types, mounts, cgroup
    /// mode, GPU; each missing piece with how to fix it. Exits 1 when something required is
    /// missing.
    Check,
    /// Exit 0 while the daemon's event path is alive, 1 (saying why) when it is not or no
    /// daemon answers in time: for liveness and readiness probes.
    ///
    /// It asks over the control socket, as the service watchdog judges: the event thread came
    /// back from poll(2) recently, and the lock each event takes is free within a second. Run
    /// as root, it uses root's own connection budget, which no other user can exhaust.
    ///
    /// Example (a Kubernetes exec probe): enforcer health --instance default --timeout-s 5
    Health {
        /// Seconds to wait for the answer before calling the daemon unhealthy.
        #[arg(long, default_value_t = 5.0, value_parser = parse_interval)]
        timeout_s: f64,
        #[command(flatten)]
        instance: InstanceArg,
    },
    /// Show training jobs, pools, the CPUs each holds now, and recent decisions.
    Status {
        /// The whole snapshot as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        instance: InstanceArg,
    },
    /// Measure this machine's floor for eBPF program cost on sched_switch (root): attach a
    /// no-op and a clock-read program for a while with run-time statistics on, and print
    /// nanoseconds per run as JSON. Benchmarks run it beside a workload.
    ///
    /// With --floor, measure nothing: attach a no-op program to each of the five tracepoints
    /// the sensor uses, print {"attached": [...]} once they are, and hold them for --seconds
    /// or until killed. A workload run meanwhile loses what any program on those tracepoints
    /// costs it, whatever the program does (`cargo xtask bench --only sensor` compares that
    /// with the sensor's loss).
    Calibrate {
        /// How long to measure (or with --floor, to hold the no-ops), in seconds.
        #[arg(long, default_value_t = 2.0, value_parser = parse_interval)]
        seconds: f64,
        /// Attach the no-op floor to the sensor's tracepoints and hold it, statistics off.
        #[arg(long)]
        floor: bool,
    },
}

fn parse_instance(value: &str) -> Result<String, paths::InvalidInstance> {
    paths::validate_instance(value).map(|()| value.to_owned())
}

/// A number of seconds out of the range a command takes.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a number of seconds between 0.05 and 3600")]
struct BadSeconds(String);

fn parse_interval(value: &str) -> Result<f64, BadSeconds> {
    match value.parse::<f64>() {
        Ok(v) if (0.05..=3600.0).contains(&v) => Ok(v),
        _ => Err(BadSeconds(value.to_owned())),
    }
}

/// The settings `enforcer run` runs with: `--config`, else the default file where it exists,
/// else the built-in defaults with no groups.
fn load_settings(path: Option<PathBuf>) -> Result<Settings, config::ConfigError> {
    match path {
        Some(path) => config::load(&path),
        None if std::path::Path::new(DEFAULT_CONFIG).exists() => {
            config::load(std::path::Path::new(DEFAULT_CONFIG))
        }
        None => Ok(Settings::default()),
    }
}

/// Every subcommand runs its async work on the calling thread.
fn current_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The user `launch --user` runs its command as, resolved before anything starts.
fn identity_of(
    user: Option<&str>,
    group: Option<&str>,
) -> anyhow::Result<Option<launch::identity::Identity>> {
    user.map(|user| launch::identity::resolve(user, group))
        .transpose()
        .map_err(Into::into)
}

/// Runs the command `cli` names.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let ran_to_end = match cli.command {
        Command::Launch {
            pool: Some(pool),
            relaunch: true,
            listen,
            ready_timeout_s,
            stop_timeout_s,
            user,
            group,
            instance,
            command,
            ..
        } => {
            let options = launch::supervise::Options {
                listen,
                ready_timeout: Duration::from_secs_f64(ready_timeout_s),
                stop_timeout: Duration::from_secs_f64(stop_timeout_s),
                identity: identity_of(user.as_deref(), group.as_deref())?,
            };
            let socket = paths::socket_path(&instance.instance);
            // The launcher ends as its last command did.
            let code = launch::supervise::run(&socket, &pool, &command, options)?;
            return Ok(ExitCode::from(code));
        }
        Command::ExecListening { command } => Err(launch::supervise::exec_listening(&command)),
        Command::Relaunch { pool, instance } => {
            let runtime = current_thread_runtime()?;
            runtime.block_on(relaunch::run(
                &paths::socket_path(&instance.instance),
                &pool,
            ))
        }
        Command::Run {
            config,
            decision_log,
            instance,
        } => {
            let settings = load_settings(config)?;
            let decision_log =
                decision_log.unwrap_or_else(|| paths::decision_log(&instance.instance));
            let runtime = current_thread_runtime()?;
            Ok(runtime.block_on(daemon::run(settings, &instance.instance, &decision_log))?)
        }
        Command::Launch {
            training,
            pool,
            user,
            group,
            instance,
            command,
            ..
        } => {
            let (kind, name) = match (training, pool) {
                (Some(name), _) => (GroupKind::Training, name),
                (None, Some(name)) => (GroupKind::Pool, name),
                (None, None) => unreachable!("clap requires --training or --pool"),
            };
            let identity = identity_of(user.as_deref(), group.as_deref())?;
            launch::run(
                &paths::socket_path(&instance.instance),
                kind,
                &name,
                &command,
                identity.as_ref(),
            )
        }
        Command::Check => check::report(),
        Command::Pods {
            config,
            node,
            json,
            watch,
        } => {
            let runtime = current_thread_runtime()?;
            runtime.block_on(pods::run(config, node, json, watch))
        }
        Command::Replay {
            trace,
            config,
            cpus,
            json,
        } => replay::run(&trace, config, cpus, json),
        Command::ReplayPace {
            held,
            epsilon,
            spread: true,
            json,
            ..
        } => replay_pace::spread(&held, epsilon, json),
        Command::ReplayPace {
            held,
            beside,
            cost,
            level_cost,
            seconds,
            epsilon,
            counts_only,
            gpu_busy,
            spread: false,
            json,
        } => replay_pace::run(
            &held,
            beside.as_deref().unwrap_or(&held),
            replay_pace::Replayed {
                cost,
                level_costs: level_cost,
                seconds,
                epsilon,
                reporter: replay_pace::reporter(counts_only, gpu_busy)?,
            },
            json,
        ),
        Command::Status { json, instance } => {
            let runtime = current_thread_runtime()?;
            runtime.block_on(status::run(&paths::socket_path(&instance.instance), json))
        }
        Command::Health {
            timeout_s,
            instance,
        } => {
            let runtime = current_thread_runtime()?;
            return runtime.block_on(health::run(
                &paths::socket_path(&instance.instance),
                Duration::from_secs_f64(timeout_s),
            ));
        }
        Command::Calibrate { seconds, floor } => {
            calibrate::run(Duration::from_secs_f64(seconds), floor)
        }
        Command::Observe {
            interval,
            count,
            json,
            instance,
        } => {
            let runtime = current_thread_runtime()?;
            let socket = paths::socket_path(&instance.instance);
            runtime.block_on(observe::run(
                &socket,
                Duration::from_secs_f64(interval),
                count,
                json,
            ))
        }
    };
    ran_to_end.map(|()| ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    /// clap checks a command line's definition only when it is first used: a name clash (an
    /// argument group named like an argument, say) would panic in front of the user.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}

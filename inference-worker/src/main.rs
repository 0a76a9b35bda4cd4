//! `inference-worker`: CPU inference on tract-onnx or ONNX Runtime, online (KServe v2 over HTTP, with an SLO)
//! or offline (a checkpointed batch job), on the cores the reamer enforcer grants.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use clap::{Args, Parser, Subcommand};
use inference_worker::{
    affinity, bench,
    engine::{self, EngineChoice},
    executor::{Config, Executor},
    grants::{self, GrantSource},
    metrics::Metrics,
    mlp_model,
    model::Model,
    offline, online,
    queue::JobQueue,
    tiny_model,
};

#[derive(Parser)]
#[command(
    version,
    about = "reamer's CPU inference worker: tract-onnx or ONNX Runtime, online (KServe v2 HTTP) \
             or offline (checkpointed batch jobs), on the cores the enforcer grants",
    long_about = "reamer's CPU inference worker.\n\n\
        The model runs on ONNX Runtime where its library loads (--onnxruntime, or \
        target/onnxruntime/ where `cargo xtask` puts it), and on tract, built in, otherwise \
        (--engine). Either runs one thread per granted core.\n\n\
        Run it under the enforcer with `enforcer launch --pool NAME -- inference-worker …`: it \
        then follows the pool's core grants (REAMER_POOL and REAMER_SOCKET are set by the \
        launcher). Run alone, it uses --cpus, or every CPU it may run on.\n\n\
        Examples:\n  \
        inference-worker tiny-model --out /tmp/tiny.onnx\n  \
        inference-worker online --model /tmp/tiny.onnx --listen 127.0.0.1:8000 --slo-ms 20\n  \
        inference-worker make-job --model /tmp/tiny.onnx --dir /tmp/job --lines 1000\n  \
        inference-worker offline --model /tmp/tiny.onnx --job /tmp/job"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the model over HTTP with the KServe v2 protocol, within a latency SLO.
    Online(OnlineArgs),
    /// Run a batch job directory (inputs.jsonl) to results.jsonl, with a durable checkpoint.
    Offline(OfflineArgs),
    /// Write the tiny test model (y = relu(x·W + b), x [N,4], y [N,3]) to a file.
    TinyModel {
        #[arg(long)]
        out: PathBuf,
        /// Weight version: another version gives other weights with the same signature.
        #[arg(long, default_value_t = 1)]
        version: u32,
    },
    /// Write a synthetic MLP (x [N,inputs] → layers × width, ReLU → y [N,outputs]) to a file:
    /// a CPU-bound model whose cost is set by width and depth while its input stays small.
    MlpModel {
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=65536))]
        inputs: u32,
        #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=8192))]
        width: u32,
        /// Hidden layers.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=64))]
        layers: u32,
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=65536))]
        outputs: u32,
    },
    /// Write a job directory of random inputs for a model (fixed seed).
    MakeJob {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 1000)]
        lines: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Print the engine's latency per batch size on one pinned thread, as JSON.
    Bench {
        #[command(flatten)]
        model: ModelArgs,
        /// Batch sizes, comma-separated.
        #[arg(long, default_value = "1,8", value_delimiter = ',')]
        batches: Vec<usize>,
        #[arg(long, default_value_t = 20)]
        runs: usize,
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        /// The CPU to pin to.
        #[arg(long, default_value_t = 0)]
        cpu: u32,
        /// Also time every operator and print the time per operator type ("ops") for each
        /// batch size (tract only).
        #[arg(long)]
        ops: bool,
    },
}

#[derive(Args)]
struct ModelArgs {
    /// The ONNX model file.
    #[arg(long)]
    model: PathBuf,
    /// The model's name in the HTTP routes (default: the file name without extension).
    #[arg(long)]
    name: Option<String>,
    /// The input's shape without the batch dimension, for models that leave it open
    /// (the PP-OCR classifier: 3,48,192; the recognizer: 3,48,320).
    #[arg(long, value_delimiter = ',')]
    input_shape: Option<Vec<usize>>,
    /// The engine that runs the model. auto: where ONNX Runtime's library loads, the model is
    /// loaded on both and a few batches timed on one thread, and the faster engine kept
    /// (ONNX Runtime is 1.2-7x faster on the PP-OCR models; on a plain MLP the two are within
    /// 15%); tract where the library does not load. The choice and its timings are logged.
    #[arg(long, value_enum, env = "REAMER_ENGINE", default_value_t = EngineChoice::Auto)]
    engine: EngineChoice,
    /// ONNX Runtime's shared library, libonnxruntime.so of release 1.31 or later (the
    /// onnxruntime wheel holds one in onnxruntime/capi/). Default: beside this binary, then
    /// in ../onnxruntime/ from it, where `cargo xtask` puts the one it fetches. A path given
    /// here must load.
    #[arg(long, env = "REAMER_ONNXRUNTIME")]
    onnxruntime: Option<PathBuf>,
}

#[derive(Args)]
struct GrantArgs {
    /// Run on these CPUs (a list such as 0-3,6) instead of following an enforcer.
    #[arg(long, conflicts_with_all = ["pool"])]
    cpus: Option<String>,
    /// Follow this pool's core grants from the enforcer.
    #[arg(long, env = "REAMER_POOL")]
    pool: Option<String>,
    /// The enforcer's control socket.
    #[arg(
        long,
        env = "REAMER_SOCKET",
        default_value = "/run/reamer/default.sock"
    )]
    enforcer_socket: PathBuf,
}

impl GrantArgs {
    fn source(&self) -> anyhow::Result<GrantSource> {
        if let Some(pool) = &self.pool {
            return Ok(GrantSource::Enforcer {
                socket: self.enforcer_socket.clone(),
                pool: pool.clone(),
            });
        }
        let cpus = match &self.cpus {
            Some(list) => {
                affinity::parse_cpu_list(list).map_err(|e| anyhow::anyhow!("--cpus: {e}"))?
            }
            None => affinity::allowed_cpus()?,
        };
        Ok(GrantSource::Fixed(cpus))
    }
}

#[derive(Args)]
struct OnlineArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to serve on (loopback by default). A socket passed by a launcher (systemd's
    /// LISTEN_FDS, as `enforcer launch --relaunch --listen` does) is served instead.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// Serving a socket passed by a launcher: on SIGTERM, how long to keep answering open
    /// connections (each answer with `Connection: close`, so the client moves to the
    /// successor) before closing the idle ones, in seconds. Accepting stops at once.
    #[arg(long, default_value_t = 5.0)]
    drain_timeout_s: f64,
    /// Latency SLO per request, in milliseconds. `enforcer launch` into a pool whose config
    /// gives `slo_ms` sets REAMER_SLO_MS.
    #[arg(long, env = "REAMER_SLO_MS", default_value_t = 100.0)]
    slo_ms: f64,
    /// Largest batch the dynamic batcher may form (rounded down to a power of two).
    #[arg(long, default_value_t = 8)]
    max_batch: usize,
    /// Items the request queue holds; beyond it requests get 429.
    #[arg(long, default_value_t = 256)]
    queue_capacity: usize,
    /// Largest request body, in bytes (413 beyond).
    #[arg(long, default_value_t = 16 << 20)]
    max_body_bytes: usize,
    /// Request bodies read at once (429 beyond): with --max-body-bytes, bounds memory.
    #[arg(long, default_value_t = 32)]
    max_concurrent_bodies: usize,
    /// Milliseconds a request's body may take to arrive (408 beyond): a client that sends
    /// its body slowly, or never, gives its body slot back instead of holding it.
    #[arg(long, default_value_t = 10_000)]
    body_timeout_ms: u64,
    /// Milliseconds from waiting for a request's head to having all of it: a connection left
    /// idle between requests that long, or a head sent too slowly, is closed.
    #[arg(long, default_value_t = 30_000)]
    header_timeout_ms: u64,
    /// Connections open at once; the next is answered 503 and closed. Lowered at start to what
    /// the open-file limit allows.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Batches per point of the start-up profile.
    #[arg(long, default_value_t = 5)]
    profile_runs: usize,
    /// How often to look for a new model file, in milliseconds (0: never reload).
    #[arg(long, default_value_t = 500)]
    reload_poll_ms: u64,
    #[command(flatten)]
    grants: GrantArgs,
}

#[derive(Args)]
struct OfflineArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The job directory (inputs.jsonl; results.jsonl and checkpoint.json are written there).
    #[arg(long)]
    job: PathBuf,
    /// Items per batch.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Longest time between checkpoints, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    checkpoint_ms: u64,
    /// Stop after this many input lines in this run (the job stays resumable).
    #[arg(long)]
    max_lines: Option<u64>,
    #[command(flatten)]
    grants: GrantArgs,
}

/// Loads the model for batches of up to `max_batch`; `typical_batch` is the size `--engine
/// auto` compares the engines at.
fn load(args: &ModelArgs, max_batch: usize, typical_batch: usize) -> anyhow::Result<Arc<Model>> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => args
            .model
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".to_owned()),
    };
    let spec = engine::ModelSpec {
        name: &name,
        path: &args.model,
        item_shape: args.input_shape.as_deref(),
        max_batch,
        typical_batch,
    };
    Ok(Arc::new(engine::load_model(
        args.engine,
        args.onnxruntime.as_ref(),
        &spec,
    )?))
}

fn run_offline(args: OfflineArgs) -> anyhow::Result<u8> {
    // Before anything takes time, so that a stop asked during start-up is honoured too.
    offline::stop::install()?;
    let model = load(&args.model, args.batch.max(1), args.batch.max(1))?;
    let source = args.grants.source()?;
    let (tx, rx) = std::sync::mpsc::channel::<grants::Grant>();
    // An offline job has no SLO: it takes what it is granted and states no need.
    let no_need = grants::SloReporter::default();
    let first = grants::follow(&source, Duration::from_secs(10), &no_need, move |grant| {
        let _ = tx.send(grant.clone());
    })?;
    let executor = Arc::new(Executor::start(
        model,
        // Two batches in flight per thread, with room for every CPU a grant may add.
        Arc::new(JobQueue::new(usize::MAX / 2)),
        Config {
            threads: first.cpus.len(),
            cpus: first.cpus.clone(),
            max_batch: args.batch.max(1),
            batch_delay: Duration::ZERO,
        },
        Arc::new(Metrics::new(Duration::MAX)),
    ));
    {
        // Every granted core gets a thread.
        let executor = executor.clone();
        std::thread::spawn(move || {
            for grant in rx {
                let mut config = executor.config();
                // A pause is logged before the freeze it announces, when the thread gets
                // there first; the grant that resumes the pool follows the thaw. A pause or
                // resume alone is a debug line: under the enforcer's duty cycle (training
                // filling its cores, not their headroom) they come twice a second.
                if grant.cpus == config.cpus {
                    tracing::debug!(cpus = ?grant.cpus, paused = grant.paused, "new grant");
                } else {
                    tracing::info!(cpus = ?grant.cpus, paused = grant.paused, "new grant");
                }
                config.threads = grant.cpus.len();
                config.cpus = grant.cpus;
                executor.reconfigure(config);
            }
        });
    }
    let summary = offline::run(
        &executor,
        &offline::Options {
            dir: args.job,
            batch: args.batch,
            checkpoint_every: Duration::from_millis(args.checkpoint_ms),
            max_lines: args.max_lines,
        },
    );
    // The threads stop before the process ends, failed job or not: none is left inside the
    // engine while the process exits.
    executor.shutdown();
    let summary = summary?;
    println!("{}", serde_json::to_string(&summary)?);
    if summary.rejected_this_run > 0 {
        eprintln!(
            "inference-worker: {} input lines were rejected; their errors are in {}",
            summary.rejected_this_run,
            offline::RESULTS
        );
        return Ok(3);
    }
    Ok(0)
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    match cli.command {
        Command::Online(args) => {
            // Online batches are as large as the load needs: the engines are compared at one
            // item, the batch of a lightly loaded server and the one the SLO binds.
            let model = load(&args.model, args.max_batch.max(1), 1)?;
            online::run(online::Options {
                model,
                item_shape: args.model.input_shape.clone(),
                listen: args.listen,
                drain_timeout: Duration::try_from_secs_f64(args.drain_timeout_s).map_err(|_| {
                    anyhow::anyhow!(
                        "--drain-timeout-s {} is not a number of seconds",
                        args.drain_timeout_s
                    )
                })?,
                slo: Duration::from_secs_f64(args.slo_ms.max(0.001) / 1000.0),
                grants: args.grants.source()?,
                queue_capacity: args.queue_capacity,
                body_limit: args.max_body_bytes,
                max_bodies: args.max_concurrent_bodies,
                body_timeout: Duration::from_millis(args.body_timeout_ms.max(1)),
                header_timeout: Duration::from_millis(args.header_timeout_ms.max(1)),
                max_connections: args.max_connections.max(1),
                profile_runs: args.profile_runs,
                reload_poll: (args.reload_poll_ms > 0)
                    .then(|| Duration::from_millis(args.reload_poll_ms)),
            })?;
            Ok(0)
        }
        Command::Offline(args) => run_offline(args),
        Command::TinyModel { out, version } => {
            std::fs::write(&out, tiny_model::encode(version))
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
            Ok(0)
        }
        Command::MlpModel {
            out,
            inputs,
            width,
            layers,
            outputs,
        } => {
            let shape = mlp_model::MlpShape {
                inputs: inputs as usize,
                width: width as usize,
                layers: layers as usize,
                outputs: outputs as usize,
            };
            std::fs::write(&out, mlp_model::encode(shape))
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
            Ok(0)
        }
        Command::MakeJob {
            model,
            dir,
            lines,
            seed,
        } => {
            let model = load(&model, 1, 1)?;
            offline::generate::write_job(&dir, lines, model.signature.input_item_len(), seed)?;
            Ok(0)
        }
        Command::Bench {
            model,
            batches,
            runs,
            warmup,
            cpu,
            ops,
        } => {
            let max = batches.iter().copied().max().unwrap_or(1);
            let model = load(&model, max, 1)?;
            let results = bench::measure(&model, &batches, runs, warmup, cpu)?;
            let mut report = serde_json::json!({"model": model.name, "engine": model.engine().name(), "results": results});
            if ops {
                let profiles: Vec<_> = batches
                    .iter()
                    .map(|&batch| {
                        bench::op_profile(&model, batch, runs, cpu)
                            .map(|ops| serde_json::json!({"batch": batch, "ops": ops}))
                    })
                    .collect::<Result<_, inference_worker::bench::BenchError>>()?;
                report["op_profiles"] = serde_json::json!(profiles);
            }
            println!("{report}");
            Ok(0)
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let code = match run(Cli::parse()) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("inference-worker: {err:#}");
            2
        }
    };
    exit(code)
}

/// Ends the process with `code`. Where ONNX Runtime was loaded, without running the C++
/// static destructors of its library: a thread still inside it (an inference thread building
/// its session while start-up fails) then calls into destroyed objects, and the process
/// aborts ("pure virtual method called") instead of exiting with its status. Nothing of the
/// worker's own needs those destructors: its files are written and synced as it goes, and
/// standard output is flushed here.
fn exit(code: u8) -> ExitCode {
    if inference_worker::ort_library::loaded().is_none() {
        return ExitCode::from(code);
    }
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process at once; nothing of this process is used after it.
    unsafe { libc::_exit(i32::from(code)) }
}

//! Offline mode: a checkpointed batch job over every granted core.
//!
//! A job is a directory:
//! - `inputs.jsonl` (written by the user): one item per line, `{"id": ..., "data": [...]}`,
//!   the data flat or nested, row-major, the size of one model input item;
//! - `results.jsonl` (written by the worker): one line per input line, in input order,
//!   `{"line": N, "id": ..., "outputs": {"NAME": [...]}}`, or `{"line": N, "id": ...,
//!   "error": "..."}` for a line that could not be read;
//! - `checkpoint.json` (written by the worker): see `checkpoint`;
//! - `worker.lock`: held by the worker running the job, so that a second one is refused.
//!
//! The directory must be one only the worker's user can change, and its files are opened
//! relative to it, never through a link, and only if regular (`job_dir`): a worker runs as
//! root on some nodes.
//!
//! Batches go to the inference threads in order, several in flight, and their results are
//! written back in order; the results are made durable before each checkpoint that counts
//! them.

pub mod checkpoint;
pub mod generate;
pub mod job;
pub mod job_dir;
pub mod stop;

use std::{
    collections::VecDeque,
    fs::File,
    io::{BufRead as _, BufReader, Seek as _, SeekFrom, Write as _},
    os::fd::AsRawFd as _,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    executor::Executor,
    queue::{Job, JobResult, Rejected},
    session::InferenceFailed,
};
use checkpoint::{Checkpoint, CheckpointError};
use job::{BadLine, LineRead};
use job_dir::{Access, JobDir, JobDirError};

pub const INPUTS: &str = "inputs.jsonl";
pub const RESULTS: &str = "results.jsonl";
pub const CHECKPOINT: &str = "checkpoint.json";
/// Held (flock) by the worker running the job.
pub const LOCK: &str = "worker.lock";

pub struct Options {
    pub dir: PathBuf,
    /// Items per batch handed to one inference thread.
    pub batch: usize,
    /// Longest time between checkpoints.
    pub checkpoint_every: Duration,
    /// Stop after this many lines in this run (for tests and smoke runs); None: to the end.
    pub max_lines: Option<u64>,
}

/// What a run did, printed as one JSON line at the end.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub lines_this_run: u64,
    pub inferences_this_run: u64,
    pub rejected_this_run: u64,
    pub lines_done: u64,
    pub complete: bool,
    pub seconds: f64,
    pub inferences_per_s: f64,
    pub threads: usize,
}

/// Why an offline run stopped before the end of its job (a rejected line does not stop it).
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("{error} (a job directory holds {INPUTS}, one JSON item per line)")]
    Inputs { error: JobDirError },
    #[error(transparent)]
    JobDir(#[from] JobDirError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(
        "the job {} is being run by another worker (it holds {}): one worker per job, or \
         both would write its results",
        dir.display(), dir.join(LOCK).display()
    )]
    Busy { dir: PathBuf },
    #[error("reading or writing the job: {0}")]
    Io(#[from] std::io::Error),
    #[error("the inference queue refused a batch: {0:?}")]
    Refused(Rejected),
    #[error("the inference threads went away")]
    ThreadsGone,
    #[error(transparent)]
    Inference(#[from] InferenceFailed),
}

struct InFlight {
    /// Per line: its number, its id, and either its place in the batch or why it is rejected.
    lines: Vec<(u64, Value, Result<usize, BadLine>)>,
    /// Byte offset in the inputs just after the batch's last line.
    end_offset: u64,
    answer: Option<tokio::sync::oneshot::Receiver<JobResult>>,
}

pub fn run(executor: &Arc<Executor>, options: &Options) -> Result<Summary, OfflineError> {
    let dir = JobDir::open(&options.dir).map_err(|error| match error {
        JobDirError::Open { .. } => OfflineError::Inputs { error },
        refused => OfflineError::JobDir(refused),
    })?;
    // The inputs first: a directory without them gets nothing created in it.
    let inputs = dir
        .open_file(INPUTS, Access::Read)
        .map_err(|error| OfflineError::Inputs { error })?;
    let _lock = lock_job(&dir)?;
    let inputs_len = inputs.metadata()?.len();
    let mut results = dir.open_file(RESULTS, Access::ReadWriteCreate)?;
    let mut checkpoint = Checkpoint::load(&dir, inputs_len, results.metadata()?.len())?;
    let started = Instant::now();
    let mut summary = Summary {
        lines_this_run: 0,
        inferences_this_run: 0,
        rejected_this_run: 0,
        lines_done: checkpoint.lines_done,
        complete: checkpoint.complete,
        seconds: 0.0,
        inferences_per_s: 0.0,
        threads: executor.threads(),
    };
    if checkpoint.complete {
        return Ok(summary);
    }
    // Results past the checkpoint were written by a run that did not get to checkpoint them:
    // they will be computed again.
    results.set_len(checkpoint.results_len)?;
    results.seek(SeekFrom::End(0))?;
    let mut reader = BufReader::new(inputs);
    reader.seek(SeekFrom::Start(checkpoint.input_offset))?;
    let mut offset = checkpoint.input_offset;
    let mut next_line = checkpoint.lines_done + 1;
    let item_len = executor.model().signature.input_item_len();
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut at_end = false;
    let mut last_checkpoint = Instant::now();
    let mut last_report = Instant::now();
    let mut line = Vec::new();
    let line_limit = job::max_line_bytes(item_len);
    loop {
        // Keep two batches per thread in flight, so no thread waits for the writer.
        while !at_end && in_flight.len() < 2 * executor.threads().max(1) {
            let mut batch = InFlight {
                lines: Vec::new(),
                end_offset: offset,
                answer: None,
            };
            let mut data = Vec::new();
            let mut items = 0;
            while batch.lines.len() < options.batch.max(1) {
                if stop::requested() {
                    at_end = true;
                    break;
                }
                if options.max_lines.is_some_and(|max| {
                    summary.lines_this_run + batch_lines(&in_flight) + batch.lines.len() as u64
                        >= max
                }) {
                    at_end = true;
                    break;
                }
                // A line that is not UTF-8, or endless, is a rejected line like any other:
                // failing the run on it would stop every resume at the same place.
                let parsed = match job::read_bounded(&mut reader, &mut line, line_limit)? {
                    LineRead::End => {
                        at_end = true;
                        break;
                    }
                    LineRead::Line { consumed } => {
                        offset += consumed;
                        job::parse_bytes(&line, item_len)
                    }
                    LineRead::TooLong { consumed } => {
                        offset += consumed;
                        Err(BadLine::TooLong {
                            bytes: consumed,
                            limit: line_limit,
                        })
                    }
                };
                let number = next_line;
                next_line += 1;
                match parsed {
                    Ok(item) => {
                        data.extend_from_slice(&item.data);
                        batch.lines.push((number, item.id, Ok(items)));
                        items += 1;
                    }
                    Err(reason) => batch.lines.push((number, Value::Null, Err(reason))),
                }
            }
            batch.end_offset = offset;
            if batch.lines.is_empty() {
                break;
            }
            if items > 0 {
                let (reply, answer) = tokio::sync::oneshot::channel();
                executor
                    .queue()
                    .push(Job {
                        input: data,
                        items,
                        enqueued: Instant::now(),
                        reply,
                    })
                    .map_err(OfflineError::Refused)?;
                batch.answer = Some(answer);
            }
            in_flight.push_back(batch);
        }
        let Some(batch) = in_flight.pop_front() else {
            break;
        };
        let outputs = match batch.answer {
            Some(answer) => Some(
                answer
                    .blocking_recv()
                    .map_err(|_| OfflineError::ThreadsGone)??,
            ),
            None => None,
        };
        let model = executor.model();
        let mut text = Vec::new();
        for (number, id, place) in &batch.lines {
            let record = match place {
                Ok(index) => {
                    let (_, items) = outputs.as_ref().expect("a batch with items has an answer");
                    let named: serde_json::Map<String, Value> = model
                        .signature
                        .outputs
                        .iter()
                        .zip(&items[*index])
                        .map(|(o, values)| (o.name.clone(), json!(values)))
                        .collect();
                    summary.inferences_this_run += 1;
                    json!({"line": number, "id": id, "outputs": named})
                }
                Err(reason) => {
                    summary.rejected_this_run += 1;
                    checkpoint.rejected += 1;
                    tracing::warn!("{INPUTS} line {number}: {reason}");
                    json!({"line": number, "id": id, "error": reason.to_string()})
                }
            };
            serde_json::to_writer(&mut text, &record).map_err(std::io::Error::from)?;
            text.push(b'\n');
        }
        results.write_all(&text)?;
        checkpoint.lines_done += batch.lines.len() as u64;
        checkpoint.input_offset = batch.end_offset;
        checkpoint.results_len += text.len() as u64;
        summary.lines_this_run += batch.lines.len() as u64;
        let finished = at_end && in_flight.is_empty() && options.max_lines.is_none();
        if finished || last_checkpoint.elapsed() >= options.checkpoint_every {
            checkpoint.complete = finished && reader_at_end(&mut reader)?;
            commit(&results, &checkpoint, &dir)?;
            last_checkpoint = Instant::now();
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            let rate = summary.inferences_this_run as f64 / started.elapsed().as_secs_f64();
            tracing::info!(
                lines_done = checkpoint.lines_done,
                threads = executor.threads(),
                "{rate:.1} inferences/s"
            );
            last_report = Instant::now();
        }
    }
    commit(&results, &checkpoint, &dir)?;
    if stop::requested() && !checkpoint.complete {
        tracing::info!(
            lines_done = checkpoint.lines_done,
            "stopped by a signal: results and checkpoint written, the job resumes from here"
        );
    }
    summary.seconds = started.elapsed().as_secs_f64();
    summary.inferences_per_s = summary.inferences_this_run as f64 / summary.seconds.max(1e-9);
    summary.lines_done = checkpoint.lines_done;
    summary.complete = checkpoint.complete;
    summary.threads = executor.threads();
    Ok(summary)
}

fn batch_lines(in_flight: &VecDeque<InFlight>) -> u64 {
    in_flight.iter().map(|b| b.lines.len() as u64).sum()
}

fn reader_at_end(reader: &mut BufReader<File>) -> std::io::Result<bool> {
    Ok(reader.fill_buf()?.is_empty())
}

/// Results first, durably; then the checkpoint that counts them.
fn commit(results: &File, checkpoint: &Checkpoint, dir: &JobDir) -> std::io::Result<()> {
    results.sync_data()?;
    checkpoint.store(dir)
}

/// Takes the job's lock, which the kernel drops with the returned file however the worker
/// ends: a second worker on the same job is refused at once instead of interleaving its
/// results and checkpoints with the first's.
fn lock_job(dir: &JobDir) -> Result<File, OfflineError> {
    let file = dir.open_file(LOCK, Access::ReadWriteCreate)?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        if error.kind() == std::io::ErrorKind::WouldBlock {
            return Err(OfflineError::Busy {
                dir: dir.path().to_owned(),
            });
        }
        return Err(OfflineError::Io(error));
    }
    Ok(file)
}

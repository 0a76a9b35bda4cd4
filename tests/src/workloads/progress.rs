//! A training workload's progress reports to the enforcer (`Request::Progress`), the way
//! `python/reamer_progress.py` sends a PyTorch job's: the steps done since the start, at most
//! once a second, with the count's mean over the time since the report before, over the
//! control socket `enforcer launch` names in `REAMER_SOCKET`. A report never stops the
//! workload: one the daemon refuses, or a daemon out of reach, is said once on stderr and
//! tried again later.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::net::UnixStream,
    path::PathBuf,
    time::{Duration, Instant},
};

use enforcer_common::protocol::{
    self, MeanCount, PROGRESS_RETRY_ENV, Request, Response, SOCKET_ENV,
};

/// At most one report this often, as the Python helper.
const PERIOD: Duration = Duration::from_secs(1);
/// After a failure, the next try this much later.
const RETRY: Duration = Duration::from_secs(30);
/// How long a report waits for the daemon.
const TIMEOUT: Duration = Duration::from_millis(200);

pub struct ProgressReporter {
    socket: PathBuf,
    connection: Option<BufReader<UnixStream>>,
    sent_at: Option<Instant>,
    retry_at: Option<Instant>,
    /// `RETRY`, or what `PROGRESS_RETRY_ENV` says.
    retry: Duration,
    said: bool,
    mean: Mean,
}

/// The count's mean over the time since the last report: its integral over that time, the
/// count being constant between two calls of `report`.
#[derive(Default)]
struct Mean {
    /// The count at the last call, and when.
    last: Option<(Instant, u64)>,
    step_seconds: f64,
}

impl Mean {
    fn count(&mut self, now: Instant, steps: u64) {
        if let Some((at, count)) = self.last {
            self.step_seconds += count as f64 * (now - at).as_secs_f64();
        }
        self.last = Some((now, steps));
    }

    /// The mean since the last report, sent at `since` (None: this is the first), where it
    /// can be one of `steps` (a count that went back in between has none); a new one starts.
    fn take(&mut self, now: Instant, steps: u64, since: Option<Instant>) -> Option<MeanCount> {
        let step_seconds = std::mem::take(&mut self.step_seconds);
        let seconds = (now - since?).as_secs_f64();
        let mean = MeanCount {
            steps: step_seconds / seconds,
            seconds,
        };
        mean.problem(steps).is_none().then_some(mean)
    }
}

impl ProgressReporter {
    /// A reporter to the socket in `REAMER_SOCKET`, where it is set, trying again after a
    /// failure as `REAMER_PROGRESS_RETRY_S` says (seconds above 0; `RETRY` otherwise).
    pub fn from_env() -> Option<Self> {
        let socket = std::env::var_os(SOCKET_ENV)?;
        let retry = std::env::var(PROGRESS_RETRY_ENV)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(RETRY);
        Some(Self {
            socket: PathBuf::from(socket),
            connection: None,
            sent_at: None,
            retry_at: None,
            retry,
            said: false,
            mean: Mean::default(),
        })
    }

    /// Reports `steps` done, unless a report went out less than a second ago. Whether the
    /// daemon counted this one.
    pub fn report(&mut self, steps: u64) -> bool {
        let now = Instant::now();
        self.mean.count(now, steps);
        if self.sent_at.is_some_and(|at| now - at < PERIOD)
            || self.retry_at.is_some_and(|at| now < at)
        {
            return false;
        }
        let report = Request::Progress {
            steps,
            mean: self.mean.take(now, steps, self.sent_at.replace(now)),
        };
        // A connection the daemon closed while idle is opened again once, at once.
        let answer = self.exchange(&report).or_else(|_| {
            self.connection = None;
            self.exchange(&report)
        });
        match answer {
            Ok(Response::Progress { .. }) => true,
            Ok(Response::Error { message }) => self.give_up(now, &message),
            Ok(other) => self.give_up(now, &format!("an answer not to a report: {other:?}")),
            Err(err) => self.give_up(now, &err.to_string()),
        }
    }

    fn exchange(&mut self, report: &Request) -> std::io::Result<Response> {
        if self.connection.is_none() {
            let stream = UnixStream::connect(&self.socket)?;
            stream.set_read_timeout(Some(TIMEOUT))?;
            stream.set_write_timeout(Some(TIMEOUT))?;
            self.connection = Some(BufReader::new(stream));
        }
        let connection = self.connection.as_mut().expect("connected above");
        connection.get_mut().write_all(&protocol::to_line(report))?;
        let mut line = String::new();
        if connection.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::ConnectionReset.into());
        }
        protocol::from_line(line.as_bytes()).map_err(std::io::Error::other)
    }

    fn give_up(&mut self, now: Instant, why: &str) -> bool {
        self.connection = None;
        self.retry_at = Some(now + self.retry);
        if !std::mem::replace(&mut self.said, true) {
            eprintln!(
                "progress not reported to {}: {why}; trying again every {} s",
                self.socket.display(),
                self.retry.as_secs_f64()
            );
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_is_the_counts_average_since_the_last_report_and_none_where_it_went_back() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut mean = Mean::default();
        mean.count(at(0), 10);
        // The first report: no time before it.
        assert_eq!(mean.take(at(0), 10, None), None);
        // 10 for half a second, then 20 for half a second.
        mean.count(at(500), 20);
        mean.count(at(1000), 30);
        let taken = mean.take(at(1000), 30, Some(at(0))).expect("a mean");
        assert!((taken.steps - 15.0).abs() < 1e-6 && (taken.seconds - 1.0).abs() < 1e-6);
        // A new run's count, below the last one's: its mean over the time since is above it.
        mean.count(at(1500), 5);
        mean.count(at(2000), 6);
        assert_eq!(mean.take(at(2000), 6, Some(at(1000))), None);
    }
}

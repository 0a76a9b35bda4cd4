//! A one-line progress bar on stderr for long benchmarks: redrawn in place on a terminal, one
//! line per step otherwise (CI logs).

use std::{
    io::{IsTerminal as _, Write as _},
    time::Duration,
};

const WIDTH: usize = 30;

fn line(done: usize, total: usize, elapsed: Duration, what: &str) -> String {
    let filled = (done * WIDTH).checked_div(total).unwrap_or(WIDTH);
    let left = if done == 0 {
        "?".to_owned()
    } else {
        let remaining = elapsed.as_secs_f64() / done as f64 * (total - done) as f64;
        format!("{}m{:02}s", remaining as u64 / 60, remaining as u64 % 60)
    };
    format!(
        "[bench] [{}{}] {done}/{total}, ~{left} left, {what}",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled)
    )
}

/// Shows step `done` of `total`, now doing `what`.
pub fn draw(done: usize, total: usize, elapsed: Duration, what: &str) {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err, "\r\x1b[2K{}", line(done, total, elapsed, what));
        let _ = err.flush();
    } else {
        let _ = writeln!(err, "{}", line(done, total, elapsed, what));
    }
}

/// The last state, on a line of its own.
pub fn finish(total: usize, elapsed: Duration) {
    let mut err = std::io::stderr();
    let end = if err.is_terminal() { "\r\x1b[2K" } else { "" };
    let _ = writeln!(
        err,
        "{end}[bench] [{}] {total}/{total} in {:.0} s",
        "#".repeat(WIDTH),
        elapsed.as_secs_f64()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_fills_and_estimates_what_is_left() {
        let half = line(5, 10, Duration::from_secs(60), "reamer");
        assert!(
            half.contains(&format!("[{}{}]", "#".repeat(15), ".".repeat(15))),
            "{half}"
        );
        assert!(half.contains("~1m00s left"), "{half}");
        assert!(line(0, 10, Duration::ZERO, "x").contains("~? left"));
    }
}

//! `enforcer calibrate`: this machine's floor for the cost of a program on the scheduler's
//! tracepoints (`sensor::calibration`), printed as JSON.

use std::time::Duration;

use crate::{host::preflight, sensor::calibration};

pub(crate) fn run(duration: Duration, floor: bool) -> anyhow::Result<()> {
    preflight::require_root()?;
    preflight::ensure_mounts()?;
    if floor {
        calibration::hold_floor(duration, |tracepoints| {
            println!("{}", serde_json::json!({ "attached": tracepoints }));
            // The caller starts its workload on this line: it must not sit in a buffer.
            let _ = std::io::Write::flush(&mut std::io::stdout());
        })?;
    } else {
        let stats = calibration::measure(duration)?;
        let programs: Vec<_> = stats
            .iter()
            .map(|p| {
                let per_run = p.run_time_ns as f64 / p.run_count.max(1) as f64;
                serde_json::json!({"name": p.name, "run_count": p.run_count,
                                   "run_time_ns": p.run_time_ns, "ns_per_run": per_run})
            })
            .collect();
        println!("{}", serde_json::json!({ "programs": programs }));
    }
    Ok(())
}

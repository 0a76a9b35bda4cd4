//! The GPU side's report as `enforcer status` prints it (the types are the protocol's:
//! `enforcer_common::protocol::gpu`).

use std::fmt::Write as _;

use enforcer_common::protocol::gpu::{
    ClampReason, GpuDecision, GpuDecisionRecord, GpuReport, MpsReport, Owner, Signal,
};

fn owner_text(owner: &Option<Owner>) -> String {
    match owner {
        Some(Owner::Training(name)) => format!("training {name}"),
        Some(Owner::Pool(name)) => format!("pool {name}"),
        None => "other".to_owned(),
    }
}

/// The report as `enforcer status` prints it, as of `now_ns` (CLOCK_MONOTONIC, the clock of
/// its decisions' times).
pub(crate) fn render(report: &GpuReport, now_ns: u64) -> String {
    let active = match report {
        GpuReport::Off => return "GPU: off ([gpu] enabled = \"off\")\n".to_owned(),
        GpuReport::Disabled { reason } => return format!("GPU: disabled: {reason}\n"),
        GpuReport::Active(active) => active,
    };
    let mut out = format!(
        "GPU: driver {} | gated pools {} | inference runs {:.0}% of each period ({} freezes, \
         last freeze write {:.0} µs) | training {}\n",
        active.driver,
        if active.gated_pools.is_empty() {
            "(none: set gpu = true on a [[pool]])".to_owned()
        } else {
            active.gated_pools.join(", ")
        },
        active.gate.run_fraction * 100.0,
        active.gate.freezes,
        active.gate.last_freeze_write_us,
        match (active.training_active, active.launcher_busy) {
            (true, Some(busy)) => format!("active, its launcher {:.0}% busy", busy * 100.0),
            (true, None) => "active".to_owned(),
            (false, _) => "idle".to_owned(),
        },
    );
    for device in &active.devices {
        let _ = writeln!(
            out,
            "  GPU {} {}: {}% busy, memory {}/{} MiB (training {}, inference {}, others {}), \
             training SM {}, new inference clients may pin {} MiB",
            device.index,
            device.name,
            device.utilization_pct,
            device.memory_used_mib,
            device.memory_total_mib,
            device.training_mib,
            device.inference_mib,
            device.other_mib,
            device
                .training_sm_pct
                .map_or("n/a".to_owned(), |sm| format!("{sm:.0}%")),
            device.new_client_limit_mib,
        );
        for process in &device.processes {
            let _ = writeln!(
                out,
                "    pid {:<8} {:<24} {} MiB, SM {}",
                process.pid,
                owner_text(&process.owner),
                process.used_mib.map_or("?".to_owned(), |m| m.to_string()),
                process.sm_pct.map_or("n/a".to_owned(), |s| format!("{s}%")),
            );
        }
    }
    for error in &active.device_errors {
        let _ = writeln!(out, "  {error}");
    }
    match &active.mps {
        MpsReport::Off => out.push_str("  MPS: off\n"),
        MpsReport::Unavailable { reason } => {
            let _ = writeln!(out, "  MPS: unavailable: {reason}");
        }
        MpsReport::Attached {
            started,
            in_force,
            last_error,
        } => {
            let _ = write!(
                out,
                "  MPS: {} | new inference clients get {}% of the SMs",
                if *started {
                    "started by the enforcer"
                } else {
                    "attached"
                },
                active.client_percentage
            );
            if let Some(force) = in_force {
                let _ = write!(
                    out,
                    " | in force: default {}%, servers {:?}",
                    force.default_thread_percentage,
                    force
                        .servers
                        .iter()
                        .map(|s| (s.pid, s.thread_percentage))
                        .collect::<Vec<_>>()
                );
            }
            out.push('\n');
            if let Some(error) = last_error {
                let _ = writeln!(out, "  MPS error: {error}");
            }
        }
    }
    let _ = writeln!(out, "  evictions: {}", active.evictions);
    if !active.recent.is_empty() {
        let _ = writeln!(out, "  recent decisions (oldest first):");
    }
    for record in &active.recent {
        let _ = writeln!(out, "    {}", decision_in_words(record, now_ns));
    }
    out
}

/// A GPU decision in a line: `3.2 s ago  inference runs 10% of each period: training's demand
/// rose (seen on the CPU)`.
fn decision_in_words(record: &GpuDecisionRecord, now_ns: u64) -> String {
    let ago = now_ns.saturating_sub(record.at_ns) as f64 / 1e9;
    let what = match record.decision {
        GpuDecision::Gate { run_fraction, why } => format!(
            "inference runs {:.0}% of each period: {}",
            run_fraction * 100.0,
            clamp_reason(why)
        ),
        GpuDecision::Retarget { percentage } => {
            format!("new inference clients get {percentage}% of the SMs (MPS)")
        }
    };
    format!("{ago:.1} s ago  {what}")
}

fn clamp_reason(why: ClampReason) -> String {
    let percent = |share: f64| share * 100.0;
    match why {
        ClampReason::TrainingRose { signal } => format!(
            "training's demand rose (seen {})",
            match signal {
                Signal::Cpu => "on the CPU",
                Signal::Nvml => "by NVML",
            }
        ),
        ClampReason::Probe { training_sm_pct } => {
            format!("training kept its SM use ({training_sm_pct:.0}%), so inference may run more")
        }
        ClampReason::TrainingSlowed {
            training_sm_pct,
            best_sm_pct,
        } => format!("training's SM use fell to {training_sm_pct:.0}% (best {best_sm_pct:.0}%)"),
        ClampReason::TrainingIdle => "training is idle".to_owned(),
        ClampReason::TrainingInputBound { launcher_busy } => format!(
            "training waits on its input (its launcher {:.0}% busy): the GPU has room",
            percent(launcher_busy)
        ),
        ClampReason::TrainingGpuBound { launcher_busy } => format!(
            "training is GPU-bound again (its launcher {:.0}% busy)",
            percent(launcher_busy)
        ),
    }
}

#[cfg(test)]
mod tests {
    use enforcer_common::protocol::gpu::{DeviceReport, GateStats, GpuActive, ProcessReport};

    use super::*;

    #[test]
    fn disabled_and_off_say_why_in_one_line() {
        let text = render(
            &GpuReport::Disabled {
                reason: "libnvidia-ml.so cannot be loaded".to_owned(),
            },
            0,
        );
        assert_eq!(text, "GPU: disabled: libnvidia-ml.so cannot be loaded\n");
        assert!(render(&GpuReport::Off, 0).contains("enabled = \"off\""));
    }

    #[test]
    fn an_active_report_names_devices_owners_and_the_gate() {
        let report = GpuReport::Active(Box::new(GpuActive {
            driver: "580.65".to_owned(),
            devices: vec![DeviceReport {
                index: 0,
                name: "NVIDIA H100".to_owned(),
                utilization_pct: 93,
                memory_used_mib: 30_000,
                memory_total_mib: 81_559,
                training_mib: 25_000,
                inference_mib: 4_000,
                other_mib: 1_000,
                training_sm_pct: Some(71.0),
                new_client_limit_mib: 47_463,
                processes: vec![ProcessReport {
                    pid: 42,
                    owner: Some(Owner::Pool("serve".to_owned())),
                    used_mib: Some(4_000),
                    sm_pct: Some(20),
                }],
            }],
            device_errors: vec![],
            gated_pools: vec!["serve".to_owned()],
            gate: GateStats {
                run_fraction: 0.3,
                freezes: 12,
                last_freeze_write_us: 40.0,
            },
            training_active: true,
            launcher_busy: Some(0.42),
            client_percentage: 30,
            mps: MpsReport::Unavailable {
                reason: "no MPS control daemon answers".to_owned(),
            },
            evictions: 0,
            recent: vec![
                GpuDecisionRecord {
                    at_ns: 7_000_000_000,
                    decision: GpuDecision::Gate {
                        run_fraction: 0.1,
                        why: ClampReason::TrainingGpuBound {
                            launcher_busy: 0.874,
                        },
                    },
                },
                GpuDecisionRecord {
                    at_ns: 9_500_000_000,
                    decision: GpuDecision::Retarget { percentage: 30 },
                },
            ],
        }));
        let text = render(&report, 10_000_000_000);
        for part in [
            "30% of each period",
            "pool serve",
            "training SM 71%",
            "training active, its launcher 42% busy",
            "MPS: unavailable",
            "3.0 s ago  inference runs 10% of each period: training is GPU-bound again (its \
             launcher 87% busy)",
            "0.5 s ago  new inference clients get 30% of the SMs (MPS)",
        ] {
            assert!(text.contains(part), "{part} missing:\n{text}");
        }
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<GpuReport>(&json).unwrap(), report);
    }
}

//! What the GPU side reports in snapshots: `enforcer status` renders it, `/metrics` exports
//! it, `enforcer status --json` prints it as is.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{attribution::Owner, clamp::GpuDecision, duty_cycle::GateStats, mps::LimitsInForce};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GpuReport {
    /// `[gpu] enabled = "off"`.
    Off,
    /// No NVML, no driver or no GPU: why, in one line.
    Disabled {
        reason: String,
    },
    Active(Box<GpuActive>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuActive {
    pub driver: String,
    pub devices: Vec<DeviceReport>,
    /// Devices NVML failed to read at the last sample, with the error.
    pub device_errors: Vec<String>,
    /// Pools with `gpu = true`: the ones gated and guarded.
    pub gated_pools: Vec<String>,
    pub gate: GateStats,
    pub training_active: bool,
    /// The MPS active-thread percentage new inference clients get.
    pub client_percentage: u32,
    pub mps: MpsReport,
    pub evictions: u64,
    pub recent: Vec<GpuDecisionRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuDecisionRecord {
    pub at_ns: u64,
    pub decision: GpuDecision,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub index: u32,
    pub name: String,
    pub utilization_pct: u32,
    pub memory_used_mib: u64,
    pub memory_total_mib: u64,
    pub training_mib: u64,
    pub inference_mib: u64,
    pub other_mib: u64,
    pub training_sm_pct: Option<f64>,
    /// The pinned-memory limit a new inference client gets on this device.
    pub new_client_limit_mib: u64,
    pub processes: Vec<ProcessReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessReport {
    pub pid: u32,
    pub owner: Option<Owner>,
    pub used_mib: Option<u64>,
    pub sm_pct: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum MpsReport {
    Off,
    /// Configured, but no control daemon could be used: why.
    Unavailable {
        reason: String,
    },
    Attached {
        /// Whether the enforcer started the control daemon.
        started: bool,
        /// Read back from the control daemon at the last reconcile.
        in_force: Option<LimitsInForce>,
        /// The last command that failed, if the latest reconcile had one.
        last_error: Option<String>,
    },
}

fn owner_text(owner: &Option<Owner>) -> String {
    match owner {
        Some(Owner::Training(name)) => format!("training {name}"),
        Some(Owner::Pool(name)) => format!("pool {name}"),
        None => "other".to_owned(),
    }
}

/// The report as `enforcer status` prints it.
pub fn render(report: &GpuReport) -> String {
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
        if active.training_active {
            "active"
        } else {
            "idle"
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
    for record in &active.recent {
        let _ = writeln!(
            out,
            "  {} {}",
            record.at_ns,
            serde_json::to_string(&record.decision).unwrap_or_default()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_and_off_say_why_in_one_line() {
        let text = render(&GpuReport::Disabled {
            reason: "libnvidia-ml.so cannot be loaded".to_owned(),
        });
        assert_eq!(text, "GPU: disabled: libnvidia-ml.so cannot be loaded\n");
        assert!(render(&GpuReport::Off).contains("enabled = \"off\""));
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
            client_percentage: 30,
            mps: MpsReport::Unavailable {
                reason: "no MPS control daemon answers".to_owned(),
            },
            evictions: 0,
            recent: vec![],
        }));
        let text = render(&report);
        for part in [
            "30% of each period",
            "pool serve",
            "training SM 71%",
            "MPS: unavailable",
        ] {
            assert!(text.contains(part), "{part} missing:\n{text}");
        }
        let json = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<GpuReport>(&json).unwrap(), report);
    }
}

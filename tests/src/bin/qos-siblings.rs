//! What training loses beside an offline pod, by how the pod is made idle-class, in a cgroup
//! tree laid out as the kubelet lays it out (under `reamer/qos-siblings`). Training
//! (`training-sim`) runs in a Burstable pod with a 1-CPU request; a spinning offline pod
//! (`cpu-hog`, one thread per CPU) runs beside it as:
//!
//! - a BestEffort pod (`be_*`): ranked against training at its QoS tier, `kubepods/besteffort`
//!   (2 shares), whatever its own group holds;
//! - a Burstable pod with the same request (`bu_*`): a sibling of training's pod, ranked
//!   against it by its own group.
//!
//! and, for each, with the offline pod:
//!
//! - `plain`: as the kubelet left it, its threads SCHED_OTHER;
//! - `pod_idle`: its group's `cpu.idle` 1 and its threads SCHED_IDLE (how reamer made offline
//!   pods idle-class until the kubelet's weight writes were found to fail on it);
//! - `least_weight`: its group at the least weight and its threads SCHED_IDLE (how reamer
//!   does it now; for a BestEffort pod that is the kubelet's own weight);
//! - `threads_idle`: its threads SCHED_IDLE only.
//!
//! Every round runs each arm once, in an order that rotates, training alone included, and each
//! arm's slowdown is paired with that round's training alone. Run as root; prints JSON.

use std::{
    ffi::CString,
    os::unix::process::CommandExt as _,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};
use clap::Parser;
use enforcer_common::stats::{median, quantile, sorted};
use reamer_tests::harness::{
    kubelet::{dir, hierarchies, kubelet_mkdir, remove_kubelet_tree},
    kubelet_writer::{Cpu, MIN_SHARES, write, write_weight},
};
use serde_json::{Value, json};

const ROOT: &str = "reamer/qos-siblings";
const ONE_CPU: Cpu = Cpu {
    request_milli: 1000,
    limit_milli: None,
};

#[derive(Parser)]
#[command(
    about = "Measures training's pace beside a spinning offline pod in a kubelet-shaped cgroup \
             tree, the pod made idle-class in each of four ways, as a BestEffort pod and as a \
             Burstable sibling of training's pod; prints JSON (run as root)"
)]
struct Args {
    /// Rounds; each runs every arm once, training alone included.
    #[arg(long, default_value_t = 6)]
    rounds: usize,
    /// Seconds of training per arm.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Items each training loader decodes per step (`training-sim --items`): 12 keeps both
    /// CPUs of a 2-CPU VM busy, so that training meets the offline pod on every CPU.
    #[arg(long, default_value_t = 12)]
    items: u32,
}

/// How the offline pod is made idle-class.
#[derive(Clone, Copy)]
enum Way {
    Plain,
    PodIdle,
    LeastWeight,
    ThreadsIdle,
}

#[derive(Clone, Copy)]
struct Arm {
    name: &'static str,
    /// The offline pod's QoS tier and request; None: training alone.
    offline: Option<(&'static str, Cpu)>,
    way: Way,
}

const ARMS: [Arm; 8] = [
    Arm {
        name: "alone",
        offline: None,
        way: Way::Plain,
    },
    Arm {
        name: "be_plain",
        offline: Some(("besteffort", Cpu::BEST_EFFORT)),
        way: Way::Plain,
    },
    Arm {
        name: "be_pod_idle",
        offline: Some(("besteffort", Cpu::BEST_EFFORT)),
        way: Way::PodIdle,
    },
    Arm {
        name: "be_least_weight",
        offline: Some(("besteffort", Cpu::BEST_EFFORT)),
        way: Way::LeastWeight,
    },
    Arm {
        name: "bu_plain",
        offline: Some(("burstable", ONE_CPU)),
        way: Way::Plain,
    },
    Arm {
        name: "bu_pod_idle",
        offline: Some(("burstable", ONE_CPU)),
        way: Way::PodIdle,
    },
    Arm {
        name: "bu_least_weight",
        offline: Some(("burstable", ONE_CPU)),
        way: Way::LeastWeight,
    },
    Arm {
        name: "bu_threads_idle",
        offline: Some(("burstable", ONE_CPU)),
        way: Way::ThreadsIdle,
    },
];

/// `program` (next to this binary) started inside group `relative` (its `cgroup.procs` in
/// every hierarchy that has one), SCHED_IDLE where `idle`: both set between fork and exec, so
/// that every thread it starts is born there.
fn spawn_in(program: &str, args: &[String], relative: &str, idle: bool) -> anyhow::Result<Child> {
    let here = std::env::current_exe()?;
    let binary = here.with_file_name(program);
    let procs: Vec<CString> = hierarchies()
        .iter()
        .map(|controller| dir(controller, relative).join("cgroup.procs"))
        .map(|file| CString::new(file.into_os_string().into_encoded_bytes()))
        .collect::<Result<_, _>>()?;
    let mut command = Command::new(&binary);
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: the closure calls only open, write, close and sched_setscheduler (async-signal-
    // safe), on paths made before the fork.
    unsafe {
        command.pre_exec(move || {
            for file in &procs {
                let fd = libc::open(file.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
            let param = libc::sched_param { sched_priority: 0 };
            if idle && libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

/// The kubelet's tree: the QoS tiers, training's pod and a BestEffort and a Burstable offline
/// pod, each with one container.
fn make_tree() -> anyhow::Result<()> {
    let tiers = Cpu {
        request_milli: 2 * ONE_CPU.request_milli,
        limit_milli: None,
    };
    kubelet_mkdir(&format!("{ROOT}/kubepods/burstable"));
    kubelet_mkdir(&format!("{ROOT}/kubepods/besteffort"));
    write_weight(&format!("{ROOT}/kubepods/burstable"), tiers.shares())
        .map_err(anyhow::Error::msg)?;
    write_weight(&format!("{ROOT}/kubepods/besteffort"), MIN_SHARES).map_err(anyhow::Error::msg)?;
    for (pod, cpu) in [
        ("burstable/podtraining", ONE_CPU),
        ("burstable/podoffline", ONE_CPU),
        ("besteffort/podoffline", Cpu::BEST_EFFORT),
    ] {
        let container = format!("{ROOT}/kubepods/{pod}/main");
        kubelet_mkdir(&container);
        for group in [format!("{ROOT}/kubepods/{pod}"), container] {
            write_weight(&group, cpu.shares()).map_err(anyhow::Error::msg)?;
        }
    }
    Ok(())
}

/// The offline pod's group set as `way` wants it (its weight the kubelet's first, so that
/// each arm starts from the kubelet's tree).
fn set_offline_group(pod: &str, cpu: Cpu, way: Way) -> anyhow::Result<()> {
    write("cpu", pod, "cpu.idle", "0").map_err(anyhow::Error::msg)?;
    write_weight(pod, cpu.shares()).map_err(anyhow::Error::msg)?;
    match way {
        Way::PodIdle => write("cpu", pod, "cpu.idle", "1").map_err(anyhow::Error::msg),
        Way::LeastWeight => write_weight(pod, MIN_SHARES).map_err(anyhow::Error::msg),
        Way::Plain | Way::ThreadsIdle => Ok(()),
    }
}

/// One arm: training's (steps/s, run-queue wait s).
fn run_arm(arm: Arm, args: &Args) -> anyhow::Result<(f64, f64)> {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let mut offline = None;
    if let Some((tier, cpu)) = arm.offline {
        let pod = format!("{ROOT}/kubepods/{tier}/podoffline");
        set_offline_group(&pod, cpu, arm.way)?;
        let idle = !matches!(arm.way, Way::Plain);
        let hog_args = [
            "--threads".to_owned(),
            cpus.to_string(),
            "--seconds".to_owned(),
            (args.seconds + 3.0).to_string(),
        ];
        offline = Some(spawn_in(
            "cpu-hog",
            &hog_args,
            &format!("{pod}/main"),
            idle,
        )?);
        std::thread::sleep(Duration::from_millis(300));
    }
    let training_args = [
        "--seconds".to_owned(),
        args.seconds.to_string(),
        "--items".to_owned(),
        args.items.to_string(),
        "--json".to_owned(),
    ];
    let training = spawn_in(
        "training-sim",
        &training_args,
        &format!("{ROOT}/kubepods/burstable/podtraining/main"),
        false,
    )?;
    let output = training.wait_with_output()?;
    if let Some(mut hog) = offline {
        let _ = hog.kill();
        let _ = hog.wait();
    }
    if !output.status.success() {
        bail!("training-sim failed: {}", output.status);
    }
    let report: Value = serde_json::from_slice(&output.stdout).context("training-sim's report")?;
    let field = |name: &str| {
        report[name]
            .as_f64()
            .with_context(|| format!("{name} in {report}"))
    };
    Ok((field("steps_per_s")?, field("runqueue_wait_s")?))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let remove_tree = || {
        for controller in hierarchies() {
            remove_kubelet_tree(&dir(controller, ROOT));
        }
    };
    remove_tree();
    make_tree()?;
    let mut measured: Vec<Vec<(f64, f64)>> = vec![Vec::new(); ARMS.len()];
    let result = (|| -> anyhow::Result<()> {
        for round in 0..args.rounds {
            for i in 0..ARMS.len() {
                let index = (i + round) % ARMS.len();
                measured[index].push(run_arm(ARMS[index], &args)?);
            }
            eprintln!("round {} of {} done", round + 1, args.rounds);
        }
        Ok(())
    })();
    remove_tree();
    result?;
    let alone: Vec<f64> = measured[0].iter().map(|(pace, _)| *pace).collect();
    let arms: Vec<Value> = ARMS
        .iter()
        .zip(&measured)
        .map(|(arm, runs)| {
            let pace: Vec<f64> = runs.iter().map(|(pace, _)| *pace).collect();
            let slowdown = sorted(pace.iter().zip(&alone).map(|(with, without)| 100.0 * (1.0 - with / without)));
            json!({
                "arm": arm.name,
                "steps_per_s_median": median(&pace),
                "slowdown_pct_median": quantile(&slowdown, 0.5),
                "slowdown_pct_min": slowdown.first(),
                "slowdown_pct_max": slowdown.last(),
                "runqueue_wait_s_median": median(&runs.iter().map(|(_, wait)| *wait).collect::<Vec<_>>()),
            })
        })
        .collect();
    println!(
        "{}",
        serde_json::to_string_pretty(
            &json!({"rounds": args.rounds, "seconds": args.seconds, "items": args.items, "arms": arms})
        )?
    );
    Ok(())
}

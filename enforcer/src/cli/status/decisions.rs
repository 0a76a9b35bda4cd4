//! `enforcer status`'s recent decisions in words: one line a decision, each with how long
//! ago it was made, what moved it and what it wrote; the flips of a duty cycle folded into one
//! line a run. The records themselves are in `--json` and in the decision log.
//!
//! Folded because a duty cycle flips twice a second: while training fills its reserved cores
//! but not their headroom, the offline pools are paused for part of each second, and the 32
//! decisions `status` keeps were, in the demo, 29 such flips and 3 weight changes, each a
//! JSON record of about 330 characters.

use std::collections::BTreeSet;

use enforcer_common::cpu_list;
use serde_json::Value;

use super::harvest_move;

/// The decisions (oldest first), as of `now_ns` (CLOCK_MONOTONIC, the records' clock), by a
/// daemon that writes them (`enforcing`) or only logs them, as lines without their indent.
pub(super) fn render(decisions: &[Value], now_ns: u64, enforcing: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let mut at = 0;
    while at < decisions.len() {
        let run = duty_run(&decisions[at..]);
        if run.len() > 1 {
            lines.push(folded(run, now_ns));
            at += run.len();
        } else {
            lines.push(one(&decisions[at], now_ns, enforcing));
            at += 1;
        }
    }
    lines
}

/// The duty cycle's flips at the start of `decisions`: decisions of the same duty trigger
/// that only paused or resumed offline, one after the other.
fn duty_run(decisions: &[Value]) -> &[Value] {
    let is_flip = |record: &Value, trigger: &str| {
        record["trigger"].as_str() == Some(trigger)
            && record["rewritten"].as_array().is_none_or(Vec::is_empty)
            && record["training_cores_before"] == record["training_cores_after"]
    };
    let Some(trigger) = decisions
        .first()
        .and_then(|first| first["trigger"].as_str())
        .filter(|&trigger| trigger == "offline_duty" || trigger == "training_cores_share")
        .filter(|&trigger| is_flip(&decisions[0], trigger))
    else {
        return &decisions[..0];
    };
    let len = decisions
        .iter()
        .take_while(|record| is_flip(record, trigger))
        .count();
    &decisions[..len]
}

/// A run of a duty cycle's flips (at least two) in one line.
fn folded(run: &[Value], now_ns: u64) -> String {
    let first = &run[0];
    let last = &run[run.len() - 1];
    let span = format!(
        "{} to {}",
        ago(first, now_ns).trim_end_matches(" s ago"),
        ago(last, now_ns)
    );
    match first["trigger"].as_str() {
        Some("offline_duty") => {
            let fractions: Vec<f64> = run
                .iter()
                .filter_map(|record| record["paused_fraction"].as_f64())
                .collect();
            format!(
                "{span}  offline duty cycle ×{}: paused {} of each second (training fills its \
                 reserved cores, not their headroom)",
                run.len(),
                percent_range(&fractions)
            )
        }
        _ => {
            let shares: Vec<f64> = run
                .iter()
                .filter_map(|record| record["share"].as_f64())
                .collect();
            format!(
                "{span}  training cores' share ×{}: offline on training's cores {} of each second",
                run.len(),
                percent_range(&shares)
            )
        }
    }
}

/// One decision in a line.
fn one(record: &Value, now_ns: u64, enforcing: bool) -> String {
    let when = ago(record, now_ns);
    if let Some(weight) = record.get("weight") {
        return format!("{when}  {}", weight_change(weight));
    }
    if let Some(change) = record.get("harvest") {
        return format!("{when}  pace controller: {}", harvest_move(change));
    }
    match record["trigger"].as_str() {
        Some(trigger) => match enforcing {
            true => format!("{when}  {}: {}", why(trigger, record), effects(record)),
            false => format!(
                "{when}  {}: not written (policy.enforce = false)",
                why(trigger, record)
            ),
        },
        // A record of a kind this build does not know: as it is.
        None => format!("{when}  {record}"),
    }
}

/// How long before `now_ns` the record was made: `12.3 s ago`.
fn ago(record: &Value, now_ns: u64) -> String {
    let at_ns = record["at_ns"]
        .as_u64()
        .or_else(|| record["weight"]["at_ns"].as_u64());
    match at_ns {
        Some(at_ns) => {
            let seconds = now_ns.saturating_sub(at_ns) as f64 / 1e9;
            match seconds < 100.0 {
                true => format!("{seconds:.1} s ago"),
                false => format!("{seconds:.0} s ago"),
            }
        }
        None => "(no time)".to_owned(),
    }
}

/// What moved an allocation decision, from its trigger.
fn why(trigger: &str, record: &Value) -> String {
    let number = |key: &str| record[key].as_f64().unwrap_or(f64::NAN);
    match trigger {
        "contended" => format!(
            "a training thread queued behind inference on CPU {}",
            record["cpu"]
        ),
        "demand_rose" => format!(
            "training's demand rose to {:.2} CPUs",
            number("estimate_cpus")
        ),
        "demand_fell" => format!(
            "training's demand fell to {:.2} CPUs",
            number("estimate_cpus")
        ),
        "offline_duty" => format!(
            "offline duty cycle (paused {:.0}% of each second)",
            number("paused_fraction") * 100.0
        ),
        "online_need" => format!(
            "online pool {} needs {} cores for its SLO",
            record["pool"].as_str().unwrap_or("?"),
            record["cores"]
        ),
        "training_cores_share" => format!(
            "training cores' share (offline on them {:.0}% of each second)",
            number("share") * 100.0
        ),
        "pace" => format!(
            "the pace controller set offline to {}",
            record["level"].as_str().unwrap_or("?")
        ),
        other => other.replace('_', " "),
    }
}

/// What an allocation decision wrote: training's reservation where it moved, the pools whose
/// CPUs were rewritten, those paused and resumed, and the reaction's time.
fn effects(record: &Value) -> String {
    let allocation = &record["allocation"];
    let mut parts = Vec::new();
    let (before, after) = (
        &record["training_cores_before"],
        &record["training_cores_after"],
    );
    if before != after {
        parts.push(format!(
            "training reserves {after} cores (was {before}), CPUs [{}]",
            cpus(&allocation["training"])
        ));
    }
    for pool in names(&record["rewritten"]) {
        parts.push(format!(
            "{pool} on CPUs [{}]",
            cpus(&allocation["pools"][pool])
        ));
    }
    for (key, verb) in [("paused", "paused"), ("resumed", "resumed")] {
        let pools = names(&record[key]);
        if !pools.is_empty() {
            parts.push(format!("{} {verb}", pools.join(", ")));
        }
    }
    if parts.is_empty() {
        // A pause the policy now wants, while the duty cycle already holds offline paused.
        parts.push(match allocation["offline_paused"].as_bool() {
            Some(true) => "offline already paused, nothing to write".to_owned(),
            _ => "nothing to write".to_owned(),
        });
    }
    if let Some(ns) = record["event_to_write_ns"].as_u64() {
        parts.push(format!(
            "written {:.0} µs after the kernel event",
            ns as f64 / 1e3
        ));
    }
    parts.join("; ")
}

/// An online pool's weight change: `online weight 50 → 25 (its p99 21.0 ms against a 50 ms
/// SLO)`.
fn weight_change(weight: &Value) -> String {
    let ms = |key: &str| weight[key].as_f64().unwrap_or(f64::NAN) / 1e3;
    format!(
        "{} weight {} → {} (its p99 {:.1} ms against a {:.0} ms SLO)",
        weight["pool"].as_str().unwrap_or("?"),
        weight["from"],
        weight["to"],
        ms("p99_us"),
        ms("slo_us")
    )
}

/// The strings of a JSON array (none where it is absent).
fn names(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A JSON array of CPU numbers as a CPU list: `0-3,8`.
fn cpus(value: &Value) -> String {
    let cpus: BTreeSet<u32> = value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|cpu| cpu.as_u64().and_then(|cpu| u32::try_from(cpu).ok()))
                .collect()
        })
        .unwrap_or_default();
    cpu_list::format(&cpus)
}

/// Fractions as a percentage, or the range of them: `69%`, `61–88%`.
fn percent_range(fractions: &[f64]) -> String {
    let low = fractions.iter().copied().fold(f64::INFINITY, f64::min) * 100.0;
    let high = fractions.iter().copied().fold(f64::NEG_INFINITY, f64::max) * 100.0;
    match (low.is_finite(), high.round() > low.round()) {
        (false, _) => "part".to_owned(),
        (true, true) => format!("{low:.0}–{high:.0}%"),
        (true, false) => format!("{low:.0}%"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const S: u64 = 1_000_000_000;

    fn flip(at_s: u64, paused: bool, fraction: f64) -> Value {
        let key = if paused { "paused" } else { "resumed" };
        json!({
            "allocation": {"offline_paused": paused, "pools": {"offline": [1], "online": [1]},
                           "training": [0]},
            "at_ns": at_s * S, "event_to_read_ns": null, "event_to_write_ns": null,
            key: ["offline"], "paused_fraction": fraction, "rewritten": [],
            "training_cores_after": 1, "training_cores_before": 1, "trigger": "offline_duty"
        })
    }

    #[test]
    fn a_duty_cycles_flips_fold_into_one_line_a_run_and_the_rest_read_as_words() {
        let decisions = vec![
            json!({
                "allocation": {"offline_paused": false,
                               "pools": {"offline": [2, 3], "online": [2, 3]},
                               "training": [0, 1]},
                "at_ns": 2 * S, "event_to_read_ns": 40_000, "event_to_write_ns": 146_000,
                "rewritten": ["offline", "online"], "training_cores_after": 2,
                "training_cores_before": 1, "trigger": "contended", "cpu": 1
            }),
            flip(10, true, 0.69),
            flip(11, false, 0.64),
            flip(12, true, 0.88),
            json!({"weight": {"at_ns": 13 * S, "from": 50, "p99_us": 20971, "pid": 7,
                              "pool": "online", "slo_us": 50000, "tail_over_slo": 0.42,
                              "to": 25}}),
            flip(14, false, 0.7),
            json!({"at_ns": 15 * S, "harvest": {"level": "held", "reason": "probe"}}),
            json!({"at_ns": 16 * S, "something": "new"}),
        ];
        let lines = render(&decisions, 20 * S, true);
        assert_eq!(
            lines,
            [
                "18.0 s ago  a training thread queued behind inference on CPU 1: training \
                 reserves 2 cores (was 1), CPUs [0-1]; offline on CPUs [2-3]; online on CPUs \
                 [2-3]; written 146 µs after the kernel event",
                "10.0 to 8.0 s ago  offline duty cycle ×3: paused 64–88% of each second \
                 (training fills its reserved cores, not their headroom)",
                "7.0 s ago  online weight 50 → 25 (its p99 21.0 ms against a 50 ms SLO)",
                "6.0 s ago  offline duty cycle (paused 70% of each second): offline resumed",
                "5.0 s ago  pace controller: probe, now held",
                "4.0 s ago  {\"at_ns\":16000000000,\"something\":\"new\"}",
            ]
        );
    }

    #[test]
    fn a_decision_that_wrote_nothing_says_so_and_old_ones_read_in_whole_seconds() {
        let record = json!({
            "allocation": {"offline_paused": false, "pools": {}, "training": [0]},
            "at_ns": 0, "rewritten": [], "training_cores_after": 1,
            "training_cores_before": 1, "trigger": "demand_fell", "estimate_cpus": 0.42
        });
        assert_eq!(
            render(std::slice::from_ref(&record), 250 * S, true),
            ["250 s ago  training's demand fell to 0.42 CPUs: nothing to write"]
        );
        // A pause the duty cycle had already made.
        let mut rose = record;
        rose["trigger"] = json!("demand_rose");
        rose["estimate_cpus"] = json!(1.0);
        rose["allocation"]["offline_paused"] = json!(true);
        let rose = [rose];
        let words = "5.0 s ago  training's demand rose to 1.00 CPUs";
        assert_eq!(
            render(&rose, 5 * S, true),
            [format!("{words}: offline already paused, nothing to write")]
        );
        // A daemon that does not enforce writes nothing, whatever its allocation says.
        assert_eq!(
            render(&rose, 5 * S, false),
            [format!("{words}: not written (policy.enforce = false)")]
        );
    }

    #[test]
    fn the_daemons_own_records_read_as_words() {
        // As the daemon serializes them: a field renamed there would read as "?" here.
        use crate::daemon::enforcement::DecisionRecord;
        use crate::policy::cores::{Allocation, Decision, Trigger};
        let record = |trigger: Trigger, rewritten: Vec<String>, paused: Vec<String>| {
            let allocation = Allocation {
                training: [0, 1].into(),
                pools: [("offline".to_owned(), [2, 3].into())].into(),
                offline_paused: !paused.is_empty(),
            };
            serde_json::to_value(DecisionRecord {
                at_ns: 5 * S,
                decision: Decision {
                    trigger,
                    training_cores_before: 1,
                    training_cores_after: 2,
                    allocation,
                },
                rewritten,
                paused,
                resumed: Vec::new(),
                event_to_write_ns: Some(120_000),
                event_to_read_ns: Some(30_000),
            })
            .unwrap()
        };
        let contended = record(
            Trigger::Contended { cpu: 1 },
            vec!["offline".into()],
            vec![],
        );
        let rose = record(
            Trigger::DemandRose { estimate_cpus: 1.4 },
            vec![],
            vec!["offline".into()],
        );
        assert_eq!(
            render(&[contended, rose], 6 * S, true),
            [
                "1.0 s ago  a training thread queued behind inference on CPU 1: training \
                 reserves 2 cores (was 1), CPUs [0-1]; offline on CPUs [2-3]; written 120 µs \
                 after the kernel event",
                "1.0 s ago  training's demand rose to 1.40 CPUs: training reserves 2 cores (was \
                 1), CPUs [0-1]; offline paused; written 120 µs after the kernel event",
            ]
        );
    }

    #[test]
    fn the_training_cores_share_folds_as_the_pause_does() {
        let share = |at_s: u64, share: f64| {
            let mut record = flip(at_s, false, 0.0);
            record["trigger"] = json!("training_cores_share");
            record["share"] = json!(share);
            record
        };
        assert_eq!(
            render(&[share(1, 0.25), share(2, 0.25)], 3 * S, true),
            [
                "2.0 to 1.0 s ago  training cores' share ×2: offline on training's cores 25% of \
              each second"
            ]
        );
    }
}

//! Rounds kept only while the host is quiet. On this kind of VM the hypervisor's steal comes
//! and goes within minutes (up to 65% of a window measured here), and a measurement that loses
//! a tenth of its CPU to another guest moves by as much, which no pairing undoes. So a round
//! is kept only if the host stole at most a bound during it; otherwise it is run again, up to
//! `ATTEMPTS_PER_ROUND` attempts per round asked for.

use anyhow::bail;

/// Attempts per round asked for, at most: a host that stays busy ends the run with fewer
/// rounds, said in the report, rather than keeping it going for ever.
pub(crate) const ATTEMPTS_PER_ROUND: usize = 3;

/// Where an attempt stands when it starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt {
    /// The round it is: the rounds kept so far (an attempt run again keeps its number).
    pub round: usize,
    /// Attempts made before it, kept or not: what rotates an order from one to the next.
    pub made: usize,
    /// Attempts set aside so far.
    pub set_aside: usize,
}

/// One attempt's result and the share of the CPU (%) the host stole during it (the worst of
/// its parts, where it has several).
pub(crate) struct Measured<R> {
    pub result: R,
    pub steal_pct: f64,
}

/// An attempt set aside for steal.
#[derive(Debug)]
pub(crate) struct SetAside<R> {
    /// The round it would have been.
    pub round: usize,
    pub steal_pct: f64,
    pub result: R,
}

/// The rounds kept, and those set aside.
#[derive(Debug)]
pub(crate) struct Rounds<R> {
    pub kept: Vec<R>,
    pub set_aside: Vec<SetAside<R>>,
}

/// Runs `measure` until `wanted` rounds are kept or the attempts run out; a round whose steal
/// was above `max_steal_pct` is set aside and run again. Fails, naming `what`, where not one
/// was kept.
pub(crate) fn quiet_rounds<R>(
    what: &str,
    wanted: usize,
    max_steal_pct: f64,
    mut measure: impl FnMut(Attempt) -> anyhow::Result<Measured<R>>,
) -> anyhow::Result<Rounds<R>> {
    let mut rounds = Rounds {
        kept: Vec::new(),
        set_aside: Vec::new(),
    };
    for made in 0..wanted * ATTEMPTS_PER_ROUND {
        if rounds.kept.len() == wanted {
            break;
        }
        let round = rounds.kept.len();
        let attempt = Attempt {
            round,
            made,
            set_aside: rounds.set_aside.len(),
        };
        let Measured { result, steal_pct } = measure(attempt)?;
        if steal_pct > max_steal_pct {
            rounds.set_aside.push(SetAside {
                round,
                steal_pct,
                result,
            });
        } else {
            rounds.kept.push(result);
        }
    }
    if rounds.kept.is_empty() && wanted > 0 {
        bail!(
            "{what}: the host stole more than {max_steal_pct}% of the CPU during every one of {} \
             rounds: the figures would measure the other guests. Run again when the host is \
             quieter, or allow more with --max-steal",
            rounds.set_aside.len()
        );
    }
    Ok(rounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rounds measured with the steals of `steals`, in turn.
    fn run(wanted: usize, steals: &[f64]) -> anyhow::Result<(Rounds<usize>, Vec<Attempt>)> {
        let mut attempts = Vec::new();
        let rounds = quiet_rounds("test", wanted, 3.0, |attempt| {
            attempts.push(attempt);
            Ok(Measured {
                result: attempt.made,
                steal_pct: steals[attempt.made],
            })
        })?;
        Ok((rounds, attempts))
    }

    #[test]
    fn a_round_over_the_bound_is_run_again_under_its_own_number() {
        let (rounds, attempts) = run(2, &[0.0, 9.0, 3.0]).unwrap();
        assert_eq!(rounds.kept, [0, 2]);
        assert_eq!(rounds.set_aside.len(), 1);
        assert_eq!(rounds.set_aside[0].round, 1);
        assert_eq!(rounds.set_aside[0].steal_pct, 9.0);
        let numbered: Vec<(usize, usize, usize)> = attempts
            .iter()
            .map(|a| (a.round, a.made, a.set_aside))
            .collect();
        assert_eq!(numbered, [(0, 0, 0), (1, 1, 0), (1, 2, 1)]);
    }

    #[test]
    fn a_busy_host_ends_the_run_with_fewer_rounds_or_an_error_naming_it() {
        let (rounds, attempts) = run(2, &[0.0, 9.0, 9.0, 9.0, 9.0, 9.0]).unwrap();
        assert_eq!(rounds.kept, [0]);
        assert_eq!(attempts.len(), 2 * ATTEMPTS_PER_ROUND);
        let err = run(1, &[9.0; 3]).unwrap_err().to_string();
        assert!(
            err.starts_with("test: the host stole more than 3%"),
            "{err}"
        );
        assert!(err.contains("every one of 3 rounds"), "{err}");
    }
}

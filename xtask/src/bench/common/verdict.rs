//! The words every benchmark's targets table gives a figure against its target: "met",
//! "**missed**" (bold, so that a miss stands out in the table), or why it is neither.

/// A figure that is either within its target or not.
pub(crate) fn met(met: bool) -> &'static str {
    match met {
        true => "met",
        false => "**missed**",
    }
}

/// The same, for a figure a run may not have measured.
pub(crate) fn met_where_measured(met: Option<bool>) -> &'static str {
    met.map_or("not measured", self::met)
}

/// A figure whose 95% interval `[low, high]` must lie at or below `bound` (a percentage): met
/// only where the whole interval does, missed where all of it is past, unresolved where it
/// spans the bound.
pub(crate) fn interval_at_most(low: f64, high: f64, bound: f64) -> String {
    if high <= bound {
        met(true).to_owned()
    } else if low > bound {
        met(false).to_owned()
    } else {
        spans(bound)
    }
}

/// The same for a figure whose interval must lie at or above `bound`.
pub(crate) fn interval_at_least(low: f64, high: f64, bound: f64) -> String {
    if low >= bound {
        met(true).to_owned()
    } else if high < bound {
        met(false).to_owned()
    } else {
        spans(bound)
    }
}

fn spans(bound: f64) -> String {
    format!("**not resolved**: the interval spans {bound:.0}%")
}

/// One row of a targets table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Target {
    pub target: String,
    pub result: String,
    pub met: bool,
}

/// The table of `targets`, a row each: the target, the figure, and `met`'s word.
pub(crate) fn table(targets: &[Target]) -> String {
    let mut text = "| target | result | |\n|---|---|---|\n".to_owned();
    for t in targets {
        text.push_str(&format!(
            "| {} | {} | {} |\n",
            t.target,
            t.result,
            met(t.met)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_met_whole_missed_whole_or_not_resolved() {
        assert_eq!(interval_at_most(-0.3, 0.9, 1.0), "met");
        assert_eq!(interval_at_most(-0.3, 1.0, 1.0), "met");
        assert_eq!(interval_at_most(1.1, 2.0, 1.0), "**missed**");
        assert_eq!(
            interval_at_most(0.2, 1.2, 1.0),
            "**not resolved**: the interval spans 1%"
        );
        assert_eq!(interval_at_least(100.0, 112.0, 100.0), "met");
        assert_eq!(interval_at_least(85.0, 99.0, 100.0), "**missed**");
        assert_eq!(
            interval_at_least(85.0, 132.0, 100.0),
            "**not resolved**: the interval spans 100%"
        );
        assert_eq!(met_where_measured(None), "not measured");
        assert_eq!(met_where_measured(Some(false)), "**missed**");
    }
}

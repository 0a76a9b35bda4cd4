//! The `[control]` section: how much of the daemon the control socket's clients may hold.
//!
//! ```toml
//! [control]
//! idle_timeout_ms = 60000        # a connection that sends no request this long is closed
//! max_connections_per_user = 64  # open connections of one user other than root
//! max_connections = 512          # open connections of all users other than root together,
//!                                # and, as a budget of its own, of root's
//! ```
//!
//! The socket is open to every local user: workers of any user subscribe to their pool's
//! grants, and anyone may read a snapshot. Every request that changes something is checked
//! against the peer's credentials; these caps keep what merely connects from holding the
//! daemon's file descriptors. Root's budget is separate, so other users cannot lock out
//! `enforcer launch` or `status`. A user's processes in user namespaces of its own count as
//! that user (`host::user_namespace`). A grant subscription is not idle while it is open (a worker
//! speaks only when its need changes): it is bounded by the caps and by pool membership.

use std::time::Duration;

use serde::Deserialize;

use super::InvalidField;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControlSection {
    pub idle_timeout_ms: u64,
    pub max_connections_per_user: usize,
    pub max_connections: usize,
}

impl Default for ControlSection {
    fn default() -> Self {
        Self {
            // `observe --interval 60` still asks within it; launchers ask every 0.5 s.
            idle_timeout_ms: 60_000,
            // More than a node's workers of one user hold (one subscription each).
            max_connections_per_user: 64,
            max_connections: 512,
        }
    }
}

/// What the control socket's server takes from `[control]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlSettings {
    pub idle_timeout: Duration,
    pub max_connections_per_user: usize,
    pub max_connections: usize,
}

impl ControlSection {
    /// Checks values serde cannot.
    pub fn validate(&self) -> Result<(), InvalidField> {
        for (field, value) in [
            ("idle_timeout_ms", self.idle_timeout_ms as usize),
            ("max_connections_per_user", self.max_connections_per_user),
            ("max_connections", self.max_connections),
        ] {
            if value == 0 {
                let message = "must be at least 1".to_owned();
                return Err(InvalidField { field, message });
            }
        }
        if self.max_connections_per_user > self.max_connections {
            return Err(InvalidField {
                field: "max_connections_per_user",
                message: format!(
                    "{} is more than max_connections ({}), the budget of every user but root \
                     together",
                    self.max_connections_per_user, self.max_connections
                ),
            });
        }
        Ok(())
    }

    pub fn settings(&self) -> ControlSettings {
        ControlSettings {
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            max_connections_per_user: self.max_connections_per_user,
            max_connections: self.max_connections,
        }
    }
}

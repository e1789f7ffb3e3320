//! The `[audit]` table: how the audit log of capability calls is buffered, and how long events
//! are kept (see `crate::audit`).

use serde::Deserialize;

use super::{ConfigError, invalid};

/// How capability calls reach the audit log: queued in memory, written in batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSettings {
    /// Most capability-call events waiting to be written; a call that finds the buffer full is
    /// not recorded, and counted in `parley_audit_dropped_total`. Each takes a few hundred bytes.
    pub buffer_events: usize,
    /// How often the waiting events are written, in one transaction; a crash loses at most
    /// this long's calls (decisions are written before they are answered, and never wait here).
    pub flush_interval_ms: u64,
    /// Days an event is kept; older ones are deleted by an hourly sweep. 0 keeps every event.
    pub retention_days: u32,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            buffer_events: 10_000,
            flush_interval_ms: 1_000,
            retention_days: 365,
        }
    }
}

impl AuditSettings {
    /// Most events the buffer may hold: about 500 MB of memory.
    const MOST_EVENTS: usize = 1_000_000;
    /// Longest time between writes: an hour.
    const LONGEST_INTERVAL_MS: u64 = 3_600_000;

    /// Longest retention: a hundred years.
    const LONGEST_RETENTION_DAYS: u32 = 36_500;

    /// How long an event is kept; `None`: for ever.
    pub fn retention(&self) -> Option<std::time::Duration> {
        (self.retention_days > 0)
            .then(|| std::time::Duration::from_secs(u64::from(self.retention_days) * 86_400))
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.retention_days > Self::LONGEST_RETENTION_DAYS {
            return Err(invalid(
                "audit.retention_days",
                format!(
                    "must be at most {} (0 keeps every event)",
                    Self::LONGEST_RETENTION_DAYS
                ),
            ));
        }
        if !(1..=Self::MOST_EVENTS).contains(&self.buffer_events) {
            return Err(invalid(
                "audit.buffer_events",
                format!("must be 1 to {}", Self::MOST_EVENTS),
            ));
        }
        if !(10..=Self::LONGEST_INTERVAL_MS).contains(&self.flush_interval_ms) {
            return Err(invalid(
                "audit.flush_interval_ms",
                format!("must be 10 to {}", Self::LONGEST_INTERVAL_MS),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_and_its_interval_are_bounded() {
        AuditSettings::default().validate().expect("the defaults");
        let forever = AuditSettings {
            retention_days: 0,
            ..AuditSettings::default()
        };
        assert_eq!(forever.retention(), None);
        assert_eq!(
            AuditSettings::default().retention(),
            Some(std::time::Duration::from_secs(365 * 86_400))
        );
        for (settings, setting) in [
            (
                AuditSettings {
                    buffer_events: 0,
                    ..AuditSettings::default()
                },
                "audit.buffer_events",
            ),
            (
                AuditSettings {
                    flush_interval_ms: 0,
                    ..AuditSettings::default()
                },
                "audit.flush_interval_ms",
            ),
            (
                AuditSettings {
                    flush_interval_ms: u64::MAX,
                    ..AuditSettings::default()
                },
                "audit.flush_interval_ms",
            ),
            (
                AuditSettings {
                    retention_days: u32::MAX,
                    ..AuditSettings::default()
                },
                "audit.retention_days",
            ),
        ] {
            let err = settings.validate().expect_err(setting);
            assert!(err.to_string().contains(setting), "{err}");
        }
    }
}

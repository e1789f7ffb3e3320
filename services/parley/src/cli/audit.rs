//! `parley audit`: the audit log, newest first, through filters (see `crate::audit` for what is
//! recorded). Reads the store `serve` writes, with the same database settings.

use std::process::ExitCode;

use chrono::{DateTime, Utc};
use parley_store::{AuditEvent, AuditFilter};

use super::{AuditArgs, CliError};

/// `parley audit`: one line per event, or a JSON array with `--json`.
pub(super) async fn audit(args: AuditArgs) -> Result<ExitCode, CliError> {
    let store = args.store.open_existing().await?;
    let filter = AuditFilter {
        peer: args.peer,
        address: args.address,
        action: args.action,
        outcome: args.outcome,
        since: args.since,
        until: args.until,
        limit: args.limit,
    };
    let events = store.list_audit(filter).await?;
    if args.json {
        let text = serde_json::to_string_pretty(&events).expect("audit events serialize");
        out!("{text}");
    } else if events.is_empty() {
        out!("no audit events match");
    } else {
        for event in &events {
            out!("{}", line(event));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `2026-11-27 18:30:02.123  10.0.0.2  capability.call  getProductInfo  ok  {"duration_us":31}`:
/// the time (UTC), who (`peer@address`, either alone, or `-`), what, on what, how it went, and
/// the detail.
fn line(event: &AuditEvent) -> String {
    let who = match (&event.peer, &event.address) {
        (Some(peer), Some(address)) => format!("{peer}@{address}"),
        (Some(who), None) | (None, Some(who)) => who.clone(),
        (None, None) => "-".to_owned(),
    };
    let detail = event
        .detail
        .as_ref()
        .map(|d| format!("  {d}"))
        .unwrap_or_default();
    format!(
        "{}  {who}  {}  {}  {}{detail}",
        event.at.format("%Y-%m-%d %H:%M:%S%.3f"),
        event.action,
        event.subject,
        event.outcome
    )
}

/// A point in time as `--since` and `--until` take it: RFC 3339 (`2026-11-27T18:00:00Z`), or
/// a time ago: a whole number and a unit, `s`, `m`, `h`, `d` or `w` (`10m`, `2h`, `1d`).
pub(super) fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let usage =
        || format!("{text:?} is neither an RFC 3339 time nor a time ago like 10m, 2h or 1d");
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .filter(|&i| i > 0)
        .ok_or_else(usage)?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().map_err(|_| usage())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(usage()),
    };
    number
        .checked_mul(seconds)
        .and_then(chrono::TimeDelta::try_seconds)
        .and_then(|ago| Utc::now().checked_sub_signed(ago))
        .ok_or_else(|| format!("{text:?} is too long ago"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc_3339_or_a_time_ago() {
        let at = parse_time("2026-11-27T18:00:00+01:00").expect("RFC 3339");
        assert_eq!(at.to_rfc3339(), "2026-11-27T17:00:00+00:00");
        let now = Utc::now();
        for (text, seconds) in [("30s", 30), ("10m", 600), ("2h", 7_200), ("1d", 86_400)] {
            let ago = now - parse_time(text).expect(text);
            let off = (ago.num_seconds() - seconds).abs();
            assert!(off <= 2, "{text}: {ago}");
        }
        for bad in [
            "",
            "m",
            "10",
            "10y",
            "-5m",
            "1.5h",
            "yesterday",
            "99999999999999999w",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}

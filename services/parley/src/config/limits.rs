//! The `[limits]` table: what protects the server from its peers.

use serde::Deserialize;

use super::{ConfigError, invalid};

/// Limits that protect the server. Every one is enforced where it says.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest NLIP message accepted over HTTP or WebSocket, in bytes (413 / NLIP error).
    pub max_message_bytes: usize,
    /// Largest out-of-band upload, in bytes.
    pub max_upload_bytes: usize,
    /// Most bytes all stored uploads may take together; an upload that would go beyond is
    /// refused (507, `upload_quota_exceeded`). Uploads received at the same moment are checked
    /// against the same total, so the quota may be passed by at most
    /// `max_concurrent_uploads` uploads.
    pub max_upload_storage_bytes: u64,
    /// Most uploads received at once; one more is answered 429 `too_many_uploads`. An upload is
    /// held in memory while it arrives.
    pub max_concurrent_uploads: usize,
    /// Most uploads one client address may send at once (429 `too_many_uploads` beyond).
    pub max_concurrent_uploads_per_address: usize,
    /// Longest an upload's body may take to arrive (else 408, `request_timeout`).
    pub upload_timeout_ms: u64,
    /// Most messages a conversation's log keeps; the oldest are deleted as new ones come.
    pub max_conversation_messages: u32,
    /// Longest time one request may take before it is answered with a timeout error; an HTTP
    /// request's body must also arrive within it (else 408, `request_timeout`).
    pub request_timeout_ms: u64,
    /// Interval between pings on WebSocket sessions and HTTP/2 connections; a WebSocket silent
    /// for three intervals, or an HTTP/2 peer that leaves a ping unanswered for two, is closed.
    pub ws_ping_interval_ms: u64,
    /// How many earlier messages of a conversation the reasoner sees.
    pub history_messages: u32,
    /// How long a conversation may stay idle (no message, no state written) before a
    /// background sweep deletes it with its log, model usage and negotiations; the protocols
    /// agreed in it, their handlers and the agreements stay. 0: conversations never expire.
    /// At least `request_timeout_ms` otherwise, so a conversation is not idle while a request
    /// in it is still being answered.
    pub conversation_idle_timeout_ms: u64,
    /// How often the sweep looks for idle conversations (when they expire at all).
    pub conversation_sweep_interval_ms: u64,
    /// NLIP messages (over HTTP or WebSocket) and uploads per second allowed per client
    /// address (an IPv4 address, or an IPv6 /64); more are answered 429 `rate_limited` with a
    /// `Retry-After`. 0 turns rate limiting off.
    pub rate_limit_per_second: u32,
    /// Burst size on top of the steady rate.
    pub rate_limit_burst: u32,
    /// Most concurrent requests the server works on; more wait in line.
    pub max_concurrent_requests: usize,
    /// Most requests (NLIP messages over HTTP, uploads) one client address may have in flight
    /// at once; one more is answered 429 `too_many_in_flight` at once, so one address cannot
    /// hold every permit of `max_concurrent_requests`.
    pub max_concurrent_requests_per_address: usize,
    /// Most open client connections on each listener (NLIP and uploads), WebSocket sessions
    /// included; at the limit a listener stops accepting until one closes (new peers wait in
    /// the kernel's backlog).
    pub max_connections: usize,
    /// Most open connections one client address may have, both listeners together; a
    /// connection beyond it is closed as soon as it is accepted, so one address cannot fill
    /// `max_connections`.
    pub max_connections_per_address: usize,
    /// Longest a reply may take to be written to a peer: a WebSocket peer that does not read
    /// its answers (or pings) within it is disconnected, and a connection being closed whose
    /// peer does not read the last answer is dropped after it.
    pub send_timeout_ms: u64,
    /// How long a client may take to send a request's head over HTTP/1, counted from the
    /// connection's start, or on a kept-alive connection from the previous answer; a
    /// connection that takes longer is closed, so silent, idle or trickling peers cannot hold
    /// connections open. An HTTP/2 connection with no request in flight for one to two
    /// times this long is closed gracefully (GOAWAY) too.
    pub header_read_timeout_ms: u64,
    /// How long, at shutdown, the last protocol usage counts and audit events are retried while
    /// the database is unreachable, busy or locked (0: one try); what is still unwritten then is
    /// lost, with a warning.
    pub shutdown_flush_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: 1 << 20,
            max_upload_bytes: 64 << 20,
            max_upload_storage_bytes: 1 << 30,
            max_concurrent_uploads: 8,
            max_concurrent_uploads_per_address: 2,
            upload_timeout_ms: 300_000,
            max_conversation_messages: 1_000,
            request_timeout_ms: 30_000,
            ws_ping_interval_ms: 20_000,
            history_messages: 20,
            conversation_idle_timeout_ms: 24 * 60 * 60 * 1000,
            conversation_sweep_interval_ms: 60_000,
            rate_limit_per_second: 100,
            rate_limit_burst: 200,
            max_concurrent_requests: 1024,
            max_concurrent_requests_per_address: 32,
            max_connections: 10_000,
            max_connections_per_address: 128,
            send_timeout_ms: 10_000,
            header_read_timeout_ms: 30_000,
            shutdown_flush_ms: 5_000,
        }
    }
}

impl Limits {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let l = self;
        if l.max_message_bytes < 64 {
            return Err(invalid("limits.max_message_bytes", "must be at least 64"));
        }
        if l.max_upload_bytes == 0 {
            return Err(invalid("limits.max_upload_bytes", "must be positive"));
        }
        if l.max_upload_storage_bytes < l.max_upload_bytes as u64 {
            return Err(invalid(
                "limits.max_upload_storage_bytes",
                "must be at least limits.max_upload_bytes",
            ));
        }
        let positive = [
            ("limits.max_concurrent_uploads", l.max_concurrent_uploads),
            (
                "limits.max_concurrent_uploads_per_address",
                l.max_concurrent_uploads_per_address,
            ),
            (
                "limits.upload_timeout_ms",
                usize::from(l.upload_timeout_ms > 0),
            ),
        ];
        for (setting, value) in positive {
            if value == 0 {
                return Err(invalid(setting, "must be positive"));
            }
        }
        if l.max_conversation_messages < l.history_messages.max(1) {
            return Err(invalid(
                "limits.max_conversation_messages",
                "must be at least limits.history_messages (and at least 1)",
            ));
        }
        if l.request_timeout_ms == 0 {
            return Err(invalid("limits.request_timeout_ms", "must be positive"));
        }
        l.validate_expiry()?;
        if l.ws_ping_interval_ms < 100 {
            return Err(invalid(
                "limits.ws_ping_interval_ms",
                "must be at least 100",
            ));
        }
        if l.max_concurrent_requests == 0 {
            return Err(invalid(
                "limits.max_concurrent_requests",
                "must be positive",
            ));
        }
        if l.max_connections == 0 {
            return Err(invalid("limits.max_connections", "must be positive"));
        }
        if l.max_connections_per_address == 0 {
            return Err(invalid(
                "limits.max_connections_per_address",
                "must be positive",
            ));
        }
        if l.max_concurrent_requests_per_address == 0 {
            return Err(invalid(
                "limits.max_concurrent_requests_per_address",
                "must be positive",
            ));
        }
        if l.send_timeout_ms == 0 {
            return Err(invalid("limits.send_timeout_ms", "must be positive"));
        }
        if l.header_read_timeout_ms == 0 {
            return Err(invalid("limits.header_read_timeout_ms", "must be positive"));
        }
        if l.rate_limit_per_second > 0 && l.rate_limit_burst == 0 {
            return Err(invalid(
                "limits.rate_limit_burst",
                "must be positive when rate limiting is on",
            ));
        }
        Ok(())
    }

    fn validate_expiry(&self) -> Result<(), ConfigError> {
        /// Ten years: far beyond any useful idle time, and far inside what a timestamp holds.
        const LONGEST_MS: u64 = 10 * 366 * 24 * 60 * 60 * 1000;
        let idle = self.conversation_idle_timeout_ms;
        if idle > LONGEST_MS {
            return Err(invalid(
                "limits.conversation_idle_timeout_ms",
                format!("must be at most {LONGEST_MS} (ten years); 0 turns expiry off"),
            ));
        }
        if idle > 0 && idle < self.request_timeout_ms {
            return Err(invalid(
                "limits.conversation_idle_timeout_ms",
                "must be at least limits.request_timeout_ms (or 0: conversations never expire)",
            ));
        }
        if self.conversation_sweep_interval_ms == 0 {
            return Err(invalid(
                "limits.conversation_sweep_interval_ms",
                "must be positive",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One address cannot take what the server has for everyone on the defaults: its
    /// connections, requests in flight and uploads are a share of the server's, and its rate is
    /// limited.
    #[test]
    fn the_defaults_leave_room_for_other_addresses() {
        let l = Limits::default();
        assert!(l.max_connections_per_address * 10 <= l.max_connections);
        assert!(l.max_concurrent_requests_per_address * 10 <= l.max_concurrent_requests);
        assert!(l.max_concurrent_uploads_per_address * 2 <= l.max_concurrent_uploads);
        assert!(l.rate_limit_per_second > 0 && l.rate_limit_burst > 0);
        assert!(l.send_timeout_ms <= l.request_timeout_ms);
        l.validate().expect("the defaults are valid");
    }

    #[test]
    fn per_address_limits_must_be_positive() {
        for (limits, setting) in [
            (
                Limits {
                    max_connections_per_address: 0,
                    ..Limits::default()
                },
                "limits.max_connections_per_address",
            ),
            (
                Limits {
                    max_concurrent_requests_per_address: 0,
                    ..Limits::default()
                },
                "limits.max_concurrent_requests_per_address",
            ),
            (
                Limits {
                    send_timeout_ms: 0,
                    ..Limits::default()
                },
                "limits.send_timeout_ms",
            ),
        ] {
            let err = limits.validate().expect_err(setting);
            assert!(err.to_string().contains(setting), "{err}");
        }
    }

    #[test]
    fn conversations_expire_no_sooner_than_a_request_may_take() {
        let expiring = |idle, sweep| Limits {
            request_timeout_ms: 30_000,
            conversation_idle_timeout_ms: idle,
            conversation_sweep_interval_ms: sweep,
            ..Limits::default()
        };
        expiring(0, 60_000).validate().expect("0: never expire");
        expiring(30_000, 1)
            .validate()
            .expect("as long as a request");
        for (limits, setting) in [
            (
                expiring(29_999, 60_000),
                "limits.conversation_idle_timeout_ms",
            ),
            (
                expiring(u64::MAX, 60_000),
                "limits.conversation_idle_timeout_ms",
            ),
            (expiring(60_000, 0), "limits.conversation_sweep_interval_ms"),
        ] {
            let err = limits.validate().expect_err(setting);
            assert!(err.to_string().contains(setting), "{err}");
        }
    }
}

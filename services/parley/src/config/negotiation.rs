//! The `[negotiation]` table: how the provider negotiates, and how much work one proposal may
//! ask of it.

use serde::{Deserialize, Serialize};

use super::{ConfigError, ProtocolBackend, invalid};

/// Most questions a negotiation may allow: each one is a model call and a round trip to the peer.
const MAX_QUESTIONS: u32 = 20;

/// Settings of the provider's negotiation (the `[negotiation]` table).
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NegotiationLimits {
    /// Which protocol reasoner to use.
    pub backend: ProtocolBackend,
    /// Proposals per negotiation (both sides counted) before it ends as rejected.
    pub max_rounds: u32,
    /// How often a handler that fails verification is regenerated before giving up.
    pub fix_attempts: u32,
    /// Questions the protocol reasoner may ask the requester (`naturalLanguageNegotiation`) in
    /// one negotiation before it must decide; each is also a round of `max_rounds`. 0: never.
    pub max_questions: u32,
    /// Serve a handler's compiled form (the built-in reasoner's mapping, run without a
    /// JavaScript engine) once it answered every test case as the JavaScript did. Off: the
    /// JavaScript always serves.
    pub compiled_handlers: bool,
    /// Longest protocol text a peer may propose, in bytes; a longer one is rejected
    /// (`protocol_too_complex`) before it is read.
    pub max_protocol_bytes: usize,
    /// Most JSON values in a proposal's request and response schemas together.
    pub max_schema_nodes: usize,
    /// Most regular expressions (`pattern`, `patternProperties` keys) in a proposal's schemas.
    pub max_schema_patterns: usize,
    /// Most test cases a proposal, or a `testCasesNegotiation`, may carry.
    pub max_test_cases: usize,
    /// How many of the protocol hashes a `sourceHello` offers are looked up (the first ones);
    /// the rest are ignored, so a hello costs at most this many lookups.
    pub max_hello_hashes: usize,
    /// Seconds an agreement reached over ANP 1.2's `anp.negotiate` is announced valid for (its
    /// `validUntil`); a caller re-confirms after it with a structured selection.
    pub agreement_valid_for_s: u64,
}

impl Default for NegotiationLimits {
    fn default() -> Self {
        let doc = parley_anp::DocLimits::default();
        NegotiationLimits {
            backend: ProtocolBackend::Auto,
            max_rounds: 10,
            fix_attempts: 2,
            max_questions: 3,
            compiled_handlers: true,
            max_protocol_bytes: doc.max_bytes,
            max_schema_nodes: doc.max_schema_nodes,
            max_schema_patterns: doc.max_schema_patterns,
            max_test_cases: doc.max_test_cases,
            max_hello_hashes: 64,
            agreement_valid_for_s: 3_600,
        }
    }
}

impl NegotiationLimits {
    /// The bounds a proposal from a peer is read within.
    pub fn doc_limits(&self) -> parley_anp::DocLimits {
        parley_anp::DocLimits {
            max_bytes: self.max_protocol_bytes,
            max_schema_nodes: self.max_schema_nodes,
            max_schema_patterns: self.max_schema_patterns,
            max_test_cases: self.max_test_cases,
        }
    }

    /// How long an `anp.negotiate` agreement is announced valid for.
    pub fn agreement_valid_for(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.agreement_valid_for_s)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_rounds == 0 {
            return Err(invalid("negotiation.max_rounds", "must be at least 1"));
        }
        if self.max_questions > MAX_QUESTIONS {
            return Err(invalid(
                "negotiation.max_questions",
                format!("must be 0 to {MAX_QUESTIONS}"),
            ));
        }
        // Beyond a year, `validUntil` promises more than an agent can keep.
        if !(1..=31_536_000).contains(&self.agreement_valid_for_s) {
            return Err(invalid(
                "negotiation.agreement_valid_for_s",
                "must be 1 to 31536000 (a year)",
            ));
        }
        // A protocol needs a few hundred bytes and two schemas of a few values each.
        let at_least = [
            (
                "negotiation.max_protocol_bytes",
                self.max_protocol_bytes,
                256,
            ),
            ("negotiation.max_schema_nodes", self.max_schema_nodes, 2),
            ("negotiation.max_test_cases", self.max_test_cases, 1),
        ];
        for (setting, value, least) in at_least {
            if value < least {
                return Err(invalid(setting, format!("must be at least {least}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposal_bounds_are_validated_by_name() {
        for (limits, setting) in [
            (
                NegotiationLimits {
                    max_protocol_bytes: 10,
                    ..Default::default()
                },
                "negotiation.max_protocol_bytes",
            ),
            (
                NegotiationLimits {
                    max_schema_nodes: 0,
                    ..Default::default()
                },
                "negotiation.max_schema_nodes",
            ),
            (
                NegotiationLimits {
                    max_test_cases: 0,
                    ..Default::default()
                },
                "negotiation.max_test_cases",
            ),
            (
                NegotiationLimits {
                    max_questions: 21,
                    ..Default::default()
                },
                "negotiation.max_questions",
            ),
        ] {
            let err = limits.validate().expect_err(setting);
            assert!(err.to_string().contains(setting), "{err}");
        }
        NegotiationLimits::default()
            .validate()
            .expect("the defaults are valid");
    }
}

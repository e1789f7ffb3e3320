//! The requester's judgement of test cases the provider proposes (`testCasesNegotiation`), as a
//! provider does for a protocol without test cases of its own.

use parley_anp::{ProtocolDoc, Verdict};

/// The requester's verdict on the provider's proposed cases (`proposal`) for the agreed protocol
/// text `agreed`: accepted when every case's request is valid against the protocol's request
/// schema and its expected response against its response schema
/// ([`parley_anp::review_test_cases`]); rejected otherwise, with the reasons naming the cases.
/// The proposal is read within the default [`DocLimits`](parley_anp::DocLimits), as the
/// provider reads ours.
pub(super) fn judge_cases(agreed: Option<&str>, proposal: &str) -> Verdict {
    let Some(doc) = agreed.and_then(|text| ProtocolDoc::parse(text).ok()) else {
        return Verdict::Reject {
            reason: "no protocol is agreed to check the test cases against".into(),
        };
    };
    match parley_anp::review_test_cases(&doc, proposal, &parley_anp::DocLimits::default()) {
        Ok(_) => Verdict::Accept,
        Err(reason) => Verdict::Reject { reason },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use serde_json::{Value, json};

    use super::*;
    use crate::negotiation::requester::Outcome;
    use crate::negotiation::requester::channel::tests::{Scripted, caps, requester, text};

    /// The product protocol without its test cases.
    fn bare() -> String {
        let text = text();
        let cut = text.find("# Test Cases").expect("a test cases section");
        text[..cut].to_owned()
    }

    fn proposal(cases: Value) -> Value {
        json!({"action": "testCasesNegotiation", "status": "negotiating",
               "testCases": format!("```json\n{cases}\n```\n")})
    }

    fn found(product: Value) -> Value {
        json!({"name": "found",
               "request": {"messageId": "m1", "type": "REQUEST", "action": "getProductInfo",
                           "productId": product},
               "expectedResponse": {"messageId": "m1", "type": "RESPONSE",
                                    "status": {"code": 200}}})
    }

    #[test]
    fn cases_within_the_schemas_are_accepted_and_others_refused_by_name() {
        let text = bare();
        let good = format!("```json\n{}\n```\n", json!([found(json!("P12345"))]));
        assert_eq!(judge_cases(Some(&text), &good), Verdict::Accept);
        let bad = format!("```json\n{}\n```\n", json!([found(json!(12345))]));
        match judge_cases(Some(&text), &bad) {
            Verdict::Reject { reason } => {
                assert!(reason.contains("`found`"), "{reason}");
                assert!(reason.contains("request schema"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(judge_cases(None, &good), Verdict::Reject { .. }));
    }

    /// The provider's turn as a Parley provider answers a protocol without test cases: its
    /// acceptance, the cases it proposes, its `codeGeneration`.
    fn provider_turn(text: &str, cases: Value) -> Vec<Value> {
        vec![
            json!({"action": "protocolNegotiation", "sequenceId": 1,
                   "candidateProtocols": text, "status": "accepted"}),
            proposal(cases),
            json!({"action": "codeGeneration", "status": "generated"}),
        ]
    }

    fn hello() -> Value {
        json!({"version": "1.0", "type": "destinationHello",
               "metaProtocol": {"version": "1.0", "supportedCapabilities": caps()}})
    }

    /// The requester's answers to the proposed cases, as the transcript records them.
    fn answers(transcript: &[(parley_store::Direction, Value)]) -> Vec<Value> {
        transcript
            .iter()
            .filter(|(d, v)| {
                *d == parley_store::Direction::Outbound && v["action"] == "testCasesNegotiation"
            })
            .map(|(_, v)| v.clone())
            .collect()
    }

    #[tokio::test]
    async fn the_providers_cases_are_agreed_when_they_follow_the_protocol() {
        let (requester, _dir) = requester().await;
        let text = bare();
        let turn = provider_turn(&text, json!([found(json!("P12345"))]));
        let mut channel = Scripted(VecDeque::from([vec![hello()], turn, vec![]]));
        let negotiated = requester
            .negotiate_over(&mut channel, "peer", &text, &caps(), |_| {})
            .await
            .expect("negotiated");
        assert_eq!(negotiated.outcome, Outcome::Agreed);
        let sent = answers(&negotiated.transcript);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0]["status"], "accepted");
        let agreed = negotiated.test_cases.expect("agreed cases");
        assert!(agreed.contains("P12345"), "{agreed}");
    }

    #[tokio::test]
    async fn the_providers_cases_are_rejected_when_they_break_the_schema() {
        let (requester, _dir) = requester().await;
        let text = bare();
        let turn = provider_turn(&text, json!([found(json!(12345))]));
        let mut channel = Scripted(VecDeque::from([vec![hello()], turn, vec![]]));
        let negotiated = requester
            .negotiate_over(&mut channel, "peer", &text, &caps(), |_| {})
            .await
            .expect("negotiated");
        // The protocol stays agreed; its cases are not.
        assert_eq!(negotiated.outcome, Outcome::Agreed);
        assert!(negotiated.test_cases.is_none());
        let sent = answers(&negotiated.transcript);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0]["status"], "rejected");
        let reason = sent[0]["modificationSummary"].as_str().unwrap_or_default();
        assert!(
            reason.contains("`found`") && reason.contains("request schema"),
            "{reason}"
        );
    }
}

//! How the requester's loop reaches the provider: [`MetaChannel`], one framing of the
//! meta-protocol, and `Recorded`, which keeps what crosses it.

use async_trait::async_trait;
use parley_anp::MetaMessage;
use parley_store::Direction;
use serde_json::Value;

use super::RequesterError;

/// How the requester's negotiation reaches the provider: one framing of the meta-protocol
/// (NLIP's is [`NlipLink`](crate::negotiation::nlip::NlipLink), seed 002's
/// [`AnpLink`](crate::negotiation::anp::AnpLink)).
#[async_trait]
pub trait MetaChannel: Send {
    /// Sends `messages` (with a human-readable `summary`, where the framing carries one) and
    /// returns the meta-protocol messages the peer answered with, in order.
    async fn exchange(
        &mut self,
        summary: &str,
        messages: &[MetaMessage],
    ) -> Result<Vec<Value>, RequesterError>;

    /// The peer's next meta-protocol messages, when this side has nothing to send. On a
    /// framing where the peer only ever answers (NLIP's), there are none: the peer stalled.
    async fn receive(&mut self) -> Result<Vec<Value>, RequesterError> {
        Err(RequesterError::Stalled)
    }

    /// Sends `messages` that need no answer. On a framing that answers every message (NLIP's)
    /// the answer is read and dropped.
    async fn notify(
        &mut self,
        summary: &str,
        messages: &[MetaMessage],
    ) -> Result<(), RequesterError> {
        self.exchange(summary, messages).await.map(|_| ())
    }
}

/// A channel that records what crosses it: every meta-protocol message with its direction,
/// and how many exchanges there were.
pub(super) struct Recorded<'a, C> {
    pub(super) channel: &'a mut C,
    pub(super) transcript: Vec<(Direction, Value)>,
    pub(super) messages: u32,
}

impl<C: MetaChannel> Recorded<'_, C> {
    pub(super) async fn exchange(
        &mut self,
        summary: &str,
        out: &[MetaMessage],
    ) -> Result<Vec<Value>, RequesterError> {
        for m in out {
            self.transcript.push((Direction::Outbound, m.to_value()));
        }
        self.messages += 1;
        let answer = self.channel.exchange(summary, out).await?;
        self.received(&answer);
        Ok(answer)
    }

    pub(super) async fn receive(&mut self) -> Result<Vec<Value>, RequesterError> {
        let answer = self.channel.receive().await?;
        self.received(&answer);
        Ok(answer)
    }

    pub(super) async fn notify(
        &mut self,
        summary: &str,
        out: &[MetaMessage],
    ) -> Result<(), RequesterError> {
        for m in out {
            self.transcript.push((Direction::Outbound, m.to_value()));
        }
        self.messages += 1;
        self.channel.notify(summary, out).await
    }

    fn received(&mut self, answer: &[Value]) {
        for v in answer {
            self.transcript.push((Direction::Inbound, v.clone()));
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::VecDeque;

    use parley_anp::messages::capability;
    use serde_json::json;

    use super::*;
    use crate::negotiation::requester::{Outcome, Requester};

    /// A channel whose peer's answers are given in advance, one list per exchange; an empty list
    /// stands for a hello the peer does not answer.
    pub(in crate::negotiation::requester) struct Scripted(
        pub(in crate::negotiation::requester) VecDeque<Vec<Value>>,
    );

    #[async_trait]
    impl MetaChannel for Scripted {
        async fn exchange(
            &mut self,
            _summary: &str,
            messages: &[MetaMessage],
        ) -> Result<Vec<Value>, RequesterError> {
            let answer = self.0.pop_front().ok_or(RequesterError::Stalled)?;
            let hello = matches!(messages.first(), Some(MetaMessage::SourceHello(_)));
            if answer.is_empty() && hello {
                return Err(RequesterError::NoHello);
            }
            Ok(answer)
        }
    }

    pub(in crate::negotiation::requester) async fn requester() -> (Requester, tempfile::TempDir) {
        let (url, dir) = parley_store::testing::fresh_sqlite_url();
        let store = parley_store::connect(&url, Default::default())
            .await
            .expect("store");
        (Requester::new(store), dir)
    }

    pub(in crate::negotiation::requester) fn text() -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../examples/protocols/product-info.md"),
        )
        .expect("example protocol")
    }

    pub(in crate::negotiation::requester) fn caps() -> Vec<String> {
        capability::ALL.map(str::to_owned).to_vec()
    }

    #[tokio::test]
    async fn a_peer_of_another_meta_protocol_version_is_refused() {
        let (requester, _dir) = requester().await;
        let hello = json!({"version": "2.0", "type": "destinationHello",
                           "metaProtocol": {"version": "2.0", "supportedCapabilities": []}});
        let mut channel = Scripted(VecDeque::from([vec![hello]]));
        let result = requester
            .negotiate_over(&mut channel, "peer", &text(), &caps(), |_| {})
            .await;
        assert!(
            matches!(&result, Err(RequesterError::UnsupportedVersion { version }) if version == "2.0"),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn a_peer_that_answers_no_hello_is_negotiated_with_directly() {
        let (requester, _dir) = requester().await;
        let text = text();
        let accepted = json!({"action": "protocolNegotiation", "sequenceId": 1,
                              "candidateProtocols": text, "status": "accepted"});
        let generated = json!({"action": "codeGeneration", "status": "generated"});
        let mut channel = Scripted(VecDeque::from([vec![], vec![accepted, generated], vec![]]));
        let negotiated = requester
            .negotiate_over(&mut channel, "peer", &text, &caps(), |_| {})
            .await
            .expect("negotiated");
        assert_eq!(negotiated.outcome, Outcome::Agreed);
        // The hello is on record though unanswered; no answer to it is.
        assert_eq!(negotiated.transcript[0].1["type"], "sourceHello");
        assert_eq!(negotiated.transcript[1].1["action"], "protocolNegotiation");
    }
}

//! How the requester's loop reaches the provider: [`MetaChannel`], one framing of the
//! meta-protocol, and `Recorded`, which keeps what crosses it.

use async_trait::async_trait;
use parley_anp::MetaMessage;
use parley_store::Direction;
use serde_json::Value;

use super::RequesterError;

/// How the requester's negotiation reaches the provider: one framing of the meta-protocol
/// (NLIP's is [`NlipLink`]).
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

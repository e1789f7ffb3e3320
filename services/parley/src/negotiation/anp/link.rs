//! The requester's side of a seed-002 connection: [`AnpLink`], its [`MetaChannel`], and the
//! application and natural-language exchanges that follow a negotiation on it.
//!
//! The framing pairs nothing: after sending, the link waits (up to the reply time limit) for
//! the peer's next meta frame and takes whatever further frames have already arrived with it;
//! [`MetaChannel::receive`] waits for more when the requester has nothing to send, and
//! [`MetaChannel::notify`] sends without waiting. A hello is optional in this framing (seed
//! 002 puts it in a connection handshake that AgentConnect's `MetaProtocol` leaves to its own
//! transport): a peer that does not answer one within the hello time limit is negotiated with
//! directly ([`RequesterError::NoHello`]), and a `destinationHello` that arrives later is
//! dropped.
//!
//! Application frames carry the seed's header byte, except to a peer that answered no hello:
//! that is how AgentConnect behaves, whose generated code sends and reads application messages
//! as bare JSON (a header byte would be read as part of the JSON), so such a peer gets bare JSON,
//! as its own code sends it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{FutureExt as _, SinkExt as _, StreamExt as _};
use parley_anp::MetaMessage;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use crate::client::ClientError;
use crate::client::Credential;
use crate::negotiation::requester::{MetaChannel, RequesterError};
use crate::tls::ClientTls;
use parley_anp::frame::{Frame, ProtocolType, encode, encode_application, encode_json};

/// The requester's time limits on a seed-002 connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnpOptions {
    /// How long a peer may take to answer the hello before it is taken to have none.
    pub hello_timeout: Duration,
    /// How long a peer may take for any other answer (it may generate code meanwhile).
    pub reply_timeout: Duration,
}

impl Default for AnpOptions {
    fn default() -> Self {
        AnpOptions {
            hello_timeout: Duration::from_secs(5),
            reply_timeout: Duration::from_secs(120),
        }
    }
}

/// The seed-002 end-point `url` names: `ws(s)://` as given, `http(s)://` as the matching
/// WebSocket scheme, a host without a scheme (`localhost:8080`) as `ws://`; without a path, the
/// peer's `/anp`.
pub fn endpoint(url: &str) -> Result<url::Url, ClientError> {
    let invalid = |reason: String| ClientError::Url {
        url: url.to_owned(),
        reason,
    };
    let parsed = if crate::client::names_a_host(url) {
        url::Url::parse(&format!("ws://{url}"))
    } else {
        url::Url::parse(url)
    };
    let mut parsed = parsed.map_err(|e| invalid(e.to_string()))?;
    let scheme = match parsed.scheme() {
        "ws" | "http" => "ws",
        "wss" | "https" => "wss",
        other => {
            return Err(invalid(format!(
                "unsupported scheme {other:?}; use ws(s) or http(s)"
            )));
        }
    };
    if parsed.scheme() != scheme && parsed.set_scheme(scheme).is_err() {
        return Err(invalid(format!("cannot be reached over {scheme}")));
    }
    if parsed.path().is_empty() || parsed.path() == "/" {
        parsed.set_path("/anp");
    }
    Ok(parsed)
}

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One seed-002 connection to a provider.
#[derive(Debug)]
pub struct AnpLink {
    socket: Box<Socket>,
    options: AnpOptions,
    /// Application frames go as bare JSON (the peer answered no hello).
    bare_application: bool,
}

impl AnpLink {
    /// Connects to the provider's seed-002 end-point (see [`endpoint`]); `wss://` trusts and
    /// presents what `tls` says.
    pub async fn connect(
        url: &str,
        options: AnpOptions,
        tls: &ClientTls,
    ) -> Result<AnpLink, RequesterError> {
        AnpLink::connect_as(url, options, tls, None).await
    }

    /// [`AnpLink::connect`], presenting `token` (when there is one) on the upgrade request.
    pub async fn connect_as(
        url: &str,
        options: AnpOptions,
        tls: &ClientTls,
        token: Option<&Credential>,
    ) -> Result<AnpLink, RequesterError> {
        let url = endpoint(url)?;
        let connector = match url.scheme() {
            "wss" => Some(Connector::Rustls(Arc::clone(
                &tls.configs().map_err(ClientError::from)?.ws,
            ))),
            _ => None,
        };
        let (socket, _) = tokio_tungstenite::connect_async_tls_with_config(
            crate::client::upgrade_request(&url, token)?,
            None,
            false,
            connector,
        )
        .await
        .map_err(|e| match crate::tls::tls_failure(&e) {
            Some(reason) => ClientError::Tls {
                url: url.to_string(),
                reason,
            },
            None => ClientError::from(e),
        })?;
        Ok(AnpLink {
            socket: Box::new(socket),
            options,
            bare_application: false,
        })
    }

    /// Ends the connection once the provider has handled everything sent on it. The seed's
    /// framing acknowledges nothing (a requester's last `codeGeneration` gets no answer), but a
    /// provider reads frames in order, so the end of its side of the close comes after it
    /// handled them: a later connection finds the protocol active.
    pub async fn close(mut self) -> Result<(), RequesterError> {
        WebSocketStream::close(&mut *self.socket, None)
            .await
            .map_err(ClientError::from)?;
        let drained = async { while let Some(Ok(_)) = self.socket.next().await {} };
        tokio::time::timeout(self.options.reply_timeout, drained)
            .await
            .map_err(|_| RequesterError::Stalled)
    }

    /// Sends `request` in an application frame (with its header, or bare JSON to a peer that
    /// answered no hello) and returns the answer.
    pub async fn application(&mut self, request: &Value) -> Result<Value, RequesterError> {
        self.send(encode_application(request, self.bare_application))
            .await?;
        let data = self.answer_of(ProtocolType::Application).await?;
        let answer: Value = serde_json::from_slice(&data)
            .map_err(|e| RequesterError::InvalidAnswer(format!("not JSON: {e}")))?;
        peer_error(&answer)?;
        Ok(answer)
    }

    /// Sends `text` in a natural-language frame and returns the peer's answer.
    pub async fn natural_language(&mut self, text: &str) -> Result<String, RequesterError> {
        self.send(encode(ProtocolType::NaturalLanguage, text.as_bytes()))
            .await?;
        let data = self.answer_of(ProtocolType::NaturalLanguage).await?;
        if let Ok(value) = serde_json::from_slice::<Value>(&data) {
            peer_error(&value)?;
        }
        String::from_utf8(data)
            .map_err(|_| RequesterError::InvalidAnswer("natural language that is not UTF-8".into()))
    }

    /// Whether the peer answered the hello: one that did not (AgentConnect) is sent bare JSON,
    /// and nothing of the meta-protocol after the negotiation.
    pub fn answered_hello(&self) -> bool {
        !self.bare_application
    }

    /// Sends meta-protocol object `value` in a meta frame and returns the peer's next
    /// meta-protocol message; `None` when none came within the reply limit.
    pub async fn meta_exchange(&mut self, value: &Value) -> Result<Option<Value>, RequesterError> {
        self.send(encode_json(ProtocolType::Meta, value)).await?;
        self.next_meta(self.options.reply_timeout, false).await
    }

    async fn send(&mut self, frame: Vec<u8>) -> Result<(), RequesterError> {
        self.socket
            .send(WsMessage::Binary(frame.into()))
            .await
            .map_err(ClientError::from)?;
        Ok(())
    }

    /// The data of the next frame of `kind`, skipping others (late meta frames of a
    /// negotiation, say); an error frame of any kind is the peer's error.
    async fn answer_of(&mut self, kind: ProtocolType) -> Result<Vec<u8>, RequesterError> {
        loop {
            let Some(bytes) = self.next_frame(self.options.reply_timeout).await? else {
                return Err(RequesterError::Stalled);
            };
            let frame =
                Frame::decode(&bytes).map_err(|e| RequesterError::InvalidAnswer(e.to_string()))?;
            if frame.kind == kind {
                return Ok(frame.data.to_vec());
            }
            if let Ok(value) = frame.json() {
                peer_error(&value)?;
            }
            tracing::debug!(kind = frame.kind.name(), "a frame of another kind, skipped");
        }
    }

    /// The next frame's bytes; `None` when none came within `within`.
    async fn next_frame(&mut self, within: Duration) -> Result<Option<Vec<u8>>, RequesterError> {
        match tokio::time::timeout(within, self.read()).await {
            Ok(read) => read.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// Reads the next data frame (pings are answered by the socket itself).
    async fn read(&mut self) -> Result<Vec<u8>, RequesterError> {
        while let Some(message) = self.socket.next().await {
            match message.map_err(ClientError::from)? {
                WsMessage::Binary(bytes) => return Ok(bytes.to_vec()),
                WsMessage::Text(text) => return Ok(text.as_bytes().to_vec()),
                WsMessage::Close(_) => break,
                _ => {}
            }
        }
        Err(ClientError::Closed.into())
    }

    /// The next meta-protocol message within `within`; `None` when none came. Frames of other
    /// kinds are skipped, and so is a `destinationHello` unless `hello` (it answers a hello this
    /// link stopped waiting for).
    async fn next_meta(
        &mut self,
        within: Duration,
        hello: bool,
    ) -> Result<Option<Value>, RequesterError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(bytes) = self.next_frame(left).await? else {
                return Ok(None);
            };
            if let Some(value) = meta_value(&bytes, hello)? {
                return Ok(Some(value));
            }
        }
    }

    /// The meta-protocol messages that have arrived already, without waiting.
    fn arrived(&mut self) -> Result<Vec<Value>, RequesterError> {
        let mut out = Vec::new();
        // A closed or broken socket ends what has arrived; the next read reports it.
        while let Some(Ok(bytes)) = self.read().now_or_never() {
            if let Some(value) = meta_value(&bytes, false)? {
                out.push(value);
            }
        }
        Ok(out)
    }

    async fn send_meta(&mut self, messages: &[MetaMessage]) -> Result<(), RequesterError> {
        for m in messages {
            self.send(encode_json(ProtocolType::Meta, &m.to_value()))
                .await?;
        }
        Ok(())
    }
}

/// The meta-protocol message a frame carries, if it is one this link reads (see
/// [`AnpLink::next_meta`]); an error frame is the peer's error.
fn meta_value(bytes: &[u8], hello: bool) -> Result<Option<Value>, RequesterError> {
    let Ok(frame) = Frame::decode(bytes) else {
        return Ok(None);
    };
    let Ok(value) = frame.json() else {
        tracing::debug!(
            kind = frame.kind.name(),
            "a frame that is not JSON, skipped"
        );
        return Ok(None);
    };
    peer_error(&value)?;
    if frame.kind != ProtocolType::Meta {
        tracing::debug!(kind = frame.kind.name(), "a frame of another kind, skipped");
        return Ok(None);
    }
    let late_hello =
        !hello && value.get("type").and_then(Value::as_str) == Some("destinationHello");
    if late_hello {
        tracing::debug!("a destinationHello after the hello's time limit, dropped");
        return Ok(None);
    }
    Ok(Some(value))
}

/// An error frame's `{"error": {"code", "message"}}` (that object alone: a protocol's own
/// answer may have an `error` field among others) as the peer's error.
fn peer_error(value: &Value) -> Result<(), RequesterError> {
    let Some(error) = value
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.get("error"))
        .filter(|e| e.get("code").is_some_and(Value::is_string))
    else {
        return Ok(());
    };
    let text = |key: &str| {
        error
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Err(RequesterError::Peer {
        code: text("code"),
        message: text("message"),
    })
}

#[async_trait]
impl MetaChannel for AnpLink {
    async fn exchange(
        &mut self,
        _summary: &str,
        messages: &[MetaMessage],
    ) -> Result<Vec<Value>, RequesterError> {
        let hello = !messages.is_empty()
            && messages
                .iter()
                .all(|m| matches!(m, MetaMessage::SourceHello(_)));
        self.send_meta(messages).await?;
        let within = if hello {
            self.options.hello_timeout
        } else {
            self.options.reply_timeout
        };
        let Some(first) = self.next_meta(within, hello).await? else {
            if hello {
                self.bare_application = true;
                return Err(RequesterError::NoHello);
            }
            return Err(RequesterError::Stalled);
        };
        let mut answer = vec![first];
        answer.extend(self.arrived()?);
        Ok(answer)
    }

    async fn receive(&mut self) -> Result<Vec<Value>, RequesterError> {
        let Some(first) = self.next_meta(self.options.reply_timeout, false).await? else {
            return Err(RequesterError::Stalled);
        };
        let mut answer = vec![first];
        answer.extend(self.arrived()?);
        Ok(answer)
    }

    async fn notify(
        &mut self,
        _summary: &str,
        messages: &[MetaMessage],
    ) -> Result<(), RequesterError> {
        self.send_meta(messages).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_a_path_means_the_peers_anp_end_point() {
        let e = |u: &str| endpoint(u).expect("an end-point").to_string();
        assert_eq!(e("http://127.0.0.1:8080"), "ws://127.0.0.1:8080/anp");
        assert_eq!(e("https://agent.example/"), "wss://agent.example/anp");
        assert_eq!(e("ws://127.0.0.1:9/ws"), "ws://127.0.0.1:9/ws");
        assert_eq!(e("localhost:8080"), "ws://localhost:8080/anp");
        assert!(endpoint("ftp://x").is_err());
    }

    #[test]
    fn error_frames_are_the_peers_errors_and_meta_messages_are_not() {
        let err =
            peer_error(&serde_json::json!({"error": {"code": "no_protocol", "message": "m"}}));
        assert!(matches!(err, Err(RequesterError::Peer { code, .. }) if code == "no_protocol"));
        assert!(peer_error(&serde_json::json!({"action": "x", "error": {"code": "c"}})).is_ok());
        assert!(peer_error(&serde_json::json!({"error": "a protocol's own field"})).is_ok());
        assert!(peer_error(&serde_json::json!({"status": 200})).is_ok());
    }
}

//! An NLIP client: HTTP (JSON or CBOR bodies) for `http(s)://…/nlip` URLs, WebSocket for
//! `ws(s)://…` URLs (CBOR on `/nlip/ws`, JSON text on `/nlip/ws/text`). Used by the CLI and
//! by the requester side of negotiation.

use futures::{SinkExt, StreamExt};
use parley_nlip::Message;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("HTTP request failed: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the peer answered HTTP {status} without an NLIP message: {body}")]
    NotNlip { status: u16, body: String },
    #[error("the peer's reply is not a valid NLIP message: {0}")]
    Decode(#[from] parley_nlip::DecodeError),
    #[error("WebSocket failed: {0}")]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    #[error("the WebSocket closed before a reply arrived")]
    Closed,
}

/// How messages travel.
#[derive(Debug)]
enum Transport {
    Http {
        client: reqwest::Client,
        url: String,
        cbor: bool,
    },
    Ws {
        socket: Box<WebSocketStream<MaybeTlsStream<TcpStream>>>,
        cbor: bool,
    },
}

/// A connection to one NLIP end-point. Over WebSocket, one socket carries every message.
#[derive(Debug)]
pub struct NlipClient {
    transport: Transport,
}

/// A reply plus the HTTP status it came with (200 over WebSocket).
#[derive(Debug, Clone)]
pub struct Received {
    pub status: u16,
    pub message: Message,
}

impl NlipClient {
    /// Connects (WebSocket) or prepares (HTTP). `cbor` picks CBOR bodies over HTTP; over
    /// WebSocket the path decides (`/nlip/ws/text` is JSON, anything else CBOR).
    pub async fn connect(url: &str, cbor: bool) -> Result<NlipClient, ClientError> {
        let parsed = url::Url::parse(url).map_err(|e| ClientError::Url {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        let transport = match parsed.scheme() {
            "http" | "https" => Transport::Http {
                client: reqwest::Client::builder()
                    .build()
                    .map_err(ClientError::Http)?,
                url: url.to_owned(),
                cbor,
            },
            "ws" | "wss" => {
                // Reads of the server's size (see `WS_READ_CHUNK`), and no Nagle delay: one
                // message is one write, answered before the next is sent.
                let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                    .read_buffer_size(crate::server::WS_READ_CHUNK);
                let (socket, _) =
                    tokio_tungstenite::connect_async_with_config(url, Some(config), true).await?;
                Transport::Ws {
                    socket: Box::new(socket),
                    cbor: !parsed.path().trim_end_matches('/').ends_with("/text"),
                }
            }
            other => {
                return Err(ClientError::Url {
                    url: url.to_owned(),
                    reason: format!("unsupported scheme {other:?}; use http(s) or ws(s)"),
                });
            }
        };
        Ok(NlipClient { transport })
    }

    /// Sends one message and waits for its reply. NLIP error replies are replies, not
    /// errors: inspect them with [`parley_nlip::ErrorInfo::from_message`].
    pub async fn send(&mut self, message: &Message) -> Result<Received, ClientError> {
        match &mut self.transport {
            Transport::Http { client, url, cbor } => {
                let (body, ct) = if *cbor {
                    (parley_nlip::to_cbor_vec(message), "application/cbor")
                } else {
                    (parley_nlip::to_json_vec(message), "application/json")
                };
                let resp = client
                    .post(url.as_str())
                    .header(reqwest::header::CONTENT_TYPE, ct)
                    .body(body)
                    .send()
                    .await?;
                let status = resp.status().as_u16();
                let is_cbor = resp
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("application/cbor"));
                let bytes = resp.bytes().await?;
                let decoded = if is_cbor {
                    parley_nlip::from_cbor_slice(&bytes)
                } else {
                    parley_nlip::from_json_slice(&bytes)
                };
                match decoded {
                    Ok(message) => Ok(Received { status, message }),
                    Err(_) if !(200..300).contains(&status) => Err(ClientError::NotNlip {
                        status,
                        body: String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into(),
                    }),
                    Err(e) => Err(e.into()),
                }
            }
            Transport::Ws { socket, cbor } => {
                let frame = if *cbor {
                    WsMessage::Binary(parley_nlip::to_cbor_vec(message).into())
                } else {
                    WsMessage::Text(
                        String::from_utf8(parley_nlip::to_json_vec(message))
                            .expect("serde_json writes UTF-8")
                            .into(),
                    )
                };
                socket.send(frame).await?;
                while let Some(frame) = socket.next().await {
                    let message = match frame? {
                        WsMessage::Binary(b) => parley_nlip::from_cbor_slice(&b)?,
                        WsMessage::Text(t) => parley_nlip::from_json_slice(t.as_bytes())?,
                        WsMessage::Close(_) => return Err(ClientError::Closed),
                        _ => continue,
                    };
                    return Ok(Received {
                        status: 200,
                        message,
                    });
                }
                Err(ClientError::Closed)
            }
        }
    }
}

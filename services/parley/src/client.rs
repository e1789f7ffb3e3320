//! An NLIP client: HTTP (JSON or CBOR bodies) for `http(s)://…/nlip` URLs, WebSocket for
//! `ws(s)://…` URLs (CBOR on `/nlip/ws`, JSON text on `/nlip/ws/text`). Used by the CLI and
//! by the requester side of negotiation.
//!
//! A URL names a peer the way people type it: without a path it means the peer's NLIP
//! end-point ([`endpoint`]), so `http://host:8080` is `http://host:8080/nlip` and
//! `ws://host:8080` is `ws://host:8080/nlip/ws`; without a scheme it is an `http://` URL, so
//! `localhost:8080` is `http://localhost:8080/nlip`. An explicit path is kept. A peer that answers
//! 404 or 405 on a path other than Parley's end-points gets an error naming the right one.
//!
//! A client may present a [`Credential`]: a [`BearerToken`] (an API key from `parley peers add`,
//! or an OAuth access token), or a DID-WBA identity ([`DidSigner`], ANP-02), which signs every
//! HTTP request and WebSocket upgrade request with a fresh HTTP Message Signature (the upgrade is
//! signed as a GET of its `http(s)` URL, as servers check it). A token goes by default as
//! `Authorization: Bearer …` on every HTTP request and on the WebSocket upgrade request, marked
//! sensitive so that no header dump shows it. A token to present
//! [`Placement::InMessage`] goes inside NLIP instead (ECMA-430 §6.2.2): the client sends nothing
//! until the peer asks for authentication (a control reply `authentication_required`), answers
//! by sending the same message again with the token in an `authentication` token submessage, and
//! from then on sends the session token the peer handed back (any authentication token of the
//! peer's own in a reply) with every message, answering again when the peer asks again.

use std::sync::Arc;

use futures::{SinkExt, StreamExt};
pub use parley_auth::did_signer::DidSigner;
use parley_nlip::Message;
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use crate::tls::{ClientTls, TlsError, tls_failure};

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
    /// The peer has no NLIP end-point at this path; `hint` names the right one.
    #[error("{url} answered HTTP {status}: no NLIP end-point there; {hint}")]
    WrongEndpoint {
        url: String,
        status: u16,
        hint: String,
    },
    #[error("the WebSocket closed before a reply arrived")]
    Closed,
    /// The TLS handshake failed: most often a certificate this side does not trust.
    #[error(
        "TLS with {url} failed: {reason} (a peer whose certificate a private CA signed is \
         trusted with that CA: --ca-cert, PARLEY_CA_CERT)"
    )]
    Tls { url: String, reason: String },
    #[error("the client's TLS configuration is not usable: {0}")]
    TlsConfig(#[from] TlsError),
    #[error(
        "a bearer token is one word of letters, digits and `-._~+/` (then `=` padding); this \
         one is not"
    )]
    Token,
    #[error("the request cannot be signed with the DID-WBA identity: {0}")]
    Sign(String),
}

/// What a client presents to prove who it is (see the module docs).
#[derive(Debug, Clone)]
pub enum Credential {
    Bearer(BearerToken),
    DidWba(Arc<DidSigner>),
}

impl Credential {
    /// The headers a `method` request to `url` with `body` carries: `Authorization: Bearer` for
    /// a token presented in headers, a fresh signature for a DID-WBA identity; none for a token
    /// presented in messages. `url` may be a WebSocket URL: its upgrade is signed as a GET of the
    /// `http(s)` URL.
    pub fn headers(
        &self,
        method: &str,
        url: &url::Url,
        body: Option<&[u8]>,
    ) -> Result<Vec<(HeaderName, HeaderValue)>, ClientError> {
        match self {
            Credential::Bearer(token) => Ok(token
                .nlip_header()
                .map(|h| (AUTHORIZATION, h.clone()))
                .into_iter()
                .collect()),
            Credential::DidWba(signer) => {
                let mut url = url.clone();
                let http = match url.scheme() {
                    "ws" => Some("http"),
                    "wss" => Some("https"),
                    _ => None,
                };
                if let Some(http) = http {
                    url.set_scheme(http)
                        .expect("ws and wss URLs have http and https twins");
                }
                let sign = |e: &dyn std::fmt::Display| ClientError::Sign(e.to_string());
                let signed = signer
                    .sign(method, url.as_str(), body)
                    .map_err(|e| sign(&e))?;
                signed
                    .into_iter()
                    .map(|(name, value)| {
                        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| sign(&e))?;
                        let value = HeaderValue::from_str(&value).map_err(|e| sign(&e))?;
                        Ok((name, value))
                    })
                    .collect()
            }
        }
    }

    /// The token to answer an NLIP request for authentication with, when it goes in messages.
    fn in_message(&self) -> Option<&BearerToken> {
        match self {
            Credential::Bearer(token) if token.placement == Placement::InMessage => Some(token),
            _ => None,
        }
    }

    /// Whether it goes on HTTP requests and upgrade requests (not only inside messages).
    fn in_headers(&self) -> bool {
        self.in_message().is_none()
    }
}

impl From<BearerToken> for Credential {
    fn from(token: BearerToken) -> Credential {
        Credential::Bearer(token)
    }
}

/// A credential: an API key or an OAuth access token, presented as `Authorization: Bearer
/// <token>` or inside NLIP messages ([`Placement`]). Neither `Debug` nor any error shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    header: HeaderValue,
    token: String,
    placement: Placement,
}

/// Where a client presents its [`BearerToken`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Placement {
    /// `Authorization: Bearer` on every HTTP request and WebSocket upgrade.
    #[default]
    Header,
    /// Inside NLIP messages, when the peer asks (ECMA-430 §6.2.2); framings without NLIP
    /// messages (`/anp`, `/anp/rpc`) still send the header.
    #[value(name = "message")]
    InMessage,
}

impl BearerToken {
    /// A token as given (surrounding whitespace ignored), of RFC 6750's `b64token` form, so that
    /// it fits a header and cannot add one.
    pub fn new(token: &str) -> Result<BearerToken, ClientError> {
        let token = token.trim();
        let body = token.trim_end_matches('=');
        let well_formed = !body.is_empty()
            && body
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b));
        if !well_formed {
            return Err(ClientError::Token);
        }
        let mut header =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| ClientError::Token)?;
        header.set_sensitive(true);
        Ok(BearerToken {
            header,
            token: token.to_owned(),
            placement: Placement::Header,
        })
    }

    /// The same token, presented as `placement` says.
    pub fn presented(mut self, placement: Placement) -> BearerToken {
        self.placement = placement;
        self
    }

    /// The `Authorization` header's value.
    pub fn header_value(&self) -> &HeaderValue {
        &self.header
    }

    /// Where NLIP clients present it.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// The `Authorization` header an NLIP client sends with it: none when it goes in messages.
    fn nlip_header(&self) -> Option<&HeaderValue> {
        (self.placement == Placement::Header).then_some(&self.header)
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(…)")
    }
}

/// How messages travel.
#[derive(Debug)]
enum Transport {
    Http {
        client: reqwest::Client,
        url: url::Url,
        cbor: bool,
        credential: Option<Credential>,
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
    /// The token to answer a request for authentication with (placed in messages).
    in_message: Option<BearerToken>,
    /// The peer's own authentication token (its session), sent with every message.
    session: Option<parley_nlip::Submessage>,
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
    /// `url` may leave the path out (see [`endpoint`]). `https://` and `wss://` trust the
    /// platform's root certificates; see [`NlipClient::connect_with`] for more.
    pub async fn connect(url: &str, cbor: bool) -> Result<NlipClient, ClientError> {
        NlipClient::connect_with(url, cbor, &ClientTls::default()).await
    }

    /// [`NlipClient::connect`], trusting and presenting what `tls` says over `https://` and
    /// `wss://`.
    pub async fn connect_with(
        url: &str,
        cbor: bool,
        tls: &ClientTls,
    ) -> Result<NlipClient, ClientError> {
        NlipClient::connect_as(url, cbor, tls, None).await
    }

    /// [`NlipClient::connect_with`], presenting `credential` (when there is one) on every HTTP
    /// request, or on the WebSocket's upgrade request, or inside messages.
    pub async fn connect_as(
        url: &str,
        cbor: bool,
        tls: &ClientTls,
        credential: Option<&Credential>,
    ) -> Result<NlipClient, ClientError> {
        let parsed = endpoint(url)?;
        let secure = matches!(parsed.scheme(), "https" | "wss");
        let configs = if secure { Some(tls.configs()?) } else { None };
        let transport = match parsed.scheme() {
            "http" | "https" => {
                let mut builder = reqwest::Client::builder();
                if let Some(configs) = &configs {
                    builder = builder.tls_backend_preconfigured(configs.http.clone());
                }
                Transport::Http {
                    client: builder.build().map_err(ClientError::Http)?,
                    url: parsed.clone(),
                    cbor,
                    credential: credential.filter(|c| c.in_headers()).cloned(),
                }
            }
            "ws" | "wss" => {
                // Reads of the server's size (see `WS_READ_CHUNK`), and no Nagle delay: one
                // message is one write, answered before the next is sent.
                let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                    .read_buffer_size(crate::server::WS_READ_CHUNK);
                let connector = configs.map(|c| Connector::Rustls(Arc::clone(&c.ws)));
                let (socket, _) = tokio_tungstenite::connect_async_tls_with_config(
                    upgrade_request(&parsed, credential)?,
                    Some(config),
                    true,
                    connector,
                )
                .await
                .map_err(|e| handshake_error(&parsed, e))?;
                Transport::Ws {
                    socket: Box::new(socket),
                    cbor: !parsed.path().trim_end_matches('/').ends_with("/text"),
                }
            }
            other => unreachable!("endpoint() admits only http(s) and ws(s), not {other}"),
        };
        Ok(NlipClient {
            transport,
            in_message: credential.and_then(Credential::in_message).cloned(),
            session: None,
        })
    }

    /// Sends one message and waits for its reply. NLIP error replies are replies, not
    /// errors: inspect them with [`parley_nlip::ErrorInfo::from_message`]. With a token to
    /// present in messages, a request for authentication is answered here (see the module
    /// docs): the reply returned is the answer to the message sent again.
    pub async fn send(&mut self, message: &Message) -> Result<Received, ClientError> {
        if self.in_message.is_none() {
            return self.exchange(message).await;
        }
        let mut sent = message.clone();
        sent.submessages.extend(self.session.clone());
        let mut received = self.exchange(&sent).await?;
        if asks_for_authentication(&received.message)
            && let Some(token) = &self.in_message
        {
            self.session = None;
            sent = message
                .clone()
                .with_submessage(parley_nlip::Submessage::new(
                    parley_nlip::Format::Token,
                    "authentication",
                    token.token.as_str(),
                ));
            received = self.exchange(&sent).await?;
        }
        if let Some(session) = peer_session(&sent, &received.message) {
            self.session = Some(session.clone());
        }
        Ok(received)
    }

    /// One message out, its reply in.
    async fn exchange(&mut self, message: &Message) -> Result<Received, ClientError> {
        match &mut self.transport {
            Transport::Http {
                client,
                url,
                cbor,
                credential,
            } => {
                let (body, ct) = if *cbor {
                    (parley_nlip::to_cbor_vec(message), "application/cbor")
                } else {
                    (parley_nlip::to_json_vec(message), "application/json")
                };
                let mut request = client
                    .post(url.as_str())
                    .header(reqwest::header::CONTENT_TYPE, ct);
                if let Some(credential) = credential {
                    for (name, value) in credential.headers("POST", url, Some(&body))? {
                        request = request.header(name, value);
                    }
                }
                let resp = request
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| http_error(url, e))?;
                let status = resp.status().as_u16();
                if let Some(hint) = wrong_path_hint(url, status) {
                    return Err(ClientError::WrongEndpoint {
                        url: url.to_string(),
                        status,
                        hint,
                    });
                }
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

/// Whether `reply` is a request for authentication (ECMA-430 §6.2.2): a control message whose
/// error code is `authentication_required`.
fn asks_for_authentication(reply: &Message) -> bool {
    reply.is_control()
        && parley_nlip::ErrorInfo::from_message(reply)
            .is_some_and(|e| e.code == "authentication_required")
}

/// The peer's own authentication token in `reply`: one the client did not send in `sent`.
fn peer_session<'a>(sent: &Message, reply: &'a Message) -> Option<&'a parley_nlip::Submessage> {
    reply.tokens().find(|t| {
        t.token_kind() == Some(parley_nlip::TokenKind::Authentication)
            && !sent.tokens().any(|s| s.same_token(t))
    })
}

/// The WebSocket upgrade request for `url`, carrying what `credential` puts in headers.
pub(crate) fn upgrade_request(
    url: &url::Url,
    credential: Option<&Credential>,
) -> Result<tokio_tungstenite::tungstenite::handshake::client::Request, ClientError> {
    let mut request = url.as_str().into_client_request()?;
    if let Some(credential) = credential {
        for (name, value) in credential.headers("GET", url, None)? {
            request.headers_mut().insert(name, value);
        }
    }
    Ok(request)
}

/// The NLIP end-point `url` names: the URL itself when it has a path, else the peer's default
/// end-point, `/nlip` over HTTP(S) and `/nlip/ws` over WebSocket. Only `http`, `https`, `ws`
/// and `wss` URLs name one; a host without a scheme (`localhost:8080`, `[::1]:8080`,
/// `agent.example/nlip`) is taken for an `http://` URL.
pub fn endpoint(url: &str) -> Result<url::Url, ClientError> {
    let invalid = |reason: String| ClientError::Url {
        url: url.to_owned(),
        reason,
    };
    let parsed = if names_a_host(url) {
        url::Url::parse(&format!("http://{url}"))
    } else {
        url::Url::parse(url)
    };
    let mut parsed = parsed.map_err(|e| invalid(e.to_string()))?;
    let default_path = match parsed.scheme() {
        "http" | "https" => "/nlip",
        "ws" | "wss" => "/nlip/ws",
        other => {
            return Err(invalid(format!(
                "unsupported scheme {other:?}; use http(s) or ws(s)"
            )));
        }
    };
    if parsed.path().is_empty() || parsed.path() == "/" {
        parsed.set_path(default_path);
    }
    Ok(parsed)
}

/// Whether `url` starts with a host rather than a scheme: no `://`, and what follows a colon,
/// if any, is a port (`localhost:8080`, not `mailto:someone`).
pub(crate) fn names_a_host(url: &str) -> bool {
    if url.contains("://") {
        return false;
    }
    if url.starts_with('[') {
        return true;
    }
    match url.split_once(':') {
        None => true,
        Some((_, rest)) => {
            let port = rest.split('/').next().unwrap_or_default();
            !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
        }
    }
}

/// Where Parley serves NLIP, for a peer that answered `status` at `url`: a hint when the
/// status says "nothing here" (404, 405) and the path is not one of Parley's end-points for
/// the scheme.
fn wrong_path_hint(url: &url::Url, status: u16) -> Option<String> {
    if !matches!(status, 404 | 405) {
        return None;
    }
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    match url.scheme() {
        "ws" | "wss" if !matches!(path, "/nlip/ws" | "/nlip/ws/text") => Some(format!(
            "Parley's WebSocket end-points are {origin}/nlip/ws (CBOR) and {origin}/nlip/ws/text \
             (JSON); a URL without a path means /nlip/ws"
        )),
        "http" | "https" if path != "/nlip" => {
            let mut ws = url.clone();
            let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
            // http → ws is a change between special schemes, which always succeeds.
            let _ = ws.set_scheme(scheme);
            ws.set_path("/nlip/ws");
            ws.set_query(None);
            Some(format!(
                "Parley's HTTP end-point is {origin}/nlip (POST), its WebSocket end-point {ws}; \
                 a URL without a path means /nlip"
            ))
        }
        _ => None,
    }
}

/// A failed WebSocket handshake; an HTTP answer on the wrong path gets the end-point's hint.
fn handshake_error(url: &url::Url, error: tokio_tungstenite::tungstenite::Error) -> ClientError {
    if let tokio_tungstenite::tungstenite::Error::Http(response) = &error
        && let Some(hint) = wrong_path_hint(url, response.status().as_u16())
    {
        return ClientError::WrongEndpoint {
            url: url.to_string(),
            status: response.status().as_u16(),
            hint,
        };
    }
    if let Some(reason) = tls_failure(&error) {
        return ClientError::Tls {
            url: url.to_string(),
            reason,
        };
    }
    error.into()
}

/// A failed HTTP request; a failed TLS handshake says so.
fn http_error(url: &url::Url, error: reqwest::Error) -> ClientError {
    match tls_failure(&error) {
        Some(reason) => ClientError::Tls {
            url: url.to_string(),
            reason,
        },
        None => error.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(url: &str) -> String {
        endpoint(url).expect("a valid URL").to_string()
    }

    #[test]
    fn a_url_without_a_path_names_the_nlip_end_point() {
        assert_eq!(
            resolved("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/nlip"
        );
        assert_eq!(
            resolved("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/nlip"
        );
        assert_eq!(
            resolved("https://agent.example"),
            "https://agent.example/nlip"
        );
        assert_eq!(
            resolved("ws://127.0.0.1:8080"),
            "ws://127.0.0.1:8080/nlip/ws"
        );
        assert_eq!(
            resolved("wss://agent.example/"),
            "wss://agent.example/nlip/ws"
        );
    }

    #[test]
    fn an_explicit_path_is_kept() {
        for url in [
            "http://127.0.0.1:8080/nlip",
            "http://127.0.0.1:8080/api/agent",
            "ws://127.0.0.1:8080/nlip/ws/text",
            "ws://127.0.0.1:8080/nlip",
        ] {
            assert_eq!(resolved(url), url);
        }
        assert_eq!(
            resolved("http://127.0.0.1:8080/nlip?x=1"),
            "http://127.0.0.1:8080/nlip?x=1"
        );
    }

    #[test]
    fn other_schemes_and_garbage_are_refused() {
        assert!(matches!(
            endpoint("ftp://host/nlip"),
            Err(ClientError::Url { .. })
        ));
        for garbage in ["", "not a url", "http://", "mailto:someone@example.com"] {
            assert!(
                matches!(endpoint(garbage), Err(ClientError::Url { .. })),
                "{garbage:?}"
            );
        }
    }

    #[test]
    fn a_url_without_a_scheme_is_http() {
        assert_eq!(resolved("localhost:8080"), "http://localhost:8080/nlip");
        assert_eq!(resolved("127.0.0.1:8080"), "http://127.0.0.1:8080/nlip");
        assert_eq!(resolved("127.0.0.1:8080/"), "http://127.0.0.1:8080/nlip");
        assert_eq!(
            resolved("agent.example/nlip/ws/text"),
            "http://agent.example/nlip/ws/text"
        );
        assert_eq!(resolved("[::1]:8080"), "http://[::1]:8080/nlip");
    }

    #[test]
    fn a_bearer_token_is_one_word_and_never_shown() {
        let key = "parley_0123456789abcdef_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        let token = BearerToken::new(&format!(" {key}\n")).expect("an API key");
        assert_eq!(
            token.header_value().as_bytes(),
            format!("Bearer {key}").as_bytes()
        );
        assert!(token.header_value().is_sensitive());
        assert!(!format!("{token:?}").contains("AAAA"));
        BearerToken::new("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln").expect("a JWT");
        BearerToken::new("dGVzdA==").expect("padding");
        for bad in [
            "",
            "  ",
            "two words",
            "a\r\nX-Other: 1",
            "=abc",
            "a=b",
            "ключ",
        ] {
            assert!(
                matches!(BearerToken::new(bad), Err(ClientError::Token)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_wrong_path_gets_a_hint_naming_the_end_point() {
        let hint = |url: &str, status| wrong_path_hint(&url::Url::parse(url).expect("URL"), status);
        let ws = hint("ws://127.0.0.1:8080/nlip", 405).expect("a hint");
        assert!(ws.contains("ws://127.0.0.1:8080/nlip/ws"), "{ws}");
        let http = hint("http://127.0.0.1:8080/nlip/ws", 405).expect("a hint");
        assert!(http.contains("http://127.0.0.1:8080/nlip (POST)"), "{http}");
        assert_eq!(hint("ws://127.0.0.1:8080/nlip/ws", 404), None);
        assert_eq!(hint("http://127.0.0.1:8080/nlip", 405), None);
        assert_eq!(hint("http://127.0.0.1:8080/other", 500), None);
    }
}

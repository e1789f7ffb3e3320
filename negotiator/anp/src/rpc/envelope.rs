//! JSON-RPC 2.0: one request read from bytes, its response, and the error object with the
//! standard codes and ANP-06's.
//!
//! A batch (a JSON array) is refused as an invalid request: the binding's methods are one
//! negotiation each, and nothing gains from several in one body. A request without `id` is a
//! notification: [`Envelope::id`] is `None`, and the server answers nothing.

use serde_json::{Map, Value, json};

/// One JSON-RPC request, checked: `"jsonrpc": "2.0"`, a string `method`, `params` an object
/// (an absent one reads as `{}`), `id` a string, a number or null when present.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// `None` for a notification (no `id` member).
    pub id: Option<Value>,
    pub method: String,
    pub params: Map<String, Value>,
}

/// Why bytes are not a request; what to answer and with which id.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvelopeError {
    /// The request's id when it could be read, else null (as JSON-RPC says).
    pub id: Value,
    pub error: RpcError,
}

impl Envelope {
    /// Reads one request from `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Envelope, Box<EnvelopeError>> {
        let fail = |id: Value, error| Box::new(EnvelopeError { id, error });
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| fail(Value::Null, RpcError::parse_error(e)))?;
        let mut object = match value {
            Value::Object(object) => object,
            Value::Array(_) => {
                return Err(fail(
                    Value::Null,
                    RpcError::invalid_request("batches are not supported: send one request"),
                ));
            }
            _ => {
                return Err(fail(
                    Value::Null,
                    RpcError::invalid_request("a request is a JSON object"),
                ));
            }
        };
        let id = object.remove("id");
        let answer_id = match &id {
            Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
            Some(_) => {
                return Err(fail(
                    Value::Null,
                    RpcError::invalid_request("`id` is a string, a number or null"),
                ));
            }
            None => Value::Null,
        };
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            let why = "`jsonrpc` must be \"2.0\"";
            return Err(fail(answer_id, RpcError::invalid_request(why)));
        }
        let Some(Value::String(method)) = object.remove("method") else {
            let why = "`method` is a string";
            return Err(fail(answer_id, RpcError::invalid_request(why)));
        };
        let params = match object.remove("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(params)) => params,
            Some(_) => {
                let why = "`params` is an object (by-name parameters)";
                return Err(fail(answer_id, RpcError::invalid_params(why)));
            }
        };
        Ok(Envelope { id, method, params })
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

/// ANP-06's error codes (its §11), with their machine-readable names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnpCode {
    NegotiationRejected,
    NoMatchingInterface,
    UnsupportedNegotiationMode,
    UnsupportedCandidateProfile,
    UnsupportedSecurityProfile,
    UnsupportedContentType,
    MoreInformationRequired,
    AuthorizationRequired,
    NegotiationExpired,
}

impl AnpCode {
    /// The JSON-RPC error code, 1600–1608.
    pub fn code(self) -> i64 {
        match self {
            AnpCode::NegotiationRejected => 1600,
            AnpCode::NoMatchingInterface => 1601,
            AnpCode::UnsupportedNegotiationMode => 1602,
            AnpCode::UnsupportedCandidateProfile => 1603,
            AnpCode::UnsupportedSecurityProfile => 1604,
            AnpCode::UnsupportedContentType => 1605,
            AnpCode::MoreInformationRequired => 1606,
            AnpCode::AuthorizationRequired => 1607,
            AnpCode::NegotiationExpired => 1608,
        }
    }

    /// `error.data.anp_code`.
    pub fn name(self) -> &'static str {
        match self {
            AnpCode::NegotiationRejected => "meta.negotiation_rejected",
            AnpCode::NoMatchingInterface => "meta.no_matching_interface",
            AnpCode::UnsupportedNegotiationMode => "meta.unsupported_negotiation_mode",
            AnpCode::UnsupportedCandidateProfile => "meta.unsupported_candidate_profile",
            AnpCode::UnsupportedSecurityProfile => "meta.unsupported_security_profile",
            AnpCode::UnsupportedContentType => "meta.unsupported_content_type",
            AnpCode::MoreInformationRequired => "meta.more_information_required",
            AnpCode::AuthorizationRequired => "meta.authorization_required",
            AnpCode::NegotiationExpired => "meta.negotiation_expired",
        }
    }

    /// Whether the same request may succeed later or after a change the caller can make without
    /// changing what it asks for (renegotiating an expired result, adding information).
    pub fn retryable(self) -> bool {
        matches!(
            self,
            AnpCode::MoreInformationRequired
                | AnpCode::AuthorizationRequired
                | AnpCode::NegotiationExpired
        )
    }

    /// The code of `number`, when it is one of ANP-06's.
    pub fn from_code(number: i64) -> Option<AnpCode> {
        Some(match number {
            1600 => AnpCode::NegotiationRejected,
            1601 => AnpCode::NoMatchingInterface,
            1602 => AnpCode::UnsupportedNegotiationMode,
            1603 => AnpCode::UnsupportedCandidateProfile,
            1604 => AnpCode::UnsupportedSecurityProfile,
            1605 => AnpCode::UnsupportedContentType,
            1606 => AnpCode::MoreInformationRequired,
            1607 => AnpCode::AuthorizationRequired,
            1608 => AnpCode::NegotiationExpired,
            _ => return None,
        })
    }
}

impl RpcError {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    /// JSON-RPC's implementation-defined server error: the server's own failures (a database
    /// that is down, a model that timed out, a rate limit), `data.code` naming them with the
    /// stable codes of Parley's NLIP errors.
    pub const SERVER_ERROR: i64 = -32000;

    pub fn parse_error(detail: impl std::fmt::Display) -> RpcError {
        RpcError::standard(Self::PARSE_ERROR, format!("Parse error: {detail}"))
    }

    pub fn invalid_request(detail: impl std::fmt::Display) -> RpcError {
        RpcError::standard(Self::INVALID_REQUEST, format!("Invalid Request: {detail}"))
    }

    pub fn method_not_found(method: &str) -> RpcError {
        let shown: String = method.chars().take(80).collect();
        RpcError::standard(
            Self::METHOD_NOT_FOUND,
            format!(
                "Method not found: {shown:?}; this end-point serves {} and {}",
                super::method::GET_CAPABILITIES,
                super::method::NEGOTIATE
            ),
        )
    }

    pub fn invalid_params(detail: impl std::fmt::Display) -> RpcError {
        RpcError::standard(Self::INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    /// A failure of the server's own (`code`: the stable code of Parley's error).
    pub fn server(code: &str, message: impl Into<String>) -> RpcError {
        RpcError {
            code: Self::SERVER_ERROR,
            message: message.into(),
            data: Some(json!({"code": code})),
        }
    }

    /// One of ANP-06's errors; `details` goes to `data.details`.
    pub fn anp(code: AnpCode, message: impl Into<String>, details: Option<Value>) -> RpcError {
        let mut data = json!({"anp_code": code.name(), "retryable": code.retryable()});
        if let Some(details) = details {
            data["details"] = details;
        }
        RpcError {
            code: code.code(),
            message: message.into(),
            data: Some(data),
        }
    }

    fn standard(code: i64, message: String) -> RpcError {
        RpcError {
            code,
            message,
            data: None,
        }
    }

    /// ANP-06's code of this error, if it is one.
    pub fn anp_code(&self) -> Option<AnpCode> {
        AnpCode::from_code(self.code)
    }

    /// The error object.
    pub fn to_value(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }

    /// Reads an error object (as a caller receives it).
    pub fn from_value(value: &Value) -> Option<RpcError> {
        Some(RpcError {
            code: value.get("code")?.as_i64()?,
            message: value.get("message")?.as_str()?.to_owned(),
            data: value.get("data").cloned(),
        })
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.anp_code() {
            Some(code) => write!(f, "{} ({}): {}", self.code, code.name(), self.message),
            None => write!(f, "{}: {}", self.code, self.message),
        }
    }
}

/// The response carrying `result` to the request `id`.
pub fn success_response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// The response carrying `error` to the request `id` (null when it could not be read).
pub fn error_response(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_value()})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(bytes: &[u8]) -> i64 {
        Envelope::parse(bytes).expect_err("refused").error.code
    }

    #[test]
    fn reads_requests_and_notifications() {
        let e = Envelope::parse(
            br#"{"jsonrpc":"2.0","id":"r1","method":"anp.negotiate","params":{"body":{}}}"#,
        )
        .expect("a request");
        assert_eq!(e.id, Some(json!("r1")));
        assert_eq!(e.method, "anp.negotiate");
        assert!(e.params.contains_key("body"));
        let n = Envelope::parse(br#"{"jsonrpc":"2.0","method":"anp.get_capabilities"}"#)
            .expect("a notification");
        assert_eq!(n.id, None);
        assert!(n.params.is_empty());
    }

    #[test]
    fn malformed_input_gets_the_standard_codes() {
        assert_eq!(code_of(b"{not json"), RpcError::PARSE_ERROR);
        assert_eq!(code_of(b"\xff\xfe"), RpcError::PARSE_ERROR);
        assert_eq!(code_of(b"[]"), RpcError::INVALID_REQUEST);
        assert_eq!(code_of(b"42"), RpcError::INVALID_REQUEST);
        assert_eq!(
            code_of(br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#),
            RpcError::INVALID_REQUEST
        );
        assert_eq!(
            code_of(br#"{"jsonrpc":"2.0","id":1}"#),
            RpcError::INVALID_REQUEST
        );
        assert_eq!(
            code_of(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#),
            RpcError::INVALID_REQUEST
        );
        assert_eq!(
            code_of(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            RpcError::INVALID_PARAMS
        );
        let refused =
            Envelope::parse(br#"{"jsonrpc":"1.0","id":7,"method":"x"}"#).expect_err("refused");
        assert_eq!(
            refused.id,
            json!(7),
            "the id is echoed when it could be read"
        );
    }

    #[test]
    fn anp_errors_carry_their_names_and_round_trip() {
        let e = RpcError::anp(
            AnpCode::NegotiationExpired,
            "expired",
            Some(json!({"a": 1})),
        );
        let v = e.to_value();
        assert_eq!(v["code"], 1608);
        assert_eq!(v["data"]["anp_code"], "meta.negotiation_expired");
        assert_eq!(v["data"]["retryable"], true);
        assert_eq!(v["data"]["details"]["a"], 1);
        let back = RpcError::from_value(&v).expect("an error object");
        assert_eq!(back, e);
        assert_eq!(back.anp_code(), Some(AnpCode::NegotiationExpired));
        for n in 1600..=1608 {
            assert_eq!(AnpCode::from_code(n).map(AnpCode::code), Some(n));
        }
        assert_eq!(AnpCode::from_code(1609), None);
    }
}

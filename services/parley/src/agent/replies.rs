//! The replies the agent builds from what answered a message: a tool call's result, a
//! natural-language answer with its capability results, an upload's location, and an error
//! with no request to answer.

use parley_capabilities::CapabilityError;
use parley_nlip::{Content, Format, Message, Submessage};
use parley_reasoner::NlAnswer;
use serde_json::{Value, json};

use crate::error::ApiError;

/// The reply to a tool call of `capability`: a short text, then the result as a
/// `structured`/`json` submessage labelled with the capability's name (the shape of a
/// natural-language answer's results); a failure is an NLIP error with the capability's code.
pub(super) fn tool_reply(
    language: &str,
    capability: &str,
    result: Result<Value, CapabilityError>,
) -> Result<Message, ApiError> {
    let result = result.map_err(|e| {
        crate::metrics::tool_call(e.code());
        log_capability_failure(&e);
        ApiError::capability(&e)
    })?;
    crate::metrics::tool_call("ok");
    Ok(
        Message::text(language, format!("The result of {capability}.")).with_submessage(
            Submessage::new(Format::Structured, "json", Content::Json(result))
                .with_label(capability),
        ),
    )
}

/// The reply to a natural-language message: the reasoner's text first, then each capability
/// result as a `structured`/`json` submessage labelled with the capability's name. An answer
/// that reports a failed call is an NLIP error with the failure's code (the text, which names
/// the capability, is its message).
pub(super) fn answer_reply(language: String, answer: NlAnswer) -> Result<Message, ApiError> {
    if let Some(failure) = &answer.failure {
        log_capability_failure(failure);
        return Err(ApiError::Capability {
            code: failure.code().to_owned(),
            message: answer.text,
        });
    }
    let mut reply = Message::text(language, answer.text);
    for call in answer.capability_calls {
        if let Ok(result) = call.result {
            reply = reply.with_submessage(
                Submessage::new(Format::Structured, "json", Content::Json(result))
                    .with_label(call.capability),
            );
        }
    }
    Ok(reply)
}

/// A failed capability call in the log: what points at the capability's side (its binding
/// failed, its result was invalid, it timed out) as a warning, what the caller got wrong at
/// debug.
fn log_capability_failure(failure: &CapabilityError) {
    let code = failure.code();
    match failure {
        CapabilityError::BindingFailed { .. }
        | CapabilityError::InvalidResult { .. }
        | CapabilityError::Timeout { .. } => {
            tracing::warn!(code, error = %failure, "a capability call failed");
        }
        _ => tracing::debug!(code, error = %failure, "a capability call was refused"),
    }
}

/// The NLIP reply to an upload: where the bytes now live.
pub fn upload_reply(uri: &str, meta: &parley_store::UploadMeta) -> Message {
    Message::text(
        parley_nlip::DEFAULT_LANGUAGE,
        format!("Stored {} bytes; refer to them as {uri}.", meta.size),
    )
    .with_submessage(Submessage::new(Format::Structured, "uri", uri).with_label("upload"))
    .with_submessage(
        Submessage::new(
            Format::Structured,
            "json",
            Content::Json(json!({
                "id": meta.id, "size": meta.size, "content_type": meta.content_type,
                "filename": meta.filename,
            })),
        )
        .with_label("upload-meta"),
    )
}

/// An error as a message with no request to answer (undecodable input).
pub fn bare_error(error: &ApiError) -> Message {
    error.to_info().to_message(parley_nlip::DEFAULT_LANGUAGE)
}

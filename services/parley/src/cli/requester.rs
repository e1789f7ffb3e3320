//! `negotiate` and `call`: this agent as a requester.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::negotiation::anp::AnpOptions;
use crate::negotiation::requester::{
    Outcome, ProtocolRef, Requested, Requester, RequesterError, Wire, ask_in_natural_language,
};

use super::args::{WireArgs, WireKind};
use super::{CallArgs, CliError, NegotiateArgs, json, read};

impl WireArgs {
    fn wire(&self) -> Wire {
        match self.wire {
            WireKind::Nlip => Wire::Nlip,
            WireKind::Anp12 => Wire::Anp12,
            WireKind::Anp => Wire::Anp(AnpOptions {
                hello_timeout: std::time::Duration::from_millis(self.hello_timeout_ms),
                reply_timeout: std::time::Duration::from_millis(self.reply_timeout_ms),
            }),
        }
    }
}

/// The protocol text `negotiate` proposes: the file given, or one drafted from a requirement.
async fn protocol_text(args: &NegotiateArgs) -> Result<String, CliError> {
    let requirement = match (&args.protocol, &args.requirement) {
        (Some(path), _) => return read(path),
        (None, Some(requirement)) => requirement,
        (None, None) => return Err(CliError::Usage("give --protocol or --requirement".into())),
    };
    let schema = |p: &Option<PathBuf>| -> Result<serde_json::Value, CliError> {
        let p = p.as_ref().ok_or_else(|| {
            CliError::Usage("--input-schema and --output-schema are required".into())
        })?;
        json(&read(p)?, || format!("{} is not JSON", p.display()))
    };
    use parley_reasoner::ProtocolReasoner as _;
    parley_reasoner::BuiltinProtocolReasoner
        .draft(
            &read(requirement)?,
            &schema(&args.input_schema)?,
            &schema(&args.output_schema)?,
        )
        .await
        .map_err(CliError::Draft)
}

/// The test cases in `path`, checked to hold at least one before anything is sent.
fn own_test_cases(path: &PathBuf) -> Result<String, CliError> {
    let text = read(path)?;
    match parley_anp::parse_test_cases(&text) {
        Ok(cases) if !cases.is_empty() => Ok(text),
        Ok(_) => Err(CliError::Usage(format!(
            "--test-cases: {} holds no test case (a JSON array of cases with `request` and \
             `expectedResponse`, alone or under a `# Test Cases` heading)",
            path.display()
        ))),
        Err(e) => Err(CliError::Usage(format!(
            "--test-cases: {}: {e}",
            path.display()
        ))),
    }
}

pub(super) async fn negotiate(args: NegotiateArgs) -> Result<ExitCode, CliError> {
    let text = protocol_text(&args).await?;
    let test_cases = args.test_cases.as_ref().map(own_test_cases).transpose()?;
    let requester = Requester {
        max_rounds: args.max_rounds,
        wire: args.wire.wire(),
        tls: args.tls.client_tls()?,
        token: args.token.credential()?,
        test_cases,
        ..Requester::new(args.store.open().await?)
    };
    let result = match requester.negotiate(&args.url, &text, progress).await {
        Ok(r) => r,
        Err(RequesterError::NotSupported) if args.wire.wire == WireKind::Nlip => {
            note!("the peer does not speak the meta-protocol: asking in natural language instead");
            let answer =
                ask_in_natural_language(&args.url, &text, &requester.tls, requester.token.as_ref())
                    .await?;
            out!("status   natural-language fallback");
            out!("{answer}");
            return Ok(ExitCode::from(2));
        }
        Err(e) => return Err(e.into()),
    };
    out!("hash     {}", result.hash);
    let (status, ok) = match &result.outcome {
        Outcome::Agreed => ("agreed".to_owned(), true),
        Outcome::ZeroRtt => (
            "known to the provider (0-RTT, no negotiation)".to_owned(),
            true,
        ),
        Outcome::Rejected { code, reason } => (format!("rejected ({code}): {reason}"), false),
    };
    out!("status   {status}");
    out!("rounds   {}", result.rounds);
    let unit = match args.wire.wire {
        WireKind::Nlip => "NLIP exchanges",
        WireKind::Anp => "exchanges of seed-002 frames",
        WireKind::Anp12 => "JSON-RPC requests",
    };
    out!("messages {} {unit}", result.messages);
    out!("transcript:");
    for (direction, message) in &result.transcript {
        let arrow = match direction {
            parley_store::Direction::Outbound => "→",
            parley_store::Direction::Inbound => "←",
        };
        let (kind, status) = transcript_entry(message);
        out!("  {arrow} {kind} {status}");
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What one transcript entry was, and its status: a meta-protocol message's action (or type)
/// and status; a JSON-RPC request's method, a response's result status or error code.
fn transcript_entry(message: &serde_json::Value) -> (String, String) {
    let text = |pointer: &str| message.pointer(pointer).and_then(|v| v.as_str());
    if let Some(kind) = text("/action").or_else(|| text("/type")) {
        return (
            kind.to_owned(),
            text("/status").unwrap_or_default().to_owned(),
        );
    }
    if let Some(method) = text("/method") {
        return (
            method.to_owned(),
            text("/params/body/mode").unwrap_or_default().to_owned(),
        );
    }
    if let Some(status) = text("/result/status") {
        return ("result".to_owned(), status.to_owned());
    }
    match message.pointer("/error/code") {
        Some(code) => ("error".to_owned(), code.to_string()),
        None => ("?".to_owned(), String::new()),
    }
}

/// Progress of a negotiation, on stderr.
fn progress(p: crate::negotiation::requester::Progress) {
    note!("… {} (round {})", p.stage, p.round);
}

pub(super) async fn call(args: CallArgs) -> Result<ExitCode, CliError> {
    let request = json(&args.json, || "--json is not valid JSON".into())?;
    let requester = Requester {
        max_rounds: args.max_rounds,
        wire: args.wire.wire(),
        tls: args.tls.client_tls()?,
        token: args.token.credential()?,
        ..Requester::new(args.store.open().await?)
    };
    let path = PathBuf::from(&args.protocol);
    let protocol = if path.is_file() {
        ProtocolRef::Text(read(&path)?)
    } else {
        match requester.resolve_hash(&args.protocol).await {
            Ok(hash) => ProtocolRef::Hash(hash),
            Err(RequesterError::NotAHash(given)) => {
                return Err(CliError::Usage(format!(
                    "--protocol {given:?} is neither a file nor a protocol hash"
                )));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let requested = requester
        .request(&args.url, protocol, request, !args.no_fallback, progress)
        .await?;
    match &requested {
        Requested::Protocol {
            hash,
            negotiated,
            called,
        } => {
            if called.renegotiated.is_some() {
                note!("the provider no longer knew the protocol: negotiated it again");
            } else if let Some(n) = negotiated {
                let how = match n.outcome {
                    Outcome::ZeroRtt => "known to the provider (0-RTT, no negotiation)".to_owned(),
                    _ if n.rounds == 1 => "agreed in 1 round".to_owned(),
                    _ => format!("agreed in {} rounds", n.rounds),
                };
                note!("protocol {hash}: {how}");
            }
            if let Some(fixed) = &called.fixed {
                note!(
                    "the provider's first answer broke the protocol ({}); reported, it fixed its handler ({}), and this is the fixed handler's answer",
                    fixed.violation,
                    fixed.provider
                );
            }
            out!(
                "{}",
                serde_json::to_string_pretty(&called.answer)
                    .expect("a JSON value always serializes")
            );
        }
        Requested::Fallback { reason, .. } => {
            note!("fell back to natural language: {reason}");
            out!("{}", requested.text());
        }
    }
    Ok(ExitCode::SUCCESS)
}

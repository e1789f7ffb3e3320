//! The inspection commands: `protocols list`, `protocols show` (with what agreeing cost) and
//! `conversations show`.

use std::process::ExitCode;

use parley_store::{Direction, LoggedMessage, MAX_PAGE, ModelUsage, ModelUsageOwner, Store};

use crate::negotiation::requester::Requester;

use super::{CliError, LocalStore};

/// Calls and tokens of several purposes (or owners) together.
fn total(usage: &[ModelUsage]) -> ModelUsage {
    let mut sum = ModelUsage {
        purpose: "total".into(),
        ..ModelUsage::default()
    };
    for u in usage {
        sum.calls += u.calls;
        sum.unmetered_calls += u.unmetered_calls;
        sum.prompt_tokens += u.prompt_tokens;
        sum.completion_tokens += u.completion_tokens;
    }
    sum
}

/// `2 model calls, 2940 tokens (2300 prompt, 640 completion)`, plus how many calls reported no
/// usage when some did.
fn describe(u: &ModelUsage) -> String {
    if u.calls == 0 {
        return "no model calls".to_owned();
    }
    let calls = if u.calls == 1 { "call" } else { "calls" };
    let mut text = format!(
        "{} model {calls}, {} tokens ({} prompt, {} completion)",
        u.calls,
        u.tokens(),
        u.prompt_tokens,
        u.completion_tokens
    );
    if u.unmetered_calls > 0 {
        text.push_str(&format!(
            "; {} reported no usage, so the tokens are a lower bound",
            u.unmetered_calls
        ));
    }
    text
}

/// The `cost` line of `protocols show`: what the negotiations that agreed the protocol spent,
/// on this agent's side.
pub(super) fn agreement_cost(accepted: &[Vec<ModelUsage>]) -> String {
    let all: Vec<ModelUsage> = accepted.iter().map(|u| total(u)).collect();
    let negotiations = match accepted.len() {
        1 => "the negotiation".to_owned(),
        n => format!("{n} negotiations"),
    };
    format!(
        "cost     {} on this side to agree it ({negotiations})",
        describe(&total(&all))
    )
}

/// One negotiation's cost, by purpose, under its line in `protocols show`.
pub(super) fn negotiation_cost(usage: &[ModelUsage]) -> String {
    if usage.is_empty() {
        return "         no model calls".to_owned();
    }
    let parts: Vec<String> = usage
        .iter()
        .map(|u| format!("{}: {}", u.purpose, describe(u)))
        .collect();
    format!("         {}", parts.join("; "))
}

/// `parley conversations show ID`: the conversation, its turns (one per peer message), what its
/// natural-language answers cost in model calls and tokens, and its log.
pub(super) async fn conversations_show(id: &str, store: LocalStore) -> Result<ExitCode, CliError> {
    let store = store.open_existing().await?;
    let Some(conversation) = store.get_conversation(id).await? else {
        note!("conversation {id} is not in the store");
        return Ok(ExitCode::FAILURE);
    };
    out!("conversation {}", conversation.id);
    if let Some(peer) = &conversation.peer {
        out!("peer     {peer}");
    }
    out!(
        "active   {} to {}",
        conversation.created_at,
        conversation.updated_at
    );
    out!("turns    {} (messages from the peer)", conversation.turns);
    let usage = store
        .model_usage(&ModelUsageOwner::Conversation(conversation.id.clone()))
        .await?;
    out!("cost     {}", describe(&total(&usage)));
    for u in &usage {
        out!("         {}: {}", u.purpose, describe(u));
    }
    out!("messages {}", conversation.message_count);
    for message in log(store.as_ref(), &conversation.id).await? {
        out!("{}", log_line(&message));
    }
    Ok(ExitCode::SUCCESS)
}

/// The whole log, page by page.
async fn log(store: &dyn Store, id: &str) -> Result<Vec<LoggedMessage>, CliError> {
    let mut all = Vec::new();
    loop {
        let after = all.last().map_or(0, |m: &LoggedMessage| m.seq);
        let page = store.list_messages(id, after, MAX_PAGE).await?;
        let done = page.len() < MAX_PAGE as usize;
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
}

/// `   3 → 2026-11-27 10:00:00  How much is product P12345?`: the message's text, or its JSON.
fn log_line(m: &LoggedMessage) -> String {
    let arrow = match m.direction {
        Direction::Inbound => "→",
        Direction::Outbound => "←",
    };
    let text = parley_nlip::from_json_value(&m.message)
        .ok()
        .and_then(|msg| msg.text_content().map(str::to_owned))
        .unwrap_or_else(|| m.message.to_string());
    format!(
        "{:>4} {arrow} {}  {}",
        m.seq,
        m.created_at.format("%Y-%m-%d %H:%M:%S"),
        text.replace('\n', "\n         ")
    )
}

pub(super) async fn protocols_list(store: LocalStore) -> Result<ExitCode, CliError> {
    let store = store.open_existing().await?;
    let agreements = store.list_agreements(parley_store::MAX_PAGE).await?;
    if agreements.is_empty() {
        out!("no protocols agreed yet");
    }
    for a in agreements {
        let verified = match a.role {
            parley_store::Role::Provider => match store.active_handler(&a.protocol_hash).await? {
                Some(h) => format!("handler {} verified", &h.source_sha256[..12]),
                None => "no active handler".to_owned(),
            },
            parley_store::Role::Requester => "checked by the provider".to_owned(),
        };
        out!(
            "{}  {:9}  {}  {}  {verified}",
            a.protocol_hash,
            a.role,
            a.last_agreed_at.format("%Y-%m-%d %H:%M"),
            a.peer
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn protocols_show(hash: &str, store: LocalStore) -> Result<ExitCode, CliError> {
    let store = store.open_existing().await?;
    let hex = Requester::new(store.clone())
        .resolve_hash(hash)
        .await?
        .to_string();
    let Some(protocol) = store.get_protocol(&hex).await? else {
        note!("protocol {hex} is not in the local store");
        return Ok(ExitCode::FAILURE);
    };
    out!("protocol {hex}");
    for a in store.agreements_for_protocol(&hex).await? {
        out!(
            "agreed   with {} as {} at {}",
            a.peer,
            a.role,
            a.last_agreed_at
        );
    }
    let mut negotiations = Vec::new();
    for n in store.negotiations_for_protocol(&hex).await? {
        let owner = parley_store::ModelUsageOwner::Negotiation(n.id);
        let usage = store.model_usage(&owner).await?;
        negotiations.push((n, usage));
    }
    let accepted: Vec<_> = negotiations
        .iter()
        .filter(|(n, _)| n.status == parley_store::NegotiationStatus::Accepted)
        .map(|(_, usage)| usage.clone())
        .collect();
    if !accepted.is_empty() {
        out!("{}", agreement_cost(&accepted));
    }
    for (n, usage) in &negotiations {
        out!(
            "negotiation {} {} {} rounds, {} messages",
            n.id,
            n.status,
            n.rounds,
            n.message_count
        );
        out!("{}", negotiation_cost(usage));
    }
    if let Some(h) = store.active_handler(&hex).await? {
        out!(
            "handler  {} by {} ({}), verification {}",
            h.source_sha256,
            h.backend,
            h.capabilities.join(", "),
            match h.verification_passed {
                Some(true) => "passed",
                Some(false) => "failed",
                None => "not run",
            }
        );
        out!(
            "serves   {}",
            if h.compiled.is_some() {
                "its compiled form (the built-in mapping, same answers on every test case)"
            } else {
                "its JavaScript"
            }
        );
    }
    out!("\n{}", protocol.text);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(
        purpose: &str,
        calls: i64,
        unmetered: i64,
        prompt: i64,
        completion: i64,
    ) -> ModelUsage {
        ModelUsage {
            purpose: purpose.into(),
            calls,
            unmetered_calls: unmetered,
            prompt_tokens: prompt,
            completion_tokens: completion,
        }
    }

    #[test]
    fn costs_read_as_calls_and_tokens() {
        let negotiation = vec![
            spent("evaluate", 1, 0, 1300, 40),
            spent("generate_handler", 1, 0, 1000, 600),
        ];
        assert_eq!(
            agreement_cost(std::slice::from_ref(&negotiation)),
            "cost     2 model calls, 2940 tokens (2300 prompt, 640 completion) on this side to agree it (the negotiation)"
        );
        assert_eq!(
            negotiation_cost(&negotiation),
            "         evaluate: 1 model call, 1340 tokens (1300 prompt, 40 completion); generate_handler: 1 model call, 1600 tokens (1000 prompt, 600 completion)"
        );
        assert_eq!(
            agreement_cost(&[vec![]]),
            "cost     no model calls on this side to agree it (the negotiation)"
        );
        assert_eq!(negotiation_cost(&[]), "         no model calls");
        assert!(
            describe(&spent("answer", 3, 1, 10, 2))
                .ends_with("; 1 reported no usage, so the tokens are a lower bound")
        );
    }
}

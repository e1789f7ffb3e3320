//! `structured_selection`: the caller offers protocols by hash, and the first one this agent
//! serves (an active handler, in any instance on the database) is selected: the 0-RTT path, no
//! reasoning and no negotiation. When none is served, a caller that allowed natural-language
//! fallback and sent a document is negotiated with in drafting mode; any other caller gets
//! 1601, which lists what is served here.

use parley_anp::rpc::envelope::AnpCode;
use parley_anp::rpc::{NegotiateParams, NegotiationResult, RpcError};
use serde_json::json;

use super::{Endpoint, server_error};

/// How many served protocols a 1601 lists.
const LISTED: u32 = 20;

impl Endpoint {
    pub(super) async fn select(
        &self,
        params: &NegotiateParams,
    ) -> Result<NegotiationResult, RpcError> {
        if params.candidates.is_empty() {
            return Err(RpcError::anp(
                AnpCode::MoreInformationRequired,
                "structured selection needs candidate protocols: offer their hashes in \
                 body.candidateProtocols, or send a draft in natural_language_protocol_drafting mode",
                None,
            ));
        }
        let provider = self.agent.provider();
        let offered: Vec<_> = params.candidates.iter().map(|c| c.hash).collect();
        let selected = provider
            .select_served(&offered)
            .await
            .map_err(|e| server_error(&e))?;
        if let Some(hash) = selected {
            let reason = "The protocol is served here: call it at once (0-RTT).".to_owned();
            return Ok(self.accepted(params, &hash, reason));
        }
        if params.allow_drafting && params.draft().is_some() {
            return Box::pin(self.draft(params)).await;
        }
        let served = provider
            .served_protocols(LISTED)
            .await
            .map_err(|e| server_error(&e))?;
        let served: Vec<String> = served
            .iter()
            .map(|p| format!("sha256:{}", p.hash))
            .collect();
        Err(RpcError::anp(
            AnpCode::NoMatchingInterface,
            "no offered protocol is served here: negotiate one in \
             natural_language_protocol_drafting mode",
            Some(json!({
                "offered": offered.iter().map(|h| h.prefixed()).collect::<Vec<_>>(),
                "served": served,
            })),
        ))
    }
}

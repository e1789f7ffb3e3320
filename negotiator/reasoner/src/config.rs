//! [`ReasonerConfig`]: which backend the server runs, and the two constructors it calls with it,
//! [`build`] (the natural-language [`Reasoner`]) and [`build_protocol_reasoner`] (the
//! meta-protocol's [`ProtocolReasoner`]).

use std::sync::Arc;

use parley_capabilities::Capabilities;
use serde::{Deserialize, Serialize};

use crate::ReasonerError;
use crate::chat::OpenAiConfig;
use crate::dialogue::{BuiltinReasoner, OpenAiReasoner, Reasoner};
use crate::protocol_reasoner::{
    BuiltinProtocolReasoner, HybridProtocolReasoner, OpenAiProtocolReasoner, ProtocolReasoner,
};

/// Which backend to run, as written in the server configuration:
/// `{ backend = "builtin" }` or `{ backend = "openai", base_url = ..., model = ..., ... }`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum ReasonerConfig {
    #[default]
    Builtin,
    #[serde(rename = "openai")]
    OpenAi(OpenAiConfig),
}

/// Builds the configured backend over the given capabilities.
pub fn build(
    config: ReasonerConfig,
    capabilities: Arc<Capabilities>,
) -> Result<Arc<dyn Reasoner>, ReasonerError> {
    Ok(match config {
        ReasonerConfig::Builtin => Arc::new(BuiltinReasoner::new(capabilities)),
        ReasonerConfig::OpenAi(config) => Arc::new(OpenAiReasoner::new(config, capabilities)?),
    })
}

/// The protocol reasoner for a server configuration: `builtin` → [`BuiltinProtocolReasoner`];
/// `openai` → [`HybridProtocolReasoner`] over an [`OpenAiProtocolReasoner`] (built-in first,
/// then the model; the module docs say why). Capabilities are passed to each call, so none are
/// needed here. Fails only on an unusable `openai` config
/// ([`ReasonerError::InvalidConfig`]); nothing is sent to the endpoint.
pub fn build_protocol_reasoner(
    config: &ReasonerConfig,
) -> Result<Arc<dyn ProtocolReasoner>, ReasonerError> {
    Ok(match config {
        ReasonerConfig::Builtin => Arc::new(BuiltinProtocolReasoner),
        ReasonerConfig::OpenAi(openai) => Arc::new(HybridProtocolReasoner::new(Arc::new(
            OpenAiProtocolReasoner::new(openai.clone())?,
        ))),
    })
}

//! `parley peers`: the peers this agent knows by their API keys. `add` declares one in the store
//! and prints its key once, `list` shows them (never a digest), `revoke` stops honouring a key,
//! `keygen` makes a key for a peer declared in a peers file instead. Keys go to stdout alone, so
//! `KEY=$(parley peers add billing --negotiate)` works; everything else goes to stderr.

use std::process::ExitCode;

use parley_auth::{ApiKey, Grants, Scope, StoredKey};
use parley_store::{NewPeer, PeerRecord, StoreError};

use crate::access::peers_file::{self, FilePeer};

use super::{CliError, GrantArgs, LocalStore, PeersCommand};

pub(super) async fn run(command: PeersCommand) -> Result<ExitCode, CliError> {
    match command {
        PeersCommand::Add { id, grants, store } => add(&id, &grants, store).await,
        PeersCommand::List { json, store } => list(json, store).await,
        PeersCommand::Revoke { id, store } => revoke(&id, store).await,
        PeersCommand::Keygen { id, grants } => keygen(&id, &grants),
    }
}

impl GrantArgs {
    /// The grants asked for, checked: capability names of the capabilities file's form,
    /// protocol hashes of 64 hex digits (`sha256:` and upper case taken).
    fn grants(&self) -> Result<Grants, CliError> {
        let protocols = self.protocols.iter().map(|p| {
            let hex = p.strip_prefix("sha256:").unwrap_or(p);
            hex.to_ascii_lowercase()
        });
        let grants = Grants {
            negotiate: self.negotiate,
            talk: self.talk,
            capabilities: Scope::of(self.capabilities.iter().cloned()),
            protocols: Scope::of(protocols),
        };
        peers_file::check_grants(&grants).map_err(CliError::Usage)?;
        Ok(grants)
    }
}

/// A peer id and a fresh key, both checked.
fn new_key(id: &str) -> Result<ApiKey, CliError> {
    peers_file::check_peer_id(id).map_err(CliError::Usage)?;
    ApiKey::generate().map_err(|e| CliError::Usage(e.to_string()))
}

async fn add(id: &str, grants: &GrantArgs, store: LocalStore) -> Result<ExitCode, CliError> {
    let grants = grants.grants()?;
    let key = new_key(id)?;
    let StoredKey { key_id, digest } = key.stored();
    let store = store.open().await?;
    let peer = NewPeer {
        id: id.to_owned(),
        key_id: Some(key_id),
        key_digest: Some(digest),
        grants: serde_json::to_value(&grants).expect("grants serialize"),
    };
    match store.add_peer(peer).await {
        Ok(_) => {}
        Err(StoreError::Conflict { .. }) => {
            return Err(CliError::Usage(format!(
                "peer {id:?} is declared already (a revoked peer keeps its id); choose another id"
            )));
        }
        Err(e) => return Err(e.into()),
    }
    note!("peer {id} may: {}", describe(&grants));
    note!("its API key, shown this once (the store keeps only its digest):");
    out!("{}", key.reveal());
    Ok(ExitCode::SUCCESS)
}

async fn list(json: bool, store: LocalStore) -> Result<ExitCode, CliError> {
    let store = store.open_existing().await?;
    let peers = store.list_peers().await?;
    if json {
        let listed: Vec<serde_json::Value> = peers.iter().map(listed).collect();
        let pretty = serde_json::to_string_pretty(&listed).expect("JSON values serialize");
        out!("{pretty}");
        return Ok(ExitCode::SUCCESS);
    }
    if peers.is_empty() {
        note!("no peers declared yet (parley peers add ID)");
    }
    for peer in &peers {
        let grants = match serde_json::from_value::<Grants>(peer.grants.clone()) {
            Ok(grants) => describe(&grants),
            Err(_) => peer.grants.to_string(),
        };
        let revoked = peer.revoked_at.map_or(String::new(), |at| {
            format!("  revoked {}", at.format("%Y-%m-%d %H:%M"))
        });
        out!(
            "{}  key {}  created {}{revoked}  {grants}",
            peer.id,
            peer.key_id.as_deref().unwrap_or("-"),
            peer.created_at.format("%Y-%m-%d %H:%M"),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A peer as `list --json` shows it: everything but the key's digest.
fn listed(peer: &PeerRecord) -> serde_json::Value {
    serde_json::json!({
        "id": peer.id,
        "key_id": peer.key_id,
        "grants": peer.grants,
        "created_at": peer.created_at,
        "revoked_at": peer.revoked_at,
    })
}

async fn revoke(id: &str, store: LocalStore) -> Result<ExitCode, CliError> {
    let store = store.open_existing().await?;
    match store.revoke_peer(id).await {
        Ok(peer) => {
            let at = peer.revoked_at.expect("a revoked peer has a time");
            out!("peer {id} revoked at {at}");
            Ok(ExitCode::SUCCESS)
        }
        Err(StoreError::NotFound { .. }) => Err(CliError::Usage(format!(
            "no peer {id:?} is declared in the store (parley peers list)"
        ))),
        Err(e) => Err(e.into()),
    }
}

fn keygen(id: &str, grants: &GrantArgs) -> Result<ExitCode, CliError> {
    let grants = grants.grants()?;
    let key = new_key(id)?;
    let peer = FilePeer {
        id: id.to_owned(),
        key: Some(key.stored()),
        certificate: None,
        subject: None,
        did: None,
        grants,
    };
    note!("the entry for the peers file (the key's digest only):\n");
    note!("{}", peers_file::entry(&peer));
    note!("the key, for the peer, shown this once:");
    out!("{}", key.reveal());
    Ok(ExitCode::SUCCESS)
}

/// `negotiate, talk, capabilities getProductInfo,stock, protocols -`.
fn describe(grants: &Grants) -> String {
    let mut parts = Vec::new();
    if grants.negotiate {
        parts.push("negotiate".to_owned());
    }
    if grants.talk {
        parts.push("talk".to_owned());
    }
    parts.push(format!("capabilities {}", grants.capabilities));
    parts.push(format!("protocols {}", grants.protocols));
    parts.join(", ")
}

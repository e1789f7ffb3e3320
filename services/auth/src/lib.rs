//! Who a peer is and what it may do, decided from what it presents: API keys ([`key`]), OAuth
//! access tokens ([`jwt`]), ANP's DID-WBA signatures ([`did_wba`]) and origin proofs ([`origin_proof`]), the session tokens an agent
//! hands a peer that authenticated inside an NLIP message ([`session`]), and the [`Grants`] a
//! peer holds, which every message and capability call is checked against ([`grants`]). Pure:
//! no IO; the server looks keys up in its store and asks here.

pub mod did_signer;
pub mod did_wba;
pub mod grants;
pub mod jwt;
pub mod key;
pub mod origin_proof;
pub mod session;
#[cfg(feature = "testing")]
pub mod testing;

pub use grants::{Action, Grants, Scope};
pub use key::{ApiKey, KeyError, StoredKey};
pub use session::{SessionDigest, SessionToken};

//! The `[access]` table: what a peer without credentials may do, and the peers file that names
//! peers with theirs (keys, client certificates, DIDs) and their grants, the trusted JWT issuers
//! (`config::issuers`) and DID-WBA (`config::did_wba`). Peers made with
//! `parley peers add` live in the store and need no setting.

use std::path::PathBuf;

use clap::ValueEnum;
use parley_auth::Grants;
use serde::Deserialize;

use super::{ConfigError, invalid};

/// Who may do what (the `[access]` table).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessSettings {
    /// What a peer that presents no credential may do (`[access.anonymous]`: `negotiate`,
    /// `talk`, `capabilities`, `protocols`). Talk only by default: the reasoner answers, and
    /// nothing is negotiated or called on an anonymous peer's behalf.
    pub anonymous: Grants,
    /// A peers file (TOML): peers with their key digests or client certificates and grants,
    /// read and checked at start.
    pub peers_file: Option<PathBuf>,
    /// The OAuth 2.0 issuers whose access tokens (JWTs) name peers (`[[access.issuers]]`).
    pub issuers: Vec<super::issuers::IssuerSettings>,
    /// The sessions of peers that authenticate inside a message (`[access.sessions]`).
    pub sessions: SessionSettings,
    /// ANP DID-WBA credentials (`[access.did_wba]`), off by default.
    pub did_wba: super::did_wba::DidWbaSettings,
}

/// `[access.sessions]`: how long the session opened for a peer that authenticated inside an
/// NLIP message lasts, and how many are kept at once (see `crate::access::sessions`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SessionSettings {
    /// Seconds a session lasts (never beyond its access token's expiry).
    pub ttl_s: u64,
    /// Most sessions open at once; beyond it the one closest to its end is dropped.
    pub max: usize,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            ttl_s: crate::access::DEFAULT_SESSION_TTL_S,
            max: crate::access::DEFAULT_MAX_SESSIONS,
        }
    }
}

impl Default for AccessSettings {
    fn default() -> Self {
        AccessSettings {
            anonymous: Grants::talk_only(),
            peers_file: None,
            issuers: Vec::new(),
            sessions: SessionSettings::default(),
            did_wba: super::did_wba::DidWbaSettings::default(),
        }
    }
}

/// The shorthand for `[access.anonymous]` on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AnonymousAccess {
    /// Nothing: every request must present a credential.
    None,
    /// The natural-language reasoner only.
    Talk,
    /// Everything: negotiate, talk, every capability and every protocol.
    All,
}

impl AnonymousAccess {
    pub fn grants(self) -> Grants {
        match self {
            AnonymousAccess::None => Grants::default(),
            AnonymousAccess::Talk => Grants::talk_only(),
            AnonymousAccess::All => Grants::all(),
        }
    }
}

/// The `[access]` flags of `parley serve`; each also reads a `PARLEY_*` environment variable.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AccessArgs {
    /// What a peer without credentials may do: none, talk (the reasoner only) or all
    /// [default: talk]
    #[arg(long, env = "PARLEY_ANONYMOUS_ACCESS")]
    pub anonymous_access: Option<AnonymousAccess>,
    /// A peers file (TOML): peers, their keys or client certificates, and their grants
    #[arg(long, env = "PARLEY_PEERS_FILE", value_name = "FILE")]
    pub peers_file: Option<PathBuf>,
    #[command(flatten)]
    pub did_wba: super::did_wba::DidWbaArgs,
}

impl AccessArgs {
    /// Sets what the flags give over what the file said.
    pub(super) fn apply(&self, access: &mut AccessSettings) {
        if let Some(anonymous) = self.anonymous_access {
            access.anonymous = anonymous.grants();
        }
        if self.peers_file.is_some() {
            access.peers_file.clone_from(&self.peers_file);
        }
        self.did_wba.apply(&mut access.did_wba);
    }
}

impl AccessSettings {
    /// Checks that the peers file, when given, is a readable file (its entries are checked
    /// when [`crate::access::Access`] loads it, before a socket opens).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(path) = &self.peers_file
            && !path.is_file()
        {
            return Err(invalid(
                "access.peers_file",
                format!("{} is not a readable file", path.display()),
            ));
        }
        if self.sessions.ttl_s == 0 {
            return Err(invalid(
                "access.sessions.ttl_s",
                "must be at least 1 second",
            ));
        }
        if self.sessions.max == 0 {
            return Err(invalid("access.sessions.max", "must be at least 1"));
        }
        super::issuers::validate(&self.issuers)?;
        self.did_wba.validate()
    }
}

#[cfg(test)]
mod tests {
    use parley_auth::{Grants, Scope};

    use crate::config::{ServeArgs, Settings};

    #[test]
    fn anonymous_peers_talk_by_default_and_the_file_or_the_flag_say_otherwise() {
        assert_eq!(Settings::default().access.anonymous, Grants::talk_only());
        let s: Settings = toml::from_str(
            "[access.anonymous]\nnegotiate = true\ncapabilities = [\"getProductInfo\"]\n",
        )
        .expect("valid");
        assert!(s.access.anonymous.negotiate);
        assert!(!s.access.anonymous.talk);
        assert_eq!(
            s.access.anonymous.capabilities,
            Scope::of(["getProductInfo"])
        );
        let mut args = ServeArgs::default();
        args.access.anonymous_access = Some(super::AnonymousAccess::All);
        let s = Settings::load(&args).expect("valid");
        assert_eq!(s.access.anonymous, Grants::all());
        args.access.anonymous_access = Some(super::AnonymousAccess::None);
        assert_eq!(
            Settings::load(&args).expect("valid").access.anonymous,
            Grants::default()
        );
        let err = toml::from_str::<Settings>("[access.anonymous]\nadmin = true\n")
            .expect_err("unknown grant");
        assert!(err.to_string().contains("admin"), "{err}");

        let s: Settings = toml::from_str("[access.sessions]\nttl_s = 60\n").expect("valid");
        assert_eq!(
            (s.access.sessions.ttl_s, s.access.sessions.max),
            (60, 10_000)
        );
        let zero: Settings = toml::from_str("[access.sessions]\nmax = 0\n").expect("reads");
        let err = zero.validate().expect_err("no room for a session");
        assert!(err.to_string().contains("access.sessions.max"), "{err}");

        args.access.peers_file = Some("/nonexistent/peers.toml".into());
        let err = Settings::load(&args).expect_err("missing peers file");
        assert!(err.to_string().contains("access.peers_file"), "{err}");
    }
}
